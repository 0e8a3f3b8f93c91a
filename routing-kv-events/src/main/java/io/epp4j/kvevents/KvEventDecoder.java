package io.epp4j.kvevents;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import org.jspecify.annotations.Nullable;
import org.msgpack.core.MessageTypeException;
import org.msgpack.value.ValueType;

/**
 * Decodes vLLM's msgpack KV-event batches: {@code [ts, events, data_parallel_rank?]} where each
 * event is either a tagged array ({@code ["BlockStored", block_hashes, parent_block_hash,
 * token_ids, block_size, lora_id?, medium?, lora_name?, extra_keys?, ...]}, as vLLM up to about
 * 0.23 sends it, trailing defaults omitted) or a map with a {@code "type"} key and the same field
 * names (newer vLLM). Block hashes may be integers (unsigned 64-bit values above
 * {@code Long.MAX_VALUE} are kept bit for bit) or binary digests, folded to 64 bits by XOR of
 * their big-endian 8-byte words. Events of unknown types are skipped, so a newer engine that adds
 * event kinds does not break the stream. Stateless and thread-safe.
 *
 * <p>Payloads come from the network and are not trusted. A payload above
 * {@link #MAX_PAYLOAD_BYTES} is refused whole, and no length read from a payload (array, map,
 * string or binary) is believed beyond the bytes that remain after it: every element takes at
 * least one byte, so a length that the rest of the payload cannot hold is malformed. Decoding an
 * {@code n}-byte payload therefore allocates O(n) (a one-byte hash becomes an 8-byte
 * {@code long}), however the lengths in it lie.
 *
 * <p>Public for transports other than {@link KvEventSubscriber}'s ZeroMQ (a relay that forwards
 * vLLM's payloads decodes them here and applies them with {@link KvBlockIndex#apply}), and for
 * the decode benchmark.
 *
 * <p>This class reads vLLM's event shapes; the bounds on untrusted lengths live in
 * {@link PayloadUnpacker}, the only reader it uses, so no shape decoding here can size anything
 * from a length the payload has not been checked to hold.
 */
public final class KvEventDecoder {
  private static final String BLOCK_STORED = "BlockStored";
  private static final String BLOCK_REMOVED = "BlockRemoved";
  private static final String ALL_CLEARED = "AllBlocksCleared";

  /**
   * The largest payload decoded (16 MiB), far above any engine step: a step stores at most the
   * tokens it scheduled, about 5 bytes each (a million-token prefill is about 5 MiB). Larger
   * payloads are malformed; {@link KvEventSubscriber} has ZeroMQ refuse such frames before they
   * are even assembled.
   */
  public static final int MAX_PAYLOAD_BYTES = 16 << 20;

  private KvEventDecoder() {}

  /**
   * Decodes one payload.
   *
   * @throws MalformedKvEventException naming the problem when the payload is not a valid batch
   */
  public static KvEventBatch decode(byte[] payload) throws MalformedKvEventException {
    if (payload.length > MAX_PAYLOAD_BYTES) {
      throw new MalformedKvEventException("payload of " + payload.length
          + " bytes is above the limit of " + MAX_PAYLOAD_BYTES + " bytes");
    }
    try (PayloadUnpacker u = new PayloadUnpacker(payload)) {
      KvEventBatch batch = readBatch(u);
      if (u.hasNext()) {
        throw new MalformedKvEventException("trailing bytes after the batch");
      }
      return batch;
    } catch (MalformedKvEventException e) {
      throw e;
    } catch (IOException | RuntimeException e) {
      throw new MalformedKvEventException("invalid msgpack: " + e.getMessage(), e);
    }
  }

  /** Folds a binary digest to 64 bits: XOR of its big-endian 8-byte words (last word padded). */
  static long foldDigest(byte[] b) {
    return PayloadUnpacker.foldDigest(b, 0, b.length);
  }

  // --------------------------------------------------------------------------- the batch

  private static KvEventBatch readBatch(PayloadUnpacker u)
      throws IOException, MalformedKvEventException {
    if (!u.hasNext()) {
      throw new MalformedKvEventException("empty payload");
    }
    ValueType t = u.getNextFormat().getValueType();
    return switch (t) {
      case ARRAY -> readArrayBatch(u);
      case MAP -> readMapBatch(u);
      default -> throw new MalformedKvEventException("batch must be an array, got " + t);
    };
  }

