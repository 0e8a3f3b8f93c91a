package io.epp4j.kvevents;

import io.epp4j.api.Ticker;
import java.time.Duration;
import java.util.Arrays;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.jspecify.annotations.Nullable;

/**
 * Which replica holds which KV blocks, fed by vLLM KV events and read by the precise
 * prefix-cache scorers. Blocks are identified by epp4j's own chained {@link BlockKeys}, computed
 * from the token IDs in {@code BlockStored}; a per-endpoint map from engine hash to key resolves
 * {@code BlockRemoved} and parent links.
 *
 * <p>The index has three rooms: the real holders of every key ({@code Holders}), the holds it
 * assumes for requests just routed ({@code SpeculativeHolds}) and what it knows per endpoint
 * ({@code EndpointHoldings}); this class applies events to them and answers the scorers.
 *
 * <p>Holders live in a primitive open-addressing table ({@code HolderTable}): each block key
 * maps to one {@code long} packing two tier bits (GPU, offload) for each of the first 32 endpoint
 * slots, stored next to the key, so a lookup is usually one cache miss and no object exists per
 * block. Endpoints beyond the first 32 ever seen keep their bits in further tables of the same
 * kind, one per 32 slots ({@code Holders}), created while some slot of theirs holds a block.
 *
 * <p>Concurrency: all writers (event batches of every endpoint, resyncs, endpoint removal) take
 * one index-wide lock, because one word holds the bits of several endpoints; different
 * endpoints' streams therefore apply one after another, not in parallel. Readers on the routing
 * hot path never lock and never wait for a writer: table cells are written with release and read
 * with acquire semantics, and a resized table is published through a volatile field (the
 * argument is spelled out on {@code HolderTable}). Speculative entries are recorded under a
 * lock of their own (once per route for its batch of keys), never the write lock. Only the
 * inspection method {@link #blockCount} takes the write lock on the read side.
 *
 * <p>Memory is bounded by {@code maxBlocksPerEndpoint}: about {@value #BYTES_PER_ENTRY} bytes per
 * (endpoint, block) entry when no other endpoint holds the block (engine-hash map, shared holder
 * table and the endpoint's own table, 32–64 B each depending on where each table is between two
 * doublings; measured 139 B with 500,000 blocks over 4 endpoints), about 115 B when four
 * endpoints share every block; an endpoint that exceeds its budget is cleared and counted in
 * {@link KvEventMetrics#overflows()}.
 *
 * <p>Feed it from a ZeroMQ {@link KvEventSubscriber} or in process (a simulator) through
 * {@link #apply(String, KvEventBatch)}; register one instance with
 * {@code Router.builder().service(KvBlockIndex.class, index)} so every precise scorer shares it.
 */
public final class KvBlockIndex {

  /** Estimated heap bytes per (endpoint, block) entry, for capacity planning. */
  public static final int BYTES_PER_ENTRY = 140;

  private final int defaultBlockSize;
  private final int maxBlocksPerEndpoint;
  private final double cpuWeight;
  private final String defaultModel;
  private final long speculativeTtlNanos;
  private final Ticker ticker;
  private final KvEventMetrics metrics = new KvEventMetrics();
  private static final java.util.logging.Logger LOG =
      java.util.logging.Logger.getLogger(KvBlockIndex.class.getName());
  /** When a block size mismatch was last logged ({@code Long.MIN_VALUE}: never). */
  private final java.util.concurrent.atomic.AtomicLong lastMismatchReport =
      new java.util.concurrent.atomic.AtomicLong(Long.MIN_VALUE);
  /**
   * Whether {@link KvEventTelemetry} exports this index's metrics; also the lock of the two
   * fields below.
   */
  final java.util.concurrent.atomic.AtomicBoolean telemetryRegistered =
      new java.util.concurrent.atomic.AtomicBoolean();
  /** Open {@link KvEventTelemetry} leases; guarded by {@link #telemetryRegistered}. */
  int telemetryLeases;
  /** The export's instruments while a lease is open; guarded by {@link #telemetryRegistered}. */
  java.util.@Nullable List<AutoCloseable> telemetryInstruments;

  /** Serialises every writer: the holder table packs all endpoints' bits of a key in one word. */
  private final Object writeLock = new Object();
  /** Blocks whose cells the precise walk pulls into the cache at a time. A power of two. */
  private static final int TOUCH_AHEAD = 32;
  /**
   * Mamba states named before their blocks were stored, kept per endpoint; more are dropped (the
   * blocks of a step's states are stored in the same step).
   */
  private static final int MAX_PENDING_STATES = 1 << 14;
  private static final long TOUCH_SINK_MARK = 0x5EED_5EED_5EED_5EEDL;
  /** Written only when the touched words sum to a value no walk is expected to produce. */
  @SuppressWarnings("unused")
  private static long touchSink;

  /** Real holders of every key, per endpoint slot and tier. */
  private final Holders holders = new Holders();
  private final SpeculativeHolds speculative;
  private final int maxSpeculativeEntries;
  private final ConcurrentHashMap<String, EndpointHoldings> endpoints = new ConcurrentHashMap<>();
  private final AtomicInteger nextSlot = new AtomicInteger();
  /**
   * The endpoint holding each slot, null once it is forgotten (slots are never reused); copied on
   * write under {@link #slotLock}, read lock-free by walks that switch to an endpoint's own table.
   */
  private volatile EndpointHoldings[] bySlot = new EndpointHoldings[0];
  private final Object slotLock = new Object();
  /** Moves on after every endpoint the index starts or stops tracking. */
  private final AtomicLong endpointsVersion = new AtomicLong();
  /** Who wants to hear that the engine dropped blocks; copy-on-write, read once per event. */
  private volatile DropListener[] dropListeners = new DropListener[0];

  /**
   * Told, on the thread applying events, when an endpoint's engine reports that it no longer
   * holds a block: every tier of it removed, or the whole cache cleared. Entries the index drops
   * on its own (resync, budget overflow) are not reported as dropped, since the engine said
   * nothing about them: they are handed to {@link #lostTrack} instead.
   *
   * <p>Called with the index's write lock held, and on the subscriber's thread with its
   * membership lock too, so every other writer and {@code removeEndpoint} wait for a listener.
   * The interface is package-private: no code outside this module implements it. Its one
   * implementation, the {@code hybrid-prefix-cache-scorer}, only updates its routing memory,
   * under that endpoint's ring lock, in time bounded by the memory's capacity per endpoint (one
   * key for {@code dropped}), and never calls back into the index. Routes take the ring lock
   * too (to record a route: a prompt's keys at most), but nothing holding it waits for the
   * index or the subscriber, since the memory has no reference to either: the locks are always
   * taken write lock first, then ring lock, and cannot deadlock. A listener added here must keep
   * to that: no blocking, no I/O, no lock whose holder may wait for the index.
   */
  interface DropListener {
    void dropped(String endpointId, long key);

    void cleared(String endpointId);

    /**
     * The index stopped knowing {@code keys} on {@code endpointId} without the engine's word (a
     * resync after a sequence gap, or the endpoint's budget overflowed): as far as anyone knows
     * the engine still holds them. The array is the listener's to keep.
     */
    default void lostTrack(String endpointId, long[] keys) {}
  }

  synchronized void addDropListener(DropListener l) {
    DropListener[] a = java.util.Arrays.copyOf(dropListeners, dropListeners.length + 1);
    a[a.length - 1] = l;
    dropListeners = a;
  }

  synchronized void removeDropListener(DropListener l) {
    DropListener[] a = dropListeners;
    for (int i = 0; i < a.length; i++) {
      if (a[i] == l) {
        DropListener[] b = new DropListener[a.length - 1];
        System.arraycopy(a, 0, b, 0, i);
        System.arraycopy(a, i + 1, b, i, a.length - i - 1);
        dropListeners = b;
        return;
      }
    }
  }

  private KvBlockIndex(Builder b) {
    this.defaultBlockSize = b.defaultBlockSize;
    this.maxBlocksPerEndpoint = b.maxBlocksPerEndpoint;
    this.speculative = new SpeculativeHolds(b.speculativeTtl.toNanos(), b.maxSpeculativeEntries,
        metrics);
    this.maxSpeculativeEntries = b.maxSpeculativeEntries;
    this.cpuWeight = b.cpuWeight;
    this.defaultModel = b.model;
    this.speculativeTtlNanos = b.speculativeTtl.toNanos();
    this.ticker = b.ticker;
  }

