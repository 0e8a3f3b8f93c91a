package io.epp4j.kvevents;

/**
 * What {@link KvBlockIndex} knows of one endpoint: its holder slot, the model and block size its
 * keys are computed with, and the map from its engine's block hashes to epp4j's block keys (which
 * resolves {@code BlockRemoved} and parent links). Fields read by routing threads are volatile;
 * the rest is guarded by the index's write lock.
 */
final class EndpointHoldings {
  final String id;
  /** The endpoint's position in every holder word; fixed for the life of the entry. */
  final int slot;
  volatile int blockSize;
  volatile String model;
  /**
   * This endpoint's own key → tier bits (GPU 1, offload 2), the same as its bits in the shared
   * planes: a walk left with one or two endpoints reads their small tables rather than the
   * pool-wide one, which misses the caches on every probe. Written under the index's write lock,
   * read lock-free; replaced, never emptied, when the endpoint is cleared.
   */
  volatile HolderTable own = new HolderTable();
  /**
   * Whether exceeding the index's block budget was logged for this endpoint: once, since a
   * publisher that overflows it does so again with every budget's worth of stores. Guarded by
   * the index's write lock.
   */
  boolean overflowReported;
  /**
   * Whether dropping Mamba states that waited for blocks never stored was logged for this
   * endpoint; once, like {@link #overflowReported}. Guarded by the index's write lock.
   */
  boolean pendingStatesDropReported;
  /** engine hash → request key; guarded by the index's write lock. */
  LongLongMap engineToKey = new LongLongMap(1024);
  /**
   * engine hash → the KV-cache groups (vLLM's {@code group_idx}, bit {@code min(group, 63)})
   * holding it on GPU, for the hashes of {@link #engineToKey} that a group other than 0 stored;
   * a hash not in it is held by group 0 alone. Null until a group other than 0 stores a block
   * (a model with one KV-cache group never has one), and again after a clear. Guarded by the
   * index's write lock.
   */
  @org.jspecify.annotations.Nullable LongLongMap groupsOf;
  /**
   * The sliding-window KV-cache groups this endpoint's events declared, and its Mamba groups
   * (window 0) once a state of theirs was matched to a block, or null (a model without them, an
   * engine that does not name them, and again after a clear). Written under the index's
   * write lock, read lock-free.
   */
  volatile @org.jspecify.annotations.Nullable WindowGroups windows;
  /**
   * Engine hashes a Mamba group named as holding a state before any group stored the block →
   * those groups' bits; vLLM caches each group's blocks of a step in turn, and a Mamba group that
   * leaves out the blocks it keeps no state for is matched by hash to the blocks the others store.
   * Null until needed, and again after a clear. Guarded by the write lock.
   */
  @org.jspecify.annotations.Nullable LongLongMap pendingStates;
  /**
   * Whether {@link #blockSize} came from this endpoint's own {@code BlockStored} events (rather
   * than the configured default or {@code setEndpointBlockSize}). Guarded by the write lock.
   */
  boolean sizeFromEvents;
  /**
   * The KV-cache groups (bit {@code min(group, 63)}) whose stores of an offload tier this
   * endpoint's events carried, kept across clears. vLLM's offloading connector describes the
   * copies of full-attention groups only, and removes a window group's copy (stored as a
   * placeholder, which is skipped) under an engine hash the described copy shares: a removal from
   * a group never seen storing there is not this index's copy. Guarded by the write lock.
   */
  long offloadGroups;
  /**
   * Copies of an engine hash stored beyond the first and not yet removed, per tier and KV-cache
   * group: engine hash → how many more removals the copy takes before it is gone. Index
   * {@code min(group, 63)} counts GPU copies of that group; {@link #OFFLOAD_COPIES} plus
   * {@code min(group, 63)} counts that group's copies on the offload tier. vLLM does not de-duplicate its GPU blocks (two requests that fill a block
   * of the same tokens each cache one under the same hash), and its offloading connector
   * re-announces the hashes of a shared prefix once per chunk; each copy is removed on its own.
   * Null until a hash is stored again while held (most engines never do), and again after a
   * clear; a map is created for a tier and group when it first needs one. Guarded by the write
   * lock.
   */
  LongLongMap @org.jspecify.annotations.Nullable [] extraCopies;
  /** The index of {@link #extraCopies} that counts offload-tier copies. */
  static final int OFFLOAD_COPIES = 64;
  /**
   * engine hash → the KV-cache groups (bit {@code min(group, 63)}) holding a copy of it on the
   * offload tier, once more than one group has stored there (before, the one group of
   * {@link #offloadGroups} holds every offloaded block); a hash the tier holds without an entry
   * is held by the groups of {@link #offloadSingleGroup}. vLLM's offloading connector describes
   * each full-attention group's copies under the same engine hashes with its own
   * {@code group_idx}, and removes each group's copies on their own. Guarded by the write lock.
   */
  @org.jspecify.annotations.Nullable LongLongMap offloadGroupsOf;
  /** The group that offloaded alone before {@link #offloadGroupsOf} was made, or 0 bits. */
  long offloadSingleGroup;
  final long[] scratch = new long[1];
  final long[] groupScratch = new long[1];
  /** Keys of the event being applied. */
  private long[] keys = new long[64];
  /** Receives the prefetch reads so they are not optimised away. */
  long sink;

  EndpointHoldings(String id, int slot, String model) {
    this.id = id;
    this.slot = slot;
    this.model = model;
  }

  /** A scratch array of at least {@code n} keys, reused across events (write lock held). */
  long[] keys(int n) {
    if (keys.length < n) {
      keys = new long[Math.max(n, keys.length * 2)];
    }
    return keys;
  }
}