  /** {@code [ts, events, data_parallel_rank?, ...]}. */
  private static KvEventBatch readArrayBatch(PayloadUnpacker u)
      throws IOException, MalformedKvEventException {
    int n = u.arrayHeader(-1, "batch");
    if (n < 2) {
      throw new MalformedKvEventException("batch must be [ts, events, dp_rank?], got " + n
          + " elements");
    }
    double ts = u.readNumber("ts");
    List<KvEvent> events = readEvents(u);
    int rank = -1;
    if (n >= 3) {
      rank = readRank(u);
    }
    for (int i = 3; i < n; i++) {
      u.skipValue();
    }
    return new KvEventBatch(ts, events, rank);
  }

  /** {@code {ts, events, data_parallel_rank?}} in any order; other keys are skipped. */
  private static KvEventBatch readMapBatch(PayloadUnpacker u)
      throws IOException, MalformedKvEventException {
    int n = u.mapHeader(-1, "batch");
    double ts = 0;
    List<KvEvent> events = null;
    int rank = -1;
    for (int i = 0; i < n; i++) {
      String k = u.readKey();
      switch (k) {
        case "ts" -> ts = u.readNumber("ts");
        case "events" -> events = readEvents(u);
        case "data_parallel_rank" -> rank = readRank(u);
        default -> u.skipValue();
      }
    }
    if (events == null) {
      throw new MalformedKvEventException("batch map without 'events'");
    }
    return new KvEventBatch(ts, events, rank);
  }

  /**
   * The batch's {@code data_parallel_rank}: vLLM sends a rank (0 or more) or nil, read as -1.
   * A negative rank is malformed, not "no rank": applied as if none were given, its batch would
   * pass the check of an endpoint that serves one rank whatever engine core sent it.
   */
  private static int readRank(PayloadUnpacker u) throws IOException, MalformedKvEventException {
    if (u.tryUnpackNil()) {
      return -1;
    }
    int rank = u.readOptionalInt("data_parallel_rank", -1);
    if (rank < 0) {
      throw new MalformedKvEventException("data_parallel_rank must be 0 or more, got " + rank);
    }
    return rank;
  }

  private static List<KvEvent> readEvents(PayloadUnpacker u)
      throws IOException, MalformedKvEventException {
    if (u.getNextFormat().getValueType() != ValueType.ARRAY) {
      throw new MalformedKvEventException("'events' must be an array");
    }
    int n = u.arrayHeader(-1, "'events'");
    // most events take dozens of bytes and unknown kinds are dropped: grow rather than reserve
    List<KvEvent> out = new ArrayList<>(Math.min(n, 64));
    for (int i = 0; i < n; i++) {
      ValueType t = u.getNextFormat().getValueType();
      KvEvent e;
      if (t == ValueType.ARRAY) {
        e = readTaggedArray(u, i);
      } else if (t == ValueType.MAP) {
        e = readMap(u, i);
      } else {
        throw new MalformedKvEventException("event " + i + " must be an array or a map, got " + t);
      }
      if (e != null) {
        out.add(e);
      }
    }
    return out;
  }

  // ------------------------------------------------------------------ the two event shapes

  /** Collected fields of one event before validation. */
  private static final class Fields {
    long @Nullable [] hashes;
    boolean hasParent;
    long parent;
    int @Nullable [] tokens;
    int blockSize;
    int loraId = -1;
    @Nullable String medium;
    @Nullable String loraName;
    @Nullable List<String> firstBlockExtraKeys;
    /** SGLang's {@code metadata.cache_salt}. */
    @Nullable String metadataSalt;
    int group;
    /** vLLM's {@code kv_cache_spec_kind} and {@code kv_cache_spec_sliding_window}. */
    @Nullable String specKind;
    int specWindow;
  }

  /** {@code [tag, fields by position...]}; null for a kind this decoder does not know. */
  private static @Nullable KvEvent readTaggedArray(PayloadUnpacker u, int index)
      throws IOException, MalformedKvEventException {
    int n = u.arrayHeader(index, null);
    if (n < 1) {
      throw new MalformedKvEventException("event " + index + " is an empty array");
    }
    String tag = u.readString("event " + index + " tag");
    Fields f = new Fields();
    switch (tag) {
      case BLOCK_STORED -> {
        readPositionalFields(u, n, STORED_FIELDS, f, index);
        return stored(f, index);
      }
      case BLOCK_REMOVED -> {
        readPositionalFields(u, n, REMOVED_FIELDS, f, index);
        return removed(f, index);
      }
      default -> {
        for (int i = 1; i < n; i++) {
          u.skipValue();
        }
        return ALL_CLEARED.equals(tag) ? KvEvent.AllBlocksCleared.INSTANCE : null;
      }
    }
  }