  /** A builder with the defaults documented on its setters. */
  public static Builder builder() {
    return new Builder();
  }

  /** An index with default settings on the system clock. */
  public static KvBlockIndex create() {
    return builder().build();
  }

  // ------------------------------------------------------------------------------ event side

  /** Applies one batch of events from {@code endpointId}. Never throws for bad event content. */
  public void apply(String endpointId, KvEventBatch batch) {
    synchronized (writeLock) {
      // looked up under the lock: one taken before could be removed (and cleared) before the
      // writes below, which would then hold keys for a slot nobody clears any more
      EndpointHoldings e = endpoint(endpointId);
      for (KvEvent ev : batch.events()) {
        applyLocked(e, ev);
      }
    }
    metrics.batches.increment();
    if (batch.timestampSeconds() > 0) {
      long lag = System.currentTimeMillis() - (long) (batch.timestampSeconds() * 1000);
      metrics.lagMillis.set(Math.max(0, lag));
    }
  }

  /**
   * Applies one event from {@code endpointId}. Returns false when a {@code BlockStored} could not
   * be chained because its parent is unknown (its blocks are dropped and counted as orphans).
   */
  public boolean apply(String endpointId, KvEvent event) {
    synchronized (writeLock) {
      return applyLocked(endpoint(endpointId), event); // looked up under the lock, as above
    }
  }

  private boolean applyLocked(EndpointHoldings e, KvEvent ev) {
    metrics.events.increment();
    if (ev instanceof KvEvent.BlockStored s) {
      return store(e, s);
    } else if (ev instanceof KvEvent.BlockRemoved r) {
      remove(e, r);
    } else {
      clearLocked(e);
      for (DropListener l : dropListeners) {
        l.cleared(e.id);
      }
    }
    return true;
  }

  private boolean store(EndpointHoldings e, KvEvent.BlockStored s) {
    int bs = s.blockSize();
    boolean gpu = s.medium() == Medium.GPU;
    if (s.recurrentState() && s.tokenIds().length == 0) {
      // a Mamba group's states, named by the hashes of blocks the other groups stored
      if (gpu) {
        markStates(e, s.blockHashes(), s.group());
      }
      metrics.blocksStored.add(s.blockHashes().length);
      return true;
    }
    if (!gpu && bs != (e.blockSize > 0 ? e.blockSize : defaultBlockSize)) {
      // The engine's block size is its GPU blocks'. An offload tier's store of another size
      // (vLLM's LMCache connector forwards LMCache's chunks of 256 tokens, and a prompt's
      // shorter last chunk) cannot be keyed at it, and must not change it: requests would be
      // keyed at the chunk size until the next GPU store, and miss everything the engine holds.
      metrics.otherSizeBlocks.add(s.blockHashes().length);
      return true;
    }
    if (bs != e.blockSize) {
      int current = e.blockSize;
      // KV-cache groups of other block sizes: vLLM hashes requests at the smallest size (its
      // hash_block_size), publishes a larger group's blocks under the hash at their end and a
      // prefix ending inside one as a partial entry of the smallest size. Keys stay at that size.
      boolean groups = s.group() != 0 || e.groupsOf != null;
      if (groups && e.sizeFromEvents && bs > current && bs % current == 0) {
        if (s.recurrentState() && gpu) {
          // a Mamba group's block spans several keyed blocks; vLLM names it by the hash of the
          // last, the block whose end holds the state
          markStates(e, s.blockHashes(), s.group());
        }
        metrics.otherSizeBlocks.add(s.blockHashes().length);
        return true;
      }
      if (groups && e.sizeFromEvents && bs < current && current % bs == 0) {
        // what was keyed at the larger size no request will match any more
        clearLocked(e);
        for (DropListener l : dropListeners) {
          l.cleared(e.id);
        }
      }
      learnBlockSize(e, bs);
    }
    if (gpu) {
      e.sizeFromEvents = true;
    }
    long[] hashes = s.blockHashes();
    long parentKey;
    if (s.hasParent()) {
      if (!e.engineToKey.get(s.parentHash(), e.scratch)) {
        metrics.orphanBlocks.add(hashes.length);
        return false;
      }
      parentKey = e.scratch[0];
    } else {
      String lora = s.loraName() != null ? s.loraName()
          : s.loraId() >= 0 ? "#" + s.loraId() : null;
      parentKey = BlockKeys.seed(e.model, lora, s.cacheSalt());
    }
    int bit = s.medium().bit();
    int[] tokens = s.tokenIds();
    boolean anySpeculative = speculative.any();
    // compute the keys, then touch the cells the last pass will write in a loop small enough
    // that the cache misses of all blocks overlap instead of being paid one after another
    long[] keys = e.keys(hashes.length);
    // An offload tier stores copies of blocks the engine stored on GPU, under the same engine
    // hashes; vLLM's offloading connector leaves their extra keys out (the salt of a root
    // block), so a hash the endpoint already keyed keeps that key rather than one computed
    // without the salt
    boolean copies = bit != Medium.GPU.bit();
    if (copies) {
      long before = e.offloadGroups;
      e.offloadGroups |= groupBit(s.group());
      if (e.offloadGroups != before && before != 0 && e.offloadGroupsOf == null) {
        // a second group offloads: which groups hold each offloaded hash is kept from now on
        e.offloadGroupsOf = new LongLongMap(1024);
        e.offloadSingleGroup = before;
      }
    }
    for (int i = 0; i < hashes.length; i++) {
      if (copies && e.engineToKey.get(hashes[i], e.scratch)) {
        parentKey = e.scratch[0];
      } else {
        parentKey = BlockKeys.next(parentKey, tokens, i * bs, bs);
      }
      keys[i] = parentKey;
    }
    long touched = 0;
    HolderTable own = e.own;
    for (int i = 0; i < hashes.length; i++) {
      touched += holders.table.touch(keys[i]) + e.engineToKey.touch(hashes[i]) + own.touch(keys[i]);
    }
    e.sink = touched;
    // a hybrid model stores each block once per KV-cache group, under the same engine hash
    boolean groups = bit == Medium.GPU.bit() && (s.group() != 0 || e.groupsOf != null);
    // a sliding-window group's copies are tracked on their own: a hit needs its window
    int window = bit == Medium.GPU.bit() ? s.slidingWindow() : 0;
    for (int i = 0; i < hashes.length; i++) {
      if (e.engineToKey.size() >= maxBlocksPerEndpoint) {
        metrics.overflows.increment();
        if (!e.overflowReported) {
          // an engine in sync never holds more than its cache: this one's cache is larger than
          // the budget, or its publisher does not report what it evicts; every later overflow
          // of it is the same story, told by the counter alone
          e.overflowReported = true;
          LOG.warning("endpoint " + e.id + " holds more than maxBlocksPerEndpoint ("
              + maxBlocksPerEndpoint + ") blocks by its KV events: its entries were dropped and"
              + " are rebuilt from new events. Its engine's cache (num_gpu_blocks and any"
              + " offload tier) is larger than that budget, or its engine does not publish the"
              + " blocks it evicts. Counted in overflows; not logged again for this endpoint");
        }
        loseTrackLocked(e);
      }
      long key = keys[i];
      // another copy of a block this tier and group already hold: each copy is removed on its own
      long offloadedBy = copies ? offloadHolders(e, hashes[i], key) : 0;
      boolean again = copies ? (offloadedBy & groupBit(s.group())) != 0
          : heldAlready(e, hashes[i], key, bit, s.group());
      if (groups && !joinGroup(e, hashes[i], key, s.group())) {
        continue; // another group's block with other content under this hash: keep that one
      }
      if (e.engineToKey.put(hashes[i], key, e.scratch) && e.scratch[0] != key) {
        // The engine hash named other content here before (a malformed event, a block naming
        // itself as parent, a hash collision): that content is gone from this endpoint, and
        // nothing could remove it later, since only its hash led to it.
        dropCopies(e, hashes[i]);
        forget(e, e.scratch[0]);
      }
      if (again) {
        addCopy(e, copyIndex(bit, s.group()), hashes[i]);
      }
      holders.add(key, e.slot, bit);
      e.own.or(key, bit);
      if (copies && e.offloadGroupsOf != null) {
        e.offloadGroupsOf.put(hashes[i], offloadedBy | groupBit(s.group()));
      }
      if (window > 0 || (s.recurrentState() && bit == Medium.GPU.bit())) {
        windowTable(e, s.group(), window).or(key, 1);
      }
      if (e.pendingStates != null) {
        resolvePendingState(e, hashes[i], key);
      }
    }
    if (anySpeculative) {
      speculative.confirm(e.slot, keys, hashes.length);
    }
    metrics.blocksStored.add(hashes.length);
    return true;
  }

  private void remove(EndpointHoldings e, KvEvent.BlockRemoved r) {
    int bit = r.medium().bit();
    DropListener[] listeners = dropListeners;
    long[] hashes = r.blockHashes();
    if (bit != Medium.GPU.bit() && (e.offloadGroups & groupBit(r.group())) == 0) {
      // an offload copy of a group that never stored one here (vLLM's placeholder for a
      // window group's copy): the copy the index holds under these hashes is another group's
      metrics.unknownRemovals.add(hashes.length);
      return;
    }
    if (hashes.length > 1) {
      // touch first, as in store: the lookups below then hit the caches
      long touched = 0;
      for (long h : hashes) {
        if (e.engineToKey.get(h, e.scratch)) {
          touched += holders.table.touch(e.scratch[0]);
        }
      }
      e.sink = touched;
    }
    int removed = 0;
    boolean groups = bit == Medium.GPU.bit() && (r.group() != 0 || e.groupsOf != null);
    for (long h : hashes) {
      if (!e.engineToKey.get(h, e.scratch)) {
        metrics.unknownRemovals.increment();
        continue;
      }
      long key = e.scratch[0];
      if (takeCopy(e, copyIndex(bit, r.group()), h)) {
        removed++; // one of several copies: the others still hold the block
        continue;
      }
      LongLongMap offloaded = e.offloadGroupsOf;
      if (bit != Medium.GPU.bit() && offloaded != null) {
        long held = offloadHolders(e, h, key);
        if ((held & groupBit(r.group())) == 0) {
          metrics.unknownRemovals.increment(); // this group's copy was never seen stored
          continue;
        }
        long rest = held & ~groupBit(r.group());
        if (rest != 0) {
          // the other groups' copies are counted on, but a prefix needs every group's: the
          // engine can no longer load this block from the tier
          offloaded.put(h, rest);
        } else {
          offloaded.remove(h);
        }
      }
      if (groups) {
        long held = groupsHolding(e, h);
        long rest = held & ~groupBit(r.group());
        if (rest == held) {
          metrics.unknownRemovals.increment(); // this group's copy was never seen stored
          continue;
        }
        WindowGroups w = e.windows;
        int wi = w == null ? -1 : w.indexOf(r.group());
        if (w != null && wi >= 0) {
          w.held[wi].andNot(key, 1);
        }
        if (rest != 0) {
          setGroups(e, h, rest); // another KV-cache group still holds the block
          removed++;
          continue;
        }
        if (e.groupsOf != null) {
          e.groupsOf.remove(h);
        }
      }
      int left = holders.remove(key, e.slot, bit);
      e.own.andNot(key, bit);
      if (left == 0) {
        e.engineToKey.remove(h);
        dropCopies(e, h);
        for (DropListener l : listeners) {
          l.dropped(e.id, key);
        }
      }
      removed++;
    }
    metrics.blocksRemoved.add(removed);
  }

  /**
   * Records that Mamba group {@code group} of {@code e} holds the state at the end of the blocks
   * stored under {@code hashes}: blocks another group stored with their tokens, or will store
   * later in the step (vLLM caches each group's blocks in turn, and a model's Mamba layers often
   * come first), which {@link #resolvePendingState} then completes.
   */
  private void markStates(EndpointHoldings e, long[] hashes, int group) {
    long bit = groupBit(group);
    for (long h : hashes) {
      if (e.engineToKey.get(h, e.scratch)) {
        long key = e.scratch[0];
        long held = groupsHolding(e, h);
        if ((held & bit) != 0) {
          continue; // this group's state there is known already
        }
        setGroups(e, h, held | bit);
        windowTable(e, group, 0).or(key, 1);
        continue;
      }
      LongLongMap p = e.pendingStates;
      if (p == null || p.size() >= MAX_PENDING_STATES) {
        // a step's states wait for the store of their blocks; more than that were never stored
        if (p != null) {
          droppedPendingStates(e, p.size());
        }
        p = new LongLongMap(64);
        e.pendingStates = p;
      }
      long waiting = p.get(h, e.scratch) ? e.scratch[0] : 0;
      p.put(h, waiting | bit);
    }
  }

  /**
   * Counts the Mamba states of {@code e} that waited for blocks never stored, dropped to make
   * room, and logs it the first time for the endpoint.
   */
  private void droppedPendingStates(EndpointHoldings e, int count) {
    metrics.droppedMambaStates.add(count);
    if (!e.pendingStatesDropReported) {
      // an engine in sync stores a step's blocks in the step that names their states: one that
      // names this many without storing them says the same again later, told by the counter
      e.pendingStatesDropReported = true;
      LOG.warning("endpoint " + e.id + ": " + count + " Mamba states named blocks its KV events"
          + " never stored; they were dropped (at most " + MAX_PENDING_STATES + " wait per"
          + " endpoint). Its publisher misses stores (a connector that forwards only some of"
          + " them), or the hybrid groups hash their blocks differently. Counted in"
          + " droppedMambaStates; not logged again for this endpoint");
    }
  }

  /** Completes the states of Mamba groups that named {@code h} before its block was stored. */
  private static void resolvePendingState(EndpointHoldings e, long h, long key) {
    LongLongMap p = e.pendingStates;
    if (p == null || !p.get(h, e.scratch)) {
      return;
    }
    long waiting = e.scratch[0];
    p.remove(h);
    long held = groupsHolding(e, h);
    setGroups(e, h, held | waiting);
    for (int g = 0; g < 64; g++) {
      if ((waiting & (1L << g)) != 0) {
        windowTable(e, g, 0).or(key, 1);
      }
    }
  }

  /**
   * The table of the keys sliding-window group {@code group} of {@code e} holds on GPU, the group
   * declared with {@code window} tokens first if it was not (or was with another window).
   */
  private static HolderTable windowTable(EndpointHoldings e, int group, int window) {
    WindowGroups w = e.windows;
    int i = w == null ? -1 : w.indexOf(group);
    if (w == null || i < 0 || w.windows[i] != window) {
      w = WindowGroups.with(w, group, window);
      e.windows = w;
      i = w.indexOf(group);
    }
    return w.held[i];
  }

  /**
   * Whether {@code e} already holds engine hash {@code h} as {@code key} on GPU for KV-cache group
   * {@code group}, so that a store of it is another copy.
   */
  private static boolean heldAlready(EndpointHoldings e, long h, long key, int bit, int group) {
    if (!e.engineToKey.get(h, e.scratch) || e.scratch[0] != key
        || (e.own.get(key) & bit) == 0) {
      return false;
    }
    return (groupsHolding(e, h) & groupBit(group)) != 0;
  }

  /**
   * The KV-cache groups (bits) holding a copy of engine hash {@code h}, as {@code key}, on the
   * offload tier of {@code e}; 0 when none does. Groups whose copies remain after another
   * group's last one left are still counted, though the tier no longer serves the block.
   */
  private static long offloadHolders(EndpointHoldings e, long h, long key) {
    if (!e.engineToKey.get(h, e.scratch) || e.scratch[0] != key) {
      return 0;
    }
    LongLongMap m = e.offloadGroupsOf;
    if (m != null && m.get(h, e.groupScratch)) {
      return e.groupScratch[0];
    }
    if ((e.own.get(key) & Medium.CPU.bit()) == 0) {
      return 0;
    }
    return m == null ? e.offloadGroups : e.offloadSingleGroup;
  }

  /** The index of {@link EndpointHoldings#extraCopies} for a tier and KV-cache group. */
  private static int copyIndex(int bit, int group) {
    return bit == Medium.GPU.bit() ? Math.min(group, 63)
        : EndpointHoldings.OFFLOAD_COPIES + Math.min(group, 63);
  }

  private static void addCopy(EndpointHoldings e, int index, long h) {
    LongLongMap[] all = e.extraCopies;
    if (all == null) {
      all = new LongLongMap[EndpointHoldings.OFFLOAD_COPIES + 64];
      e.extraCopies = all;
    }
    LongLongMap m = all[index];
    if (m == null) {
      m = new LongLongMap(64);
      all[index] = m;
    }
    long n = m.get(h, e.scratch) ? e.scratch[0] : 0;
    m.put(h, n + 1);
  }