  /** BlockStored's fields after the tag, in vLLM's order; later ones are not needed here. */
  private static final String[] STORED_FIELDS = {"block_hashes", "parent_block_hash",
      "token_ids", "block_size", "lora_id", "medium", "lora_name", "extra_keys", "group_idx",
      "kv_cache_spec_kind", "kv_cache_spec_sliding_window"};
  /** BlockRemoved's fields after the tag. */
  private static final String[] REMOVED_FIELDS = {"block_hashes", "medium", "group_idx"};

  /** Reads the {@code n - 1} values after the tag, naming each by {@code names}. */
  private static void readPositionalFields(PayloadUnpacker u, int n, String[] names, Fields f,
      int index) throws IOException, MalformedKvEventException {
    for (int i = 1; i < n; i++) {
      if (i <= names.length) {
        readField(u, names[i - 1], f, index);
      } else {
        u.skipValue();
      }
    }
  }

  /** {@code {"type": tag, field: value...}}; null for a kind this decoder does not know. */
  private static @Nullable KvEvent readMap(PayloadUnpacker u, int index)
      throws IOException, MalformedKvEventException {
    int n = u.mapHeader(index, null);
    String type = null;
    Fields f = new Fields();
    for (int i = 0; i < n; i++) {
      String k = u.readKey();
      if (k.equals("type")) {
        type = u.readString("event " + index + " type");
      } else {
        readField(u, k, f, index);
      }
    }
    if (type == null) {
      throw new MalformedKvEventException("event " + index + " has no 'type'");
    }
    return switch (type) {
      case BLOCK_STORED -> stored(f, index);
      case BLOCK_REMOVED -> removed(f, index);
      case ALL_CLEARED -> KvEvent.AllBlocksCleared.INSTANCE;
      default -> null;
    };
  }

  // ---------------------------------------------------------------------- one field each

  private static void readField(PayloadUnpacker u, String name, Fields f, int index)
      throws IOException, MalformedKvEventException {
    // the field's name for error messages is only built when there is an error: this runs for
    // every field of every event
    switch (name) {
      case "block_hashes" -> f.hashes = readHashes(u, name, index);
      case "parent_block_hash" -> {
        if (u.tryUnpackNil()) {
          f.hasParent = false;
        } else {
          f.hasParent = true;
          f.parent = u.readHash(index, name);
        }
      }
      case "token_ids" -> f.tokens = readTokens(u, name, index);
      // vLLM sends a size (0: a store it cannot describe) and a LoRA id, or nil: a negative one
      // is malformed, not absent (a LoRA's blocks would be keyed as the base model's)
      case "block_size" -> f.blockSize = readOptionalCount(u, index, name, 0);
      case "lora_id" -> f.loraId = readOptionalCount(u, index, name, -1);
      case "medium" -> f.medium = u.readOptionalString(where(index, name));
      case "lora_name" -> {
        // SGLang's BlockStored has vLLM's fields up to medium, and then, where vLLM has
        // lora_name, a map {cache_salt} when the request was salted (BlockStoredWithMetadata)
        if (u.getNextFormat().getValueType() == ValueType.MAP) {
          f.metadataSalt = readSglangMetadata(u, where(index, name));
        } else {
          f.loraName = u.readOptionalString(where(index, name));
        }
      }
      case "metadata" -> f.metadataSalt = readSglangMetadata(u, where(index, name));
      case "extra_keys" -> f.firstBlockExtraKeys = readFirstBlockExtraKeys(u, where(index, name));
      // vLLM sends a group's index or nil; anything below 0 is read as "no group named"
      case "group_idx" -> f.group = Math.max(0, u.readOptionalInt(where(index, name), 0));
      case "kv_cache_spec_kind" -> f.specKind = u.readOptionalString(where(index, name));
      case "kv_cache_spec_sliding_window" ->
          f.specWindow = Math.max(0, u.readOptionalInt(where(index, name), 0));
      default -> u.skipValue();
    }
  }

  /** An int of 0 or more, or {@code absent} for nil; a negative int is malformed. */
  private static int readOptionalCount(PayloadUnpacker u, int index, String name, int absent)
      throws IOException, MalformedKvEventException {
    if (u.tryUnpackNil()) {
      return absent;
    }
    int v = u.readOptionalInt(where(index, name), absent);
    if (v < 0) {
      throw new MalformedKvEventException(where(index, name) + " must be 0 or more, got " + v);
    }
    return v;
  }