  /** Takes one extra copy of {@code h} away; false when none is left (the last copy goes). */
  private static boolean takeCopy(EndpointHoldings e, int index, long h) {
    LongLongMap[] all = e.extraCopies;
    LongLongMap m = all == null ? null : all[index];
    if (m == null || !m.get(h, e.groupScratch)) {
      return false;
    }
    long n = e.groupScratch[0];
    if (n <= 1) {
      m.remove(h);
    } else {
      m.put(h, n - 1);
    }
    return true;
  }

  /** Forgets every extra copy of {@code h}: the hash left the endpoint, or names other content. */
  private static void dropCopies(EndpointHoldings e, long h) {
    LongLongMap offloaded = e.offloadGroupsOf;
    if (offloaded != null) {
      offloaded.remove(h);
    }
    LongLongMap[] all = e.extraCopies;
    if (all != null) {
      for (LongLongMap m : all) {
        if (m != null) {
          m.remove(h);
        }
      }
    }
  }

  /** The bit of a KV-cache group in {@link EndpointHoldings#groupsOf}. */
  private static long groupBit(int group) {
    return 1L << Math.min(group, 63);
  }

  /** The KV-cache groups holding engine hash {@code h} (known to {@code e}) on GPU. */
  private static long groupsHolding(EndpointHoldings e, long h) {
    LongLongMap g = e.groupsOf;
    return g != null && g.get(h, e.groupScratch) ? e.groupScratch[0] : groupBit(0);
  }

  private static void setGroups(EndpointHoldings e, long h, long groups) {
    LongLongMap g = e.groupsOf;
    if (groups == groupBit(0)) {
      if (g != null) {
        g.remove(h); // group 0 alone is what no entry means
      }
      return;
    }
    if (g == null) {
      g = new LongLongMap(1024);
      e.groupsOf = g;
    }
    g.put(h, groups);
  }

  /**
   * Records that KV-cache group {@code group} stored engine hash {@code h} as {@code key} on GPU.
   * False when other groups hold the hash with other content (groups whose blocks have other
   * sizes): their block is kept, and this one is not stored.
   */
  private static boolean joinGroup(EndpointHoldings e, long h, long key, int group) {
    long bit = groupBit(group);
    if (!e.engineToKey.get(h, e.scratch)) {
      setGroups(e, h, bit);
      return true;
    }
    long held = groupsHolding(e, h);
    if (e.scratch[0] == key) {
      setGroups(e, h, held | bit);
      return true;
    }
    if ((held & ~bit) != 0) {
      return false;
    }
    setGroups(e, h, bit); // this group's hash names other content now: replaced below
    return true;
  }

  /** Drops {@code key} from every tier of {@code e}, as a removal by the engine would. */
  private void forget(EndpointHoldings e, long key) {
    metrics.reusedHashes.increment();
    holders.remove(key, e.slot, 3);
    e.own.andNot(key, 3);
    for (DropListener l : dropListeners) {
      l.dropped(e.id, key);
    }
  }

  private void clearLocked(EndpointHoldings e) {
    int slot = e.slot;
    e.engineToKey.forEachValue(key -> holders.remove(key, slot, 3));
    e.engineToKey = new LongLongMap(1024);
    e.groupsOf = null;
    e.extraCopies = null;
    e.windows = null;
    e.pendingStates = null;
    if (e.offloadGroupsOf != null) {
      // the groups that offload are kept across clears, and with them the per-hash record
      e.offloadGroupsOf = new LongLongMap(1024);
      e.offloadSingleGroup = 0;
    }
    e.own = new HolderTable();
  }

  /**
   * Drops every entry of an endpoint, e.g. after an unrecoverable sequence gap. Counted in
   * {@link KvEventMetrics#resyncs()} once the entries are gone, and only when there were some: a
   * resync of an endpoint that holds no block (unknown to the index, or dropped already) drops
   * nothing and is not counted. The endpoint's block size and model are kept.
   */
  public void resync(String endpointId) {
    boolean dropped;
    synchronized (writeLock) {
      // looked up under the lock: one taken before could be removed meanwhile, and a drop of it
      // would drop nothing
      EndpointHoldings e = endpoints.get(endpointId);
      dropped = e != null && e.engineToKey.size() > 0;
      if (e != null) {
        loseTrackLocked(e);
      }
    }
    if (dropped) {
      // after the drop: whoever reads the count sees the index without those entries
      metrics.resyncs.increment();
    }
  }

  /**
   * Drops every entry of an endpoint whose engine restarted (a new process, its cache empty),
   * counted as a resync as {@link #resync} counts one: after the drop, and only when it held
   * blocks. Unlike {@link #resync}, the drop listeners hear a cleared cache: the engine holds
   * none of those blocks any more, so nothing may vouch for them.
   */
  void engineRestarted(String endpointId) {
    boolean dropped;
    synchronized (writeLock) {
      EndpointHoldings e = endpoints.get(endpointId);
      dropped = e != null && e.engineToKey.size() > 0;
      if (e != null) {
        clearLocked(e);
        for (DropListener l : dropListeners) {
          l.cleared(e.id);
        }
      }
    }
    if (dropped) {
      metrics.resyncs.increment();
    }
  }

  /**
   * Drops every entry of an endpoint on the index's own account (a resync or an overflow, not the
   * engine's word) and hands the keys it held to the drop listeners' {@code lostTrack}.
   */
  private void loseTrackLocked(EndpointHoldings e) {
    DropListener[] listeners = dropListeners;
    if (listeners.length > 0 && e.engineToKey.size() > 0) {
      long[] keys = new long[e.engineToKey.size()];
      int[] n = {0};
      e.engineToKey.forEachValue(key -> {
        if (n[0] < keys.length) {
          keys[n[0]++] = key;
        }
      });
      long[] lost = n[0] == keys.length ? keys : java.util.Arrays.copyOf(keys, n[0]);
      clearLocked(e);
      for (DropListener l : listeners) {
        l.lostTrack(e.id, lost);
      }
    } else {
      clearLocked(e);
    }
  }

  /** Forgets an endpoint entirely (it left the pool). */
  public void removeEndpoint(String endpointId) {
    synchronized (writeLock) {
      // removed and cleared in one step: a writer never holds an endpoint that is gone
      EndpointHoldings e = endpoints.remove(endpointId);
      if (e != null) {
        clearLocked(e);
        synchronized (slotLock) {
          EndpointHoldings[] bs = bySlot.clone();
          bs[e.slot] = null;
          bySlot = bs;
        }
        speculative.dropSlot(e.slot);
        endpointsVersion.incrementAndGet();
      }
    }
  }

  /**
   * Names the model an endpoint serves; its keys are then seeded with it and requests for other
   * models never match it. Set it before feeding events (keys already stored keep their seed).
   */
  public void setEndpointModel(String endpointId, String model) {
    Objects.requireNonNull(model, "model");
    EndpointHoldings e = endpoint(endpointId);
    if (!model.equals(e.model)) {
      e.model = model;
      endpointsVersion.incrementAndGet(); // layouts built from the old model are stale
    }
  }

  /**
   * Tells the index an endpoint's block size before its first event (from
   * {@code vllm:cache_config_info}); events override it.
   */
  public void setEndpointBlockSize(String endpointId, int blockSizeTokens) {
    if (blockSizeTokens < 1) {
      throw new IllegalArgumentException("blockSizeTokens must be >= 1, got " + blockSizeTokens);
    }
    EndpointHoldings e = endpoint(endpointId);
    if (e.blockSize != blockSizeTokens) {
      learnBlockSize(e, blockSizeTokens);
    }
  }

  /**
   * The endpoint's engine uses {@code bs} tokens per block from now on. A size other than the
   * configured one is counted and reported (at most once per
   * {@link KvEventSubscriber#REPORT_INTERVAL}): precise mode scores the wrong blocks with it
   * until it learns the engine's size, and whatever else was configured alike keeps doing so.
   */
  private void learnBlockSize(EndpointHoldings e, int bs) {
    e.blockSize = bs;
    endpointsVersion.incrementAndGet(); // layouts built from the old size are stale
    if (bs == defaultBlockSize) {
      return;
    }
    metrics.blockSizeMismatches.increment();
    long now = System.nanoTime();
    long last = lastMismatchReport.get();
    if ((last == Long.MIN_VALUE || now - last >= KvEventSubscriber.REPORT_INTERVAL.toNanos())
        && lastMismatchReport.compareAndSet(last, now)) {
      LOG.warning("endpoint " + e.id + " uses KV blocks of " + bs + " tokens but precise mode is"
          + " configured for " + defaultBlockSize + " (blockSizeTokens): its own size is used for"
          + " it from now on, but requests scored before it was known, and anything else"
          + " configured for " + defaultBlockSize + ", used the wrong blocks; set blockSizeTokens"
          + " to the engines' --block-size (" + metrics.blockSizeMismatches()
          + " mismatch(es) so far, the blockSizeMismatches metric)");
    }
  }

  private EndpointHoldings endpoint(String id) {
    EndpointHoldings e = endpoints.get(id);
    if (e == null) {
      e = endpoints.computeIfAbsent(id, k -> {
        EndpointHoldings created = new EndpointHoldings(k, nextSlot.getAndIncrement(), defaultModel);
        synchronized (slotLock) { // innermost lock: taken inside the map's, never around it
          EndpointHoldings[] bs = bySlot;
          bs = Arrays.copyOf(bs, Math.max(bs.length, created.slot + 1));
          bs[created.slot] = created;
          bySlot = bs;
        }
        return created;
      });
      endpointsVersion.incrementAndGet(); // after the entry is visible
    }
    return e;
  }

  // ------------------------------------------------------------------------------ speculative

  /**
   * Records that requests for {@code keys} were just sent to {@code endpointId}: until the real
   * {@code BlockStored} arrives (or the TTL passes) the index treats them as held on GPU, so a
   * burst of requests with the same new prefix follows the first one.
   */
  public void recordSpeculative(String endpointId, long[] keys, long nowNanos) {
    recordSpeculative(endpointId, keys, 0, nowNanos);
  }

  /**
   * {@link #recordSpeculative(String, long[], long)} for a chain whose first {@code knownReal}
   * keys the endpoint was seen to hold for real a moment ago (by the lookup of the same routing
   * decision): those would be skipped one probe at a time, so they are not looked at again. The
   * endpoint becomes known to the index even when nothing is left to record.
   */
  void recordSpeculative(String endpointId, long[] keys, int knownReal, long nowNanos) {
    if (!speculative.enabled() || keys.length == 0) {
      return;
    }
    EndpointHoldings e = endpoint(endpointId);
    int slot = e.slot;
    int to = Math.min(keys.length, maxSpeculativeEntries);
    WindowGroups w = e.windows;
    // with window groups, a block held for real may still lack their copies: look at each
    int from = w != null ? 0 : Math.max(0, Math.min(knownReal, to));
    if (from == to) {
      return;
    }
    speculative.record(e.own, w, slot, keys, from, to, nowNanos);
  }

  /** Drops speculative entries whose TTL has passed. */
  public void purgeSpeculative(long nowNanos) {
    speculative.purge(nowNanos);
  }

  // ------------------------------------------------------------------------------ read side

  /**
   * The endpoint's view for scoring, or {@code null} when the index has never heard of it.
   * Lock-free.
   */
  @Nullable EndpointHoldings endpointView(String endpointId) {
    return endpoints.get(endpointId);
  }

  /**
   * A number that moves on after the index starts or stops tracking an endpoint, or learns an
   * endpoint's block size or model: views and block sizes read after reading it stay valid while
   * it has not moved.
   */
  long endpointsVersion() {
    return endpointsVersion.get();
  }

  /** Keys some endpoint holds for real; takes the write lock (for inspection and tests). */
  int heldKeys() {
    synchronized (writeLock) {
      return holders.liveKeys();
    }
  }

  /** The endpoints the index holds state for (a copy; for inspection and tests). */
  java.util.Set<String> trackedEndpoints() {
    return java.util.Set.copyOf(endpoints.keySet());
  }

  /** The block size the endpoint uses: learned from events, else given, else 0. */
  public int endpointBlockSize(String endpointId) {
    EndpointHoldings e = endpoints.get(endpointId);
    return e == null ? 0 : e.blockSize;
  }

  /** The model an endpoint's keys are seeded with ({@code ""} when unknown). */
  public String endpointModel(String endpointId) {
    EndpointHoldings e = endpoints.get(endpointId);
    return e == null ? defaultModel : e.model;
  }

  /** Block size used when neither events nor metrics tell it. */
  public int defaultBlockSize() {
    return defaultBlockSize;
  }

  /** Blocks kept per endpoint before it is cleared, as built. */
  int maxBlocksPerEndpoint() {
    return maxBlocksPerEndpoint;
  }

  /** The model every endpoint is assumed to serve unless told otherwise, as built. */
  String defaultModel() {
    return defaultModel;
  }

  /** How long a speculative entry counts, as built; 0 when they are disabled. */
  long speculativeTtlNanos() {
    return speculativeTtlNanos;
  }

  /** The weight of a hit on a given tier (GPU 1.0, offloaded tiers {@code cpuWeight}). */
  public double weight(Medium medium) {
    return medium == Medium.GPU ? 1.0 : cpuWeight;
  }

  /** Number of blocks (engine hashes) the index holds for an endpoint. */
  public int blockCount(String endpointId) {
    EndpointHoldings e = endpoints.get(endpointId);
    if (e == null) {
      return 0;
    }
    synchronized (writeLock) {
      return e.engineToKey.size();
    }
  }

  /** The tiers on which {@code endpointId} holds {@code key} (real entries only). */
  public java.util.Set<Medium> tiers(String endpointId, long key) {
    EndpointHoldings e = endpoints.get(endpointId);
    if (e == null) {
      return java.util.Set.of();
    }
    int bits = holders.bits(key, e.slot);
    java.util.EnumSet<Medium> s = java.util.EnumSet.noneOf(Medium.class);
    if ((bits & 1) != 0) {
      s.add(Medium.GPU);
    }
    if ((bits & 2) != 0) {
      s.add(Medium.CPU);
    }
    return s;
  }

  /**
   * Weight of {@code slot}'s hold on {@code key}: 1.0 on GPU or speculative, {@code cpuWeight}
   * on an offload tier, 0 when absent.
   */
  double holdWeight(long key, int slot, long nowNanos) {
    int bits = holders.bits(key, slot);
    if ((bits & 1) != 0) {
      return 1.0;
    }
    if (bits != 0) {
      return cpuWeight;
    }
    return speculative.holds(key, slot, nowNanos) ? 1.0 : 0.0;
  }

  /**
   * Weighted length of the run of consecutive blocks from block 0 that {@code endpointId} holds
   * (GPU and speculative 1.0 per block, offloaded {@code cpuWeight}). Lock-free. The keys are
   * taken as the full blocks of a prompt that goes on past the last of them; for a prompt that
   * ends exactly at a block's end see {@link #prefixWeight(String, long[], int, long)}.
   */
  public double prefixWeight(String endpointId, long[] keys, long nowNanos) {
    return prefixWeight(endpointId, keys, keys.length, nowNanos);
  }

  /**
   * The number of {@code keys}' blocks, those of a prompt of {@code promptTokens} tokens at
   * {@code blockSize}, that vLLM may take from its cache: it computes a prompt's last token
   * whatever it holds ({@code max_cache_hit_length = num_tokens - 1}), so a prompt that ends
   * exactly at a block's end can be served at most the blocks before that one.
   */
  static int servableBlocks(long[] keys, int promptTokens, int blockSize) {
    return Math.min(keys.length, Math.max(0, promptTokens - 1) / Math.max(1, blockSize));
  }

  /**
   * {@link #prefixWeight(String, long[], long)} for a prompt of which vLLM may serve only the
   * first {@code servable} of {@code keys}' blocks from its cache ({@link #servableBlocks}):
   * the run counts no block past those, and an endpoint with Mamba groups is credited only up to
   * the last state among them.
   */
  double prefixWeight(String endpointId, long[] keys, int servable, long nowNanos) {
    EndpointHoldings e = endpoints.get(endpointId);
    if (e == null) {
      return 0;
    }
    double sum = 0;
    int run = 0;
    for (int b = 0, end = Math.min(servable, keys.length); b < end; b++) {
      double w = holdWeight(keys[b], e.slot, nowNanos);
      if (w == 0) {
        break;
      }
      sum += w;
      run++;
    }
    WindowGroups wg = e.windows;
    if (wg != null && run > 0) {
      int hit = windowHit(e, wg, keys, run, servable, nowNanos);
      if (hit < run) {
        sum = 0;
        for (int b = 0; b < hit; b++) {
          sum += holdWeight(keys[b], e.slot, nowNanos);
        }
      }
    }
    return sum;
  }