  private static long[] readHashes(PayloadUnpacker u, String name, int index)
      throws IOException, MalformedKvEventException {
    if (u.getNextFormat().getValueType() != ValueType.ARRAY) {
      throw new MalformedKvEventException(where(index, name) + " must be an array");
    }
    int m = u.arrayHeader(index, name);
    long[] h = new long[m];
    if (!u.readLongs(h)) {
      for (int i = 0; i < m; i++) {
        h[i] = u.readHash(index, name);
      }
    }
    return h;
  }

  private static int[] readTokens(PayloadUnpacker u, String name, int index)
      throws IOException, MalformedKvEventException {
    if (u.getNextFormat().getValueType() != ValueType.ARRAY) {
      throw new MalformedKvEventException(where(index, name) + " must be an array");
    }
    int m = u.arrayHeader(index, name);
    int[] t = new int[m];
    if (u.readInts(t)) {
      return t;
    }
    try {
      for (int i = 0; i < m; i++) {
        t[i] = u.unpackInt(); // rejects non-integers and values outside int itself
      }
    } catch (MessageTypeException e) {
      throw new MalformedKvEventException(where(index, name) + " must hold integers");
    }
    return t;
  }

  /**
   * extra_keys is a list with one entry per block (nil or a tuple). Only string keys of the
   * first block matter here: they hold the LoRA name and the cache salt of a root block.
   */
  private static @Nullable List<String> readFirstBlockExtraKeys(PayloadUnpacker u, String where)
      throws IOException, MalformedKvEventException {
    if (u.tryUnpackNil()) {
      return null;
    }
    if (u.getNextFormat().getValueType() != ValueType.ARRAY) {
      throw new MalformedKvEventException(where + " must be an array or nil");
    }
    int m = u.arrayHeader(-1, where);
    List<String> first = null;
    for (int i = 0; i < m; i++) {
      if (i == 0 && u.getNextFormat().getValueType() == ValueType.ARRAY) {
        int k = u.arrayHeader(-1, where);
        first = new ArrayList<>(Math.min(k, 4));
        for (int j = 0; j < k; j++) {
          if (u.getNextFormat().getValueType() == ValueType.STRING) {
            first.add(u.string(where));
          } else {
            u.skipValue();
          }
        }
      } else {
        u.skipValue();
      }
    }
    return first;
  }

  /**
   * The {@code cache_salt} of SGLang's {@code BlockStoredMetadata} map; null for nil, a map
   * without one, or another value (skipped).
   */
  private static @Nullable String readSglangMetadata(PayloadUnpacker u, String where)
      throws IOException, MalformedKvEventException {
    if (u.getNextFormat().getValueType() != ValueType.MAP) {
      u.skipValue();
      return null;
    }
    int n = u.mapHeader(-1, where);
    String salt = null;
    for (int i = 0; i < n; i++) {
      String k = u.readKey();
      if (k.equals("cache_salt") && u.getNextFormat().getValueType() == ValueType.STRING) {
        salt = u.string(where);
      } else {
        u.skipValue();
      }
    }
    return salt;
  }