  /**
   * The prefix hit, in blocks, vLLM's {@code HybridKVCacheCoordinator} finds for an endpoint
   * whose groups hold {@code run} blocks from block 0 and which has the window groups {@code w}:
   * each window of {@code W} tokens needs its {@code ceil((W - 1) / blockSize)} blocks before
   * the hit's end held by every group of that window (a shorter run from block 0 is a hit too),
   * searched from the end of the first {@code servable} blocks, and each set of Mamba groups a state at the hit's end within the
   * first {@code servable} blocks ({@link #stateHit}); repeated until no group shortens it. Blocks recorded speculatively
   * count for every group, since the engine computes them all, and so do blocks held in host
   * memory: vLLM's offloading connector looks up the blocks after the engine's own hit there and
   * loads them back for every group.
   */
  private int windowHit(EndpointHoldings e, WindowGroups w, long[] keys, int run, int servable,
      long nowNanos) {
    int bs = Math.max(1, e.blockSize);
    HolderTable own = e.own;
    boolean anySpeculative = speculative.any();
    int hit = run;
    while (true) {
      int before = hit;
      for (int g = 0; g < w.groups.length && hit > 0; g++) {
        int window = w.windows[g];
        boolean seen = false;
        for (int h = 0; h < g && !seen; h++) {
          seen = w.windows[h] == window;
        }
        if (seen) {
          continue; // groups of one window are looked up together
        }
        if (window == 0) {
          hit = stateHit(e, w, keys, Math.min(hit, servable), nowNanos, anySpeculative);
          continue;
        }
        int needed = Math.max(1, (window - 1 + bs - 1) / bs);
        int count = 0;
        int found = -1;
        // vLLM's SlidingWindowManager searches only the blocks it may serve (max_length is
        // num_tokens - 1): a window that a prompt's last block completes does not count
        for (int b = Math.min(hit, servable) - 1; b >= 0; b--) {
          long key = keys[b];
          boolean held = true;
          for (int h = g; h < w.groups.length && held; h++) {
            held = w.windows[h] != window || (w.held[h].get(key) & 1) != 0;
          }
          if (!held) {
            // offloaded: vLLM's connector loads the block back for every group
            held = (own.get(key) & Medium.CPU.bit()) != 0;
          }
          if (!held && anySpeculative && speculative.mayHold(key)) {
            held = speculative.holds(key, e.slot, nowNanos);
          }
          if (!held) {
            count = 0;
          } else if (++count >= needed) {
            found = b + count;
            break;
          }
        }
        hit = found >= 0 ? found : count;
      }
      if (hit >= before) {
        return hit;
      }
    }
  }

  /**
   * The longest hit of at most {@code hit} blocks that ends where every Mamba group of {@code w}
   * (window 0) holds a state, or 0: vLLM's {@code MambaManager} looks for the last cached block
   * before the end and serves the prefix up to it (the caller passes at most the blocks vLLM may
   * serve: for a prompt that ends at a block's end, a state there does not count, as vLLM
   * computes the last token anyway), since the layers' state there sums up all
   * that came before and nothing in between can be restored. Blocks recorded speculatively count,
   * as for the window groups; blocks held in host memory alone do not, since the offload tier's
   * events do not say which of its blocks carry a Mamba state.
   */
  private int stateHit(EndpointHoldings e, WindowGroups w, long[] keys, int hit, long nowNanos,
      boolean anySpeculative) {
    for (int b = hit; b > 0; b--) {
      long key = keys[b - 1];
      boolean held = true;
      for (int g = 0; g < w.groups.length && held; g++) {
        held = w.windows[g] != 0 || (w.held[g].get(key) & 1) != 0;
      }
      if (!held && anySpeculative && speculative.mayHold(key)) {
        held = speculative.holds(key, e.slot, nowNanos);
      }
      if (held) {
        return b;
      }
    }
    return 0;
  }

  /**
   * Cuts candidate {@code i}'s weight (and its run of real holdings) back to the hit its
   * endpoint's window groups allow, if it has any ({@link #windowHit}).
   */
  private void capToWindows(long[] keys, int servable, int slot, int i, long nowNanos,
      double[] out, int @Nullable [] realRun) {
    if (out[i] == 0 || slot < 0) {
      return;
    }
    EndpointHoldings[] bs = bySlot;
    EndpointHoldings e = slot < bs.length ? bs[slot] : null;
    WindowGroups w = e == null ? null : e.windows;
    if (e == null || w == null) {
      return;
    }
    int end = Math.min(servable, keys.length);
    int run = 0;
    while (run < end && holdWeight(keys[run], slot, nowNanos) != 0) {
      run++;
    }
    int hit = windowHit(e, w, keys, run, servable, nowNanos);
    if (hit >= run) {
      return;
    }
    double sum = 0;
    for (int b = 0; b < hit; b++) {
      sum += holdWeight(keys[b], slot, nowNanos);
    }
    out[i] = sum;
    if (realRun != null && realRun[i] > hit) {
      realRun[i] = hit;
    }
  }

  /**
   * Carries candidate {@code i}'s run of real holdings, which a walk that stopped at block
   * {@code end} left there, on through the keys after it: those blocks earn no weight (vLLM does
   * not serve them to this prompt), but the endpoint holds them, and what is recorded after
   * routing skips them.
   */
  private void realRunPast(long[] keys, int end, int slot, int i, int @Nullable [] realRun) {
    if (realRun == null || end == 0 || end >= keys.length || slot < 0 || realRun[i] != end) {
      return;
    }
    int r = end;
    while (r < keys.length && holders.bits(keys[r], slot) != 0) {
      r++;
    }
    realRun[i] = r;
  }

  /** Per thread: the live candidates and each candidate's plane of one walk. */
  private static final ThreadLocal<int[][]> WALK_SCRATCH =
      ThreadLocal.withInitial(() -> new int[][] {new int[0], new int[0]});

  /**
   * For every endpoint in {@code slots} (from {@link EndpointHoldings#slot}, -1 for unknown),
   * writes the weighted consecutive-prefix length of {@code keys} into {@code out}, walking the
   * blocks once for all of them. Entries of {@code out} whose {@code use[i]} is false are left
   * alone.
   */
  void prefixWeights(long[] keys, int[] slots, boolean[] use, long nowNanos, double[] out) {
    prefixWeights(keys, slots, use, nowNanos, out, null);
  }

  /**
   * {@link #prefixWeights(long[], int[], boolean[], long, double[])} that also writes into
   * {@code realRun[i]} (when {@code realRun} is not null and {@code use[i]}) how many of the
   * first keys endpoint {@code i} holds for real, on any tier: the blocks a speculative record
   * for that endpoint would skip anyway ({@link #recordSpeculative(String, long[], int, long)}).
   */
  void prefixWeights(long[] keys, int[] slots, boolean[] use, long nowNanos, double[] out,
      int @Nullable [] realRun) {
    prefixWeights(keys, keys.length, slots, use, nowNanos, out, realRun);
  }

  /**
   * {@link #prefixWeights(long[], int[], boolean[], long, double[], int[])} for a prompt of
   * which vLLM may serve only the first {@code servable} of {@code keys}' blocks from its cache
   * ({@link #servableBlocks}): no block past those is counted in the weights.
   */
  void prefixWeights(long[] keys, int servable, int[] slots, boolean[] use, long nowNanos,
      double[] out, int @Nullable [] realRun) {
    int n = slots.length;
    int[] cand = walkScratch(n)[0];
    int count = 0;
    for (int i = 0; i < n; i++) {
      if (use[i]) {
        out[i] = 0;
        if (realRun != null) {
          realRun[i] = 0;
        }
        cand[count++] = i;
      }
    }
    int end = Math.min(servable, keys.length);
    walk(keys, end, slots, cand, count, nowNanos, out, realRun);
    for (int i = 0; i < n; i++) {
      if (use[i]) {
        realRunPast(keys, end, slots[i], i, realRun);
        capToWindows(keys, servable, slots[i], i, nowNanos, out, realRun);
      }
    }
  }