  /**
   * The store, or null for one whose blocks cannot be keyed, which is skipped like an event of
   * an unknown kind rather than the batch refused (the batch also carries the step's other
   * events):
   *
   * <ul>
   *   <li>blocks without their tokens: vLLM's OffloadingConnector reports the blocks it
   *       offloaded that way ({@code token_ids=[]}, no parent, hashes of its own), with the
   *       offloaded block size or, in current vLLM's placeholder for a store it cannot describe
   *       (a sliding-window or Mamba group's, or any without {@code self_describing_kv_events}),
   *       {@code block_size=0};
   *   <li>fewer hashes than the tokens fill blocks: a KV-cache group that keeps only some blocks
   *       of a sequence (sliding-window attention, Mamba layers with prefix caching in
   *       {@code align} mode) holds null blocks elsewhere, and vLLM's {@code cache_full_blocks}
   *       leaves them out of {@code block_hashes} while {@code token_ids} still covers every
   *       block from the first one stored. Which blocks the hashes name is not said, so none can
   *       be keyed; the groups that hold every block report the same hashes in full. A Mamba
   *       group's such store ({@code kv_cache_spec_kind} {@code mamba}) is kept, as a store of
   *       hashes without tokens ({@link KvEvent.BlockStored#recurrentState}): the index finds
   *       its blocks under the hashes the other groups stored, since a hit needs the state it
   *       names.
   * </ul>
   */
  private static @Nullable KvEvent stored(Fields f, int index) throws MalformedKvEventException {
    if (f.hashes == null) {
      throw new MalformedKvEventException("event " + index + " (BlockStored) lacks block_hashes");
    }
    if (f.tokens == null) {
      throw new MalformedKvEventException("event " + index + " (BlockStored) lacks token_ids");
    }
    if (f.tokens.length == 0 && f.hashes.length > 0) {
      return null;
    }
    if (untrackedTier(f.medium)) {
      return null;
    }
    boolean recurrent = "mamba".equals(f.specKind) && Medium.of(f.medium) == Medium.GPU;
    if (recurrent && f.blockSize > 0
        && (long) f.hashes.length * f.blockSize != f.tokens.length) {
      // a Mamba group's store that leaves out the blocks it keeps no state for: its hashes are
      // matched to the blocks the other groups stored under them
      return new KvEvent.BlockStored(f.hashes, f.hasParent, f.parent, new int[0], f.blockSize,
          f.loraId, Medium.GPU, f.loraName, cacheSalt(f), f.group, 0, true);
    }
    if (f.blockSize > 0 && f.tokens.length % f.blockSize == 0
        && f.hashes.length < f.tokens.length / f.blockSize) {
      return null;
    }
    int blocks = f.hashes.length;
    int bs = f.blockSize;
    if (bs <= 0) {
      if (blocks == 0 || f.tokens.length % blocks != 0) {
        throw new MalformedKvEventException("event " + index + " (BlockStored) lacks block_size");
      }
      bs = f.tokens.length / blocks;
    }
    if (bs <= 0 || (long) blocks * bs != f.tokens.length) {
      throw new MalformedKvEventException("event " + index + " (BlockStored) has "
          + f.tokens.length + " token_ids for " + blocks + " blocks of " + bs);
    }
    return new KvEvent.BlockStored(f.hashes, f.hasParent, f.parent, f.tokens, bs, f.loraId,
        Medium.of(f.medium), f.loraName, cacheSalt(f), f.group, slidingWindow(f), recurrent);
  }

  /** The window of a sliding-window group's store, else 0 (see KvEvent.BlockStored). */
  private static int slidingWindow(Fields f) {
    String kind = f.specKind;
    return kind != null && (kind.equals("sliding_window") || kind.equals("sliding_window_mla"))
        ? f.specWindow : 0;
  }

  /**
   * The cache salt of a root block: the string extra keys of its first block other than the
   * LoRA name, joined by NUL (vLLM), or SGLang's {@code metadata.cache_salt}; null when there
   * are none or the block has a parent.
   */
  private static @Nullable String cacheSalt(Fields f) {
    if (f.hasParent) {
      return null;
    }
    if (f.firstBlockExtraKeys == null) {
      return f.metadataSalt;
    }
    StringBuilder sb = new StringBuilder();
    for (String s : f.firstBlockExtraKeys) {
      if (!s.equals(f.loraName)) {
        if (sb.length() > 0) {
          sb.append('\u0000');
        }
        sb.append(s);
      }
    }
    return sb.length() == 0 ? null : sb.toString();
  }

  private static @Nullable KvEvent removed(Fields f, int index)
      throws MalformedKvEventException {
    if (f.hashes == null) {
      throw new MalformedKvEventException("event " + index + " (BlockRemoved) lacks block_hashes");
    }
    if (untrackedTier(f.medium)) {
      return null;
    }
    return new KvEvent.BlockRemoved(f.hashes, Medium.of(f.medium), f.group);
  }

  /**
   * Whether {@code medium} names a tier the index does not keep: one other than the engine's own
   * cache ({@code "GPU"}, or none) and host memory ({@code "CPU"}; SGLang's
   * {@code "CPU_PINNED"}). The index keeps one offload tier, so the events of a further one
   * (vLLM's {@code "STORAGE"}, the file-system and object-store tiers behind the CPU tier;
   * SGLang's {@code "DISK"} and {@code "EXTERNAL"}) are skipped: read as the CPU tier, a
   * removal from that tier would drop the copy the CPU tier still holds. vLLM's storage tiers
   * report their stores by hash only, so no store that could be keyed is lost.
   */
  private static boolean untrackedTier(@Nullable String medium) {
    return medium != null && !medium.equalsIgnoreCase("GPU") && !medium.equalsIgnoreCase("CPU")
        && !medium.equalsIgnoreCase("CPU_PINNED");
  }

  private static String where(int index, String name) {
    return PayloadUnpacker.where(index, name);
  }
}