  private static int[][] walkScratch(int n) {
    int[][] scratch = WALK_SCRATCH.get();
    if (scratch[0].length < n) {
      scratch[0] = new int[n];
      scratch[1] = new int[n];
    }
    return scratch;
  }

  /**
   * {@link #prefixWeights(long[], int[], boolean[], long, double[], int[])} over the first
   * {@code end} of {@code keys} for the candidates at
   * positions {@code cand[0, count)} of {@code slots}, whose entries of {@code out} (and of
   * {@code realRun}) must be 0 on entry. {@code cand} may be this thread's walk scratch
   * ({@link #firstBlockHolders}); it is overwritten.
   */
  private void walk(long[] keys, int end, int[] slots, int[] cand, int count, long nowNanos,
      double[] out, int @Nullable [] realRun) {
    int n = slots.length;
    // the candidates still matching, as a dense list: a block costs one step per endpoint still
    // in the run, not one per candidate of the pool
    int[][] scratch = walkScratch(n);
    // entries are written before they are read: alive[0, aliveCount), planeOf[i] for live i;
    // alive is compacted in place over cand when cand is the scratch (never ahead of the reads)
    int[] alive = cand;
    int aliveCount = 0;
    // one holder-table probe per block per plane some live candidate sits in (usually one plane)
    HolderTable[] planes = new HolderTable[Math.min(Math.max(count, 1), 4)];
    int[] planeLive = new int[planes.length];
    int planeCount = 0;
    int[] planeOf = scratch[1];
    for (int c = 0; c < count; c++) {
      int i = cand[c];
      if (slots[i] < 0) {
        continue;
      }
      alive[aliveCount++] = i;
      HolderTable t = holders.plane(slots[i]);
      int p = -1;
      if (t != null) {
        for (int j = 0; j < planeCount; j++) {
          if (planes[j] == t) {
            p = j;
            break;
          }
        }
        if (p < 0) {
          if (planeCount == planes.length) {
            planes = java.util.Arrays.copyOf(planes, planeCount * 2);
            planeLive = java.util.Arrays.copyOf(planeLive, planeCount * 2);
          }
          p = planeCount++;
          planes[p] = t;
        }
        planeLive[p]++;
      }
      planeOf[i] = p; // -1: nothing of that plane is held; speculative entries may still count
    }
    long[] words = new long[planeCount];
    // per plane, the GPU bit of every candidate still matching: a block whose words have all of
    // them set (the usual case inside a held prefix) adds 1.0 to every live candidate, which is
    // counted once for all of them (pending) instead of candidate by candidate
    long[] gpuMask = new long[planeCount];
    int aliveWithoutPlane = 0;
    for (int a = 0; a < aliveCount; a++) {
      int i = alive[a];
      if (planeOf[i] >= 0) {
        gpuMask[planeOf[i]] |= 1L << Holders.shift(slots[i]);
      } else {
        aliveWithoutPlane++;
      }
    }
    boolean anySpeculative = speculative.any();
    long touched = 0;
    int pending = 0;
    int b = 0;
    for (; b < end && aliveCount > 0; b++) {
      if (aliveCount <= NARROW_WALK && b > 0) {
        // few endpoints left: each reads its own table from here, a small one that stays in
        // the caches, instead of the pool-wide table whose probes miss them nearly every time
        if (pending > 0) {
          addPending(alive, aliveCount, pending, b, out, realRun);
          pending = 0;
        }
        EndpointHoldings[] bs = bySlot;
        for (int a = 0; a < aliveCount; a++) {
          int i = alive[a];
          int slot = slots[i];
          EndpointHoldings e = slot < bs.length ? bs[slot] : null;
          touched += walkOwn(e == null ? NO_HOLDINGS : e.own, keys, b, end, slot, i, nowNanos, out,
              realRun, anySpeculative);
        }
        aliveCount = 0;
        break;
      }
      if (b == 1 || (b & (TOUCH_AHEAD - 1)) == 0 && b > 0) {
        // pull the next blocks' cells into the cache in a loop with no dependence between
        // iterations, so their misses (one per block on an index of millions of keys) overlap
        // instead of being paid one after another by the walk below. Not before the first
        // block: it leaves only the planes of the endpoints that hold it live, and touching
        // ahead in every plane of a large pool cost more than the rest of the walk
        for (int t = b, ahead = Math.min(end, (b | (TOUCH_AHEAD - 1)) + 1); t < ahead; t++) {
          for (int j = 0; j < planeCount; j++) {
            if (planeLive[j] > 0) {
              touched += planes[j].touch(keys[t]);
            }
          }
        }
      }
      long key = keys[b];
      long any = 0;
      boolean allGpu = aliveWithoutPlane == 0;
      for (int j = 0; j < planeCount; j++) {
        long w = planeLive[j] > 0 ? planes[j].get(key) : 0;
        words[j] = w;
        any |= w;
        allGpu &= (w & gpuMask[j]) == gpuMask[j];
      }
      boolean sp = anySpeculative && speculative.mayHold(key);
      if (allGpu && !sp) {
        pending++;
        continue;
      }
      if (pending > 0) {
        addPending(alive, aliveCount, pending, b, out, realRun);
        pending = 0;
      }
      if (any == 0 && !sp) {
        break;
      }
      int kept = 0;
      for (int a = 0; a < aliveCount; a++) {
        int i = alive[a];
        int slot = slots[i];
        int p = planeOf[i];
        int bits = p < 0 ? 0 : (int) (words[p] >>> Holders.shift(slot)) & 3;
        if (bits != 0 && realRun != null && realRun[i] == b) {
          realRun[i] = b + 1; // still an unbroken run of real holdings
        }
        double w = (bits & 1) != 0 ? 1.0 : bits != 0 ? cpuWeight : 0;
        if (w == 0 && sp && speculative.holds(key, slot, nowNanos)) {
          w = 1.0;
        }
        if (w == 0) {
          if (p >= 0) {
            planeLive[p]--;
            gpuMask[p] &= ~(1L << Holders.shift(slot));
          } else {
            aliveWithoutPlane--;
          }
        } else {
          out[i] += w;
          alive[kept++] = i;
        }
      }
      aliveCount = kept;
    }
    if (pending > 0) {
      addPending(alive, aliveCount, pending, b, out, realRun);
    }
    if (touched == TOUCH_SINK_MARK) {
      touchSink = touched; // keeps the touches: their value is used, and the write almost never happens
    }
  }

  /**
   * The endpoints of one list that a walk may visit, grouped by holder plane, so that those
   * holding a prompt's first block come from one word per plane rather than one probe per
   * endpoint: for a list in the pool's order, where most endpoints hold nothing of a given
   * prompt. Immutable; valid while {@link #endpointsVersion()} has not moved since the slots were
   * read (slots are never reused, so a stale plan can only miss an endpoint, never misread one).
   */
  static final class FirstBlockPlan {
    final int[] slots;
    final int[] members;
    final int[] planeSlot;
    final long[] planeBits;
    final int[][] positionAt;

    private FirstBlockPlan(int[] slots, int[] members, int[] planeSlot, long[] planeBits,
        int[][] positionAt) {
      this.slots = slots;
      this.members = members;
      this.planeSlot = planeSlot;
      this.planeBits = planeBits;
      this.positionAt = positionAt;
    }
  }

  /**
   * A plan for the positions {@code members} of {@code slots} (each with a slot >= 0), or
   * {@code null} when two of them share a slot (a list naming one endpoint twice), which only
   * the candidate-by-candidate walk handles.
   */
  static @Nullable FirstBlockPlan firstBlockPlan(int[] slots, int[] members) {
    int[] planeOf = new int[members.length];
    int[] planeSlot = new int[Math.min(members.length, 4)];
    int planes = 0;
    for (int m = 0; m < members.length; m++) {
      int first = slots[members[m]] & -HolderTable.INLINE_SLOTS;
      int p = 0;
      while (p < planes && planeSlot[p] != first) {
        p++;
      }
      if (p == planes) {
        if (planes == planeSlot.length) {
          planeSlot = Arrays.copyOf(planeSlot, planes * 2);
        }
        planeSlot[planes++] = first;
      }
      planeOf[m] = p;
    }
    long[] bits = new long[planes];
    int[][] positionAt = new int[planes][HolderTable.INLINE_SLOTS];
    for (int[] at : positionAt) {
      Arrays.fill(at, -1);
    }
    for (int m = 0; m < members.length; m++) {
      int slot = slots[members[m]];
      int[] at = positionAt[planeOf[m]];
      if (at[slot & (HolderTable.INLINE_SLOTS - 1)] >= 0) {
        return null;
      }
      at[slot & (HolderTable.INLINE_SLOTS - 1)] = members[m];
      bits[planeOf[m]] |= 3L << Holders.shift(slot);
    }
    return new FirstBlockPlan(slots, members, Arrays.copyOf(planeSlot, planes), bits, positionAt);
  }

  /**
   * {@link #prefixWeights(long[], int[], boolean[], long, double[], int[])} for the members of
   * {@code plan}, whose entries of {@code out} and {@code realRun} must be 0 on entry: the walk
   * starts from the members that hold the first block (for real from the planes' words, or
   * speculatively), with the same result as walking every member from block 0.
   */
  void prefixWeights(long[] keys, FirstBlockPlan plan, long nowNanos, double[] out,
      int[] realRun) {
    prefixWeights(keys, keys.length, plan, nowNanos, out, realRun);
  }

  /**
   * {@link #prefixWeights(long[], FirstBlockPlan, long, double[], int[])} for a prompt of which
   * vLLM may serve only the first {@code servable} of {@code keys}' blocks from its cache
   * ({@link #servableBlocks}): no block past those is counted in the weights.
   */
  void prefixWeights(long[] keys, int servable, FirstBlockPlan plan, long nowNanos,
      double[] out, int[] realRun) {
    if (Math.min(servable, keys.length) <= 0 || plan.members.length == 0) {
      return;
    }
    long key = keys[0];
    int[] cand = walkScratch(plan.slots.length)[0];
    int count = 0;
    for (int g = 0; g < plan.planeSlot.length; g++) {
      HolderTable t = holders.plane(plan.planeSlot[g]);
      long w = t == null ? 0 : t.get(key) & plan.planeBits[g];
      long held = (w | (w >>> 1)) & 0x5555555555555555L; // one bit per slot holding it on a tier
      int[] at = plan.positionAt[g];
      while (held != 0) {
        cand[count++] = at[Long.numberOfTrailingZeros(held) >>> 1];
        held &= held - 1;
      }
    }
    if (speculative.any()) {
      if (speculative.mayHold(key)) {
        // a prefix routed in the last seconds: the members holding it only speculatively too
        for (int m : plan.members) {
          int slot = plan.slots[m];
          if (speculative.holds(key, slot, nowNanos) && holders.bits(key, slot) == 0) {
            cand[count++] = m;
          }
        }
      }
    }
    if (count > 0) {
      int end = Math.min(servable, keys.length);
      walk(keys, end, plan.slots, cand, count, nowNanos, out, realRun);
      for (int m : plan.members) {
        realRunPast(keys, end, plan.slots[m], m, realRun);
        capToWindows(keys, servable, plan.slots[m], m, nowNanos, out, realRun);
      }
    }
  }

  /**
   * Endpoints left in a walk at or below which each reads its own table rather than the shared
   * planes: two probes of small tables cost less than one of a pool-wide table that misses the
   * caches (see docs/benchmarks.md).
   */
  static final int NARROW_WALK = 2;
  private static final HolderTable NO_HOLDINGS = new HolderTable();

  /**
   * The rest of candidate {@code i}'s walk from block {@code from} up to block {@code end} on its
   * own table: the same weights, added in the same order, and the same run of real holdings as
   * the shared walk. Returns the touches' sum (kept by the caller).
   */
  private long walkOwn(HolderTable own, long[] keys, int from, int end, int slot, int i,
      long nowNanos, double[] out, int @Nullable [] realRun, boolean anySpeculative) {
    double o = out[i];
    int real = realRun == null ? -1 : realRun[i];
    long touched = 0;
    for (int b = from; b < end; b++) {
      if (b == from || (b & (TOUCH_AHEAD - 1)) == 0) {
        for (int t = b, ahead = Math.min(end, (b | (TOUCH_AHEAD - 1)) + 1); t < ahead; t++) {
          touched += own.touch(keys[t]);
        }
      }
      long key = keys[b];
      int bits = (int) own.get(key) & 3;
      double w;
      if ((bits & 1) != 0) {
        w = 1.0;
      } else if (bits != 0) {
        w = cpuWeight;
      } else {
        if (!(anySpeculative && speculative.mayHold(key) && speculative.holds(key, slot, nowNanos))) {
          break;
        }
        w = 1.0;
      }
      if (bits != 0 && real == b) {
        real = b + 1; // still an unbroken run of real holdings
      }
      o += w;
    }
    out[i] = o;
    if (realRun != null) {
      realRun[i] = real;
    }
    return touched;
  }

  /**
   * Credits every live candidate with the {@code pending} blocks before {@code b} that all of them
   * hold on GPU, with the same result as adding 1.0 once per block: in one addition while the
   * sum is a whole number (then every partial sum is exact), block by block otherwise.
   */
  private static void addPending(int[] alive, int aliveCount, int pending, int b, double[] out,
      int @Nullable [] realRun) {
    for (int a = 0; a < aliveCount; a++) {
      int i = alive[a];
      double o = out[i];
      if (o == Math.rint(o) && o < 0x1p52) {
        o += pending;
      } else {
        for (int k = 0; k < pending; k++) {
          o += 1.0;
        }
      }
      out[i] = o;
      if (realRun != null && realRun[i] == b - pending) {
        realRun[i] = b; // the run of real holdings went on through these blocks
      }
    }
  }

  /** The pipeline's counters. */
  public KvEventMetrics metrics() {
    return metrics;
  }

  Ticker ticker() {
    return ticker;
  }

  /** Builds a {@link KvBlockIndex}. */
  public static final class Builder {
    private int defaultBlockSize = 16;
    private int maxBlocksPerEndpoint = 1 << 18;
    private Duration speculativeTtl = Duration.ofSeconds(2);
    private int maxSpeculativeEntries = 1 << 18;
    private double cpuWeight = 0.8;
    private String model = "";
    private Ticker ticker = Ticker.system();

    private Builder() {}

    /** Tokens per block when neither events nor metrics say (default 16, vLLM's default). */
    public Builder defaultBlockSize(int v) {
      if (v < 1) {
        throw new IllegalArgumentException("defaultBlockSize must be >= 1, got " + v);
      }
      defaultBlockSize = v;
      return this;
    }

    /**
     * Blocks kept per endpoint before it is cleared (default 262,144: about 35 MiB at
     * {@link #BYTES_PER_ENTRY} bytes an entry, at most 48 MiB just after the tables double).
     */
    public Builder maxBlocksPerEndpoint(int v) {
      if (v < 1) {
        throw new IllegalArgumentException("maxBlocksPerEndpoint must be >= 1, got " + v);
      }
      maxBlocksPerEndpoint = v;
      return this;
    }

    /**
     * How long a speculative entry counts (default 2 s, as llm-d); zero disables them. At most
     * 365 days: expiries are kept in nanoseconds of the ticker.
     */
    public Builder speculativeTtl(Duration v) {
      if (v.isNegative()) {
        throw new IllegalArgumentException("speculativeTtl must be >= 0, got " + v);
      }
      if (v.compareTo(Duration.ofDays(365)) > 0) {
        throw new IllegalArgumentException("speculativeTtl must be at most 365 days, got " + v);
      }
      speculativeTtl = v;
      return this;
    }

    /** Speculative entries kept at most (default 262,144); the oldest go first. */
    public Builder maxSpeculativeEntries(int v) {
      if (v < 1) {
        throw new IllegalArgumentException("maxSpeculativeEntries must be >= 1, got " + v);
      }
      maxSpeculativeEntries = v;
      return this;
    }

    /** Weight of a hit on an offload tier (default 0.8). */
    public Builder cpuWeight(double v) {
      if (!(v >= 0 && v <= 1)) {
        throw new IllegalArgumentException("cpuWeight must be in [0,1], got " + v);
      }
      cpuWeight = v;
      return this;
    }

    /** Model name every endpoint is assumed to serve unless told otherwise (default none). */
    public Builder model(String v) {
      model = Objects.requireNonNull(v, "model");
      return this;
    }

    /** Clock for speculative TTLs (default {@link Ticker#system()}). */
    public Builder ticker(Ticker v) {
      ticker = Objects.requireNonNull(v, "ticker");
      return this;
    }

    public KvBlockIndex build() {
      return new KvBlockIndex(this);
    }
  }
}
