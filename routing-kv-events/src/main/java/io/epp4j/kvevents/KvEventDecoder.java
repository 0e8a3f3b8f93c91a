package io.epp4j.kvevents;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import org.jspecify.annotations.Nullable;
import org.msgpack.core.MessageFormat;
import org.msgpack.core.MessagePack;
import org.msgpack.core.MessageTypeException;
import org.msgpack.core.MessageUnpacker;
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

  private static KvEventBatch readBatch(PayloadUnpacker u)
      throws IOException, MalformedKvEventException {
    if (!u.hasNext()) {
      throw new MalformedKvEventException("empty payload");
    }
    ValueType t = u.getNextFormat().getValueType();
    double ts;
    List<KvEvent> events;
    int rank = -1;
    if (t == ValueType.ARRAY) {
      int n = u.arrayHeader(-1, "batch");
      if (n < 2) {
        throw new MalformedKvEventException("batch must be [ts, events, dp_rank?], got " + n
            + " elements");
      }
      ts = readNumber(u, "ts");
      events = readEvents(u);
      if (n >= 3) {
        rank = readOptionalInt(u, "data_parallel_rank", -1);
      }
      for (int i = 3; i < n; i++) {
        u.skipValue();
      }
    } else if (t == ValueType.MAP) {
      int n = u.mapHeader(-1, "batch");
      ts = 0;
      events = null;
      for (int i = 0; i < n; i++) {
        String k = readKey(u);
        switch (k) {
          case "ts" -> ts = readNumber(u, "ts");
          case "events" -> events = readEvents(u);
          case "data_parallel_rank" -> rank = readOptionalInt(u, k, -1);
          default -> u.skipValue();
        }
      }
      if (events == null) {
        throw new MalformedKvEventException("batch map without 'events'");
      }
    } else {
      throw new MalformedKvEventException("batch must be an array, got " + t);
    }
    return new KvEventBatch(ts, events, rank);
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

  /**
   * An unpacker that can read a run of integers straight from the payload's bytes: token IDs are
   * most of a {@code BlockStored}, and decoding them value by value through the unpacker costs
   * several times more.
   */
  private static final class PayloadUnpacker extends MessageUnpacker {
    private static final java.lang.invoke.VarHandle BIG_ENDIAN_INT =
        java.lang.invoke.MethodHandles.byteArrayViewVarHandle(int[].class,
            java.nio.ByteOrder.BIG_ENDIAN);
    private static final java.lang.invoke.VarHandle BIG_ENDIAN_SHORT =
        java.lang.invoke.MethodHandles.byteArrayViewVarHandle(short[].class,
            java.nio.ByteOrder.BIG_ENDIAN);
    private final byte[] payload;

    PayloadUnpacker(byte[] payload) {
      super(new org.msgpack.core.buffer.ArrayBufferInput(payload),
          MessagePack.DEFAULT_UNPACKER_CONFIG);
      this.payload = payload;
    }

    /** Bytes of the payload not read yet. */
    private long remaining() {
      return payload.length - getTotalReadBytes();
    }

    /**
     * An array header whose element count the rest of the payload can hold (each element takes
     * at least a byte): callers size arrays from it. {@code event} and {@code field} only name
     * the array in the error (event -1: the batch level; field null: the event itself), so that
     * nothing is built for the message unless there is an error.
     */
    int arrayHeader(int event, @Nullable String field)
        throws IOException, MalformedKvEventException {
      int n = unpackArrayHeader(); // a count above Integer.MAX_VALUE throws
      if (n > remaining()) {
        throw new MalformedKvEventException(describe(event, field) + " declares " + n
            + " elements but only " + remaining() + " bytes follow");
      }
      return n;
    }

    /** A map header whose entries (two bytes each at least) the rest of the payload can hold. */
    int mapHeader(int event, @Nullable String field)
        throws IOException, MalformedKvEventException {
      int n = unpackMapHeader();
      if (2L * n > remaining()) {
        throw new MalformedKvEventException(describe(event, field) + " declares " + n
            + " entries but only " + remaining() + " bytes follow");
      }
      return n;
    }

    private static String describe(int event, @Nullable String field) {
      if (event < 0) {
        return String.valueOf(field);
      }
      return field == null ? "event " + event : where(event, field);
    }

    /** The length of the str or bin whose header comes next, checked against what follows. */
    private int rawLength(int event, @Nullable String field)
        throws IOException, MalformedKvEventException {
      int len = getNextFormat().getValueType() == ValueType.BINARY
          ? unpackBinaryHeader() : unpackRawStringHeader();
      if (len > remaining()) {
        throw new MalformedKvEventException(describe(event, field) + " declares " + len
            + " bytes but only " + remaining() + " follow");
      }
      return len;
    }

    /**
     * A str or bin as UTF-8 text, decoded straight from the payload (malformed sequences become
     * U+FFFD, as the unpacker's own default does).
     */
    String string(String where) throws IOException, MalformedKvEventException {
      int len = rawLength(-1, where);
      int start = (int) getTotalReadBytes();
      readPayloadAsReference(len);
      return new String(payload, start, len, java.nio.charset.StandardCharsets.UTF_8);
    }

    /** A bin digest folded to 64 bits without copying it. */
    long foldBinary(int event, String field) throws IOException, MalformedKvEventException {
      int len = rawLength(event, field);
      int start = (int) getTotalReadBytes();
      readPayloadAsReference(len);
      return foldDigest(payload, start, len);
    }

    private static final java.lang.invoke.VarHandle BIG_ENDIAN_LONG =
        java.lang.invoke.MethodHandles.byteArrayViewVarHandle(long[].class,
            java.nio.ByteOrder.BIG_ENDIAN);

    /**
     * Fills {@code out} with the next {@code out.length} values when all are integers, as
     * {@link #readHash} reads them (uint64 keeps its 64 bits), and consumes them; otherwise
     * (binary digests, the end of the payload near) consumes nothing and returns false.
     */
    boolean readLongs(long[] out) throws IOException {
      byte[] b = payload;
      long start = getTotalReadBytes();
      if (start > b.length) {
        return false;
      }
      int pos = (int) start;
      int limit = b.length;
      for (int i = 0; i < out.length; i++) {
        if (pos + 8 >= limit) {
          return false; // room for the widest format: 9 bytes
        }
        int tag = b[pos];
        if (tag >= -32) { // positive or negative fixint
          out[i] = tag;
          pos++;
          continue;
        }
        switch (tag & 0xff) {
          case 0xcf, 0xd3 -> { // uint64 (raw bits), int64
            out[i] = (long) BIG_ENDIAN_LONG.get(b, pos + 1);
            pos += 9;
          }
          case 0xce -> {
            out[i] = (int) BIG_ENDIAN_INT.get(b, pos + 1) & 0xFFFF_FFFFL;
            pos += 5;
          }
          case 0xd2 -> {
            out[i] = (int) BIG_ENDIAN_INT.get(b, pos + 1);
            pos += 5;
          }
          case 0xcd -> {
            out[i] = (char) (short) BIG_ENDIAN_SHORT.get(b, pos + 1);
            pos += 3;
          }
          case 0xd1 -> {
            out[i] = (short) BIG_ENDIAN_SHORT.get(b, pos + 1);
            pos += 3;
          }
          case 0xcc -> {
            out[i] = b[pos + 1] & 0xff;
            pos += 2;
          }
          case 0xd0 -> {
            out[i] = b[pos + 1];
            pos += 2;
          }
          default -> {
            return false;
          }
        }
      }
      readPayloadAsReference(pos - (int) start);
      return true;
    }

    /**
     * Fills {@code out} with the next {@code out.length} values when all are integers that fit
     * an {@code int} in the formats msgpack writers use for them, and consumes them; otherwise
     * consumes nothing and returns false, so the caller decodes value by value (and reports the
     * offending value).
     */
    boolean readInts(int[] out) throws IOException {
      byte[] b = payload;
      long start = getTotalReadBytes();
      if (start > b.length) {
        return false;
      }
      int pos = (int) start;
      int limit = b.length;
      for (int i = 0; i < out.length; i++) {
        if (pos + 4 < limit) { // room for the widest format read here: 5 bytes
          int tag = b[pos];
          if (tag >= -32) { // positive fixint (0..127) or negative fixint (-32..-1)
            out[i] = tag;
            pos++;
            continue;
          }
          switch (tag & 0xff) {
            case 0xce -> { // uint32
              int v = (int) BIG_ENDIAN_INT.get(b, pos + 1);
              if (v < 0) {
                return false; // beyond int: let the unpacker reject it
              }
              out[i] = v;
              pos += 5;
            }
            case 0xcd -> { // uint16
              out[i] = (char) (short) BIG_ENDIAN_SHORT.get(b, pos + 1);
              pos += 3;
            }
            case 0xcc -> {
              out[i] = b[pos + 1] & 0xff;
              pos += 2;
            }
            case 0xd2 -> {
              out[i] = (int) BIG_ENDIAN_INT.get(b, pos + 1);
              pos += 5;
            }
            case 0xd1 -> {
              out[i] = (short) BIG_ENDIAN_SHORT.get(b, pos + 1);
              pos += 3;
            }
            case 0xd0 -> {
              out[i] = b[pos + 1];
              pos += 2;
            }
            default -> {
              return false;
            }
          }
        } else {
          return false; // near the end of the payload: rare, take the careful path
        }
      }
      readPayloadAsReference(pos - (int) start);
      return true;
    }
  }

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
  }

  private static @Nullable KvEvent readTaggedArray(PayloadUnpacker u, int index)
      throws IOException, MalformedKvEventException {
    int n = u.arrayHeader(index, null);
    if (n < 1) {
      throw new MalformedKvEventException("event " + index + " is an empty array");
    }
    String tag = readString(u, "event " + index + " tag");
    Fields f = new Fields();
    switch (tag) {
      case BLOCK_STORED -> {
        // block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium, lora_name,
        // extra_keys, then fields this decoder does not need
        for (int i = 1; i < n; i++) {
          switch (i) {
            case 1 -> readField(u, "block_hashes", f, index);
            case 2 -> readField(u, "parent_block_hash", f, index);
            case 3 -> readField(u, "token_ids", f, index);
            case 4 -> readField(u, "block_size", f, index);
            case 5 -> readField(u, "lora_id", f, index);
            case 6 -> readField(u, "medium", f, index);
            case 7 -> readField(u, "lora_name", f, index);
            case 8 -> readField(u, "extra_keys", f, index);
            default -> u.skipValue();
          }
        }
        return stored(f, index);
      }
      case BLOCK_REMOVED -> {
        for (int i = 1; i < n; i++) {
          switch (i) {
            case 1 -> readField(u, "block_hashes", f, index);
            case 2 -> readField(u, "medium", f, index);
            default -> u.skipValue();
          }
        }
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

  private static @Nullable KvEvent readMap(PayloadUnpacker u, int index)
      throws IOException, MalformedKvEventException {
    int n = u.mapHeader(index, null);
    String type = null;
    Fields f = new Fields();
    for (int i = 0; i < n; i++) {
      String k = readKey(u);
      if (k.equals("type")) {
        type = readString(u, "event " + index + " type");
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

  private static void readField(PayloadUnpacker u, String name, Fields f, int index)
      throws IOException, MalformedKvEventException {
    // the field's name for error messages is only built when there is an error: this runs for
    // every field of every event
    switch (name) {
      case "block_hashes" -> {
        if (u.getNextFormat().getValueType() != ValueType.ARRAY) {
          throw new MalformedKvEventException(where(index, name) + " must be an array");
        }
        int m = u.arrayHeader(index, name);
        long[] h = new long[m];
        if (!u.readLongs(h)) {
          for (int i = 0; i < m; i++) {
            h[i] = readHash(u, index, name);
          }
        }
        f.hashes = h;
      }
      case "parent_block_hash" -> {
        if (u.tryUnpackNil()) {
          f.hasParent = false;
        } else {
          f.hasParent = true;
          f.parent = readHash(u, index, name);
        }
      }
      case "token_ids" -> {
        if (u.getNextFormat().getValueType() != ValueType.ARRAY) {
          throw new MalformedKvEventException(where(index, name) + " must be an array");
        }
        int m = u.arrayHeader(index, name);
        int[] t = new int[m];
        if (u.readInts(t)) {
          f.tokens = t;
          return;
        }
        try {
          for (int i = 0; i < m; i++) {
            t[i] = u.unpackInt(); // rejects non-integers and values outside int itself
          }
        } catch (MessageTypeException e) {
          throw new MalformedKvEventException(where(index, name) + " must hold integers");
        }
        f.tokens = t;
      }
      case "block_size" -> f.blockSize = readOptionalInt(u, where(index, name), 0);
      case "lora_id" -> f.loraId = readOptionalInt(u, where(index, name), -1);
      case "medium" -> f.medium = readOptionalString(u, where(index, name));
      case "lora_name" -> f.loraName = readOptionalString(u, where(index, name));
      case "extra_keys" -> f.firstBlockExtraKeys = readFirstBlockExtraKeys(u, where(index, name));
      default -> u.skipValue();
    }
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

  private static KvEvent stored(Fields f, int index) throws MalformedKvEventException {
    if (f.hashes == null) {
      throw new MalformedKvEventException("event " + index + " (BlockStored) lacks block_hashes");
    }
    if (f.tokens == null) {
      throw new MalformedKvEventException("event " + index + " (BlockStored) lacks token_ids");
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
    String salt = null;
    if (!f.hasParent && f.firstBlockExtraKeys != null) {
      StringBuilder sb = new StringBuilder();
      for (String s : f.firstBlockExtraKeys) {
        if (!s.equals(f.loraName)) {
          if (sb.length() > 0) {
            sb.append('\u0000');
          }
          sb.append(s);
        }
      }
      salt = sb.length() == 0 ? null : sb.toString();
    }
    return new KvEvent.BlockStored(f.hashes, f.hasParent, f.parent, f.tokens, bs, f.loraId,
        Medium.of(f.medium), f.loraName, salt);
  }

  private static KvEvent removed(Fields f, int index) throws MalformedKvEventException {
    if (f.hashes == null) {
      throw new MalformedKvEventException("event " + index + " (BlockRemoved) lacks block_hashes");
    }
    return new KvEvent.BlockRemoved(f.hashes, Medium.of(f.medium));
  }

  private static String where(int index, String name) {
    return "event " + index + " field '" + name + "'";
  }

  private static long readHash(PayloadUnpacker u, int index, String name)
      throws IOException, MalformedKvEventException {
    MessageFormat fmt = u.getNextFormat();
    switch (fmt.getValueType()) {
      case INTEGER -> {
        if (fmt == MessageFormat.UINT64) {
          // 0xcf and 8 big-endian bytes; read raw so that values above Long.MAX_VALUE keep
          // their 64 bits without a BigInteger per hash
          byte[] b = u.readPayload(9);
          long v = 0;
          for (int i = 1; i < 9; i++) {
            v = v << 8 | (b[i] & 0xFF);
          }
          return v;
        }
        return u.unpackLong();
      }
      case BINARY -> {
        return u.foldBinary(index, name);
      }
      default -> throw new MalformedKvEventException(where(index, name)
          + " must hold integers or binary, got "
          + fmt.getValueType());
    }
  }

  /** Folds a binary digest to 64 bits: XOR of its big-endian 8-byte words (last word padded). */
  static long foldDigest(byte[] b) {
    return foldDigest(b, 0, b.length);
  }

  private static long foldDigest(byte[] b, int from, int len) {
    long h = 0;
    for (int i = 0; i < len; i += 8) {
      long w = 0;
      for (int j = 0; j < 8; j++) {
        w = (w << 8) | (i + j < len ? (b[from + i + j] & 0xFF) : 0);
      }
      h ^= w;
    }
    return h;
  }

  private static double readNumber(PayloadUnpacker u, String where)
      throws IOException, MalformedKvEventException {
    ValueType t = u.getNextFormat().getValueType();
    if (t == ValueType.FLOAT) {
      return u.unpackDouble();
    }
    if (t == ValueType.INTEGER) {
      return u.unpackLong();
    }
    throw new MalformedKvEventException("'" + where + "' must be a number, got " + t);
  }

  private static int readOptionalInt(PayloadUnpacker u, String where, int absent)
      throws IOException, MalformedKvEventException {
    if (u.tryUnpackNil()) {
      return absent;
    }
    if (u.getNextFormat().getValueType() != ValueType.INTEGER) {
      throw new MalformedKvEventException(where + " must be an integer");
    }
    return u.unpackInt();
  }

  private static @Nullable String readOptionalString(PayloadUnpacker u, String where)
      throws IOException, MalformedKvEventException {
    if (u.tryUnpackNil()) {
      return null;
    }
    return readString(u, where);
  }

  private static String readString(PayloadUnpacker u, String where)
      throws IOException, MalformedKvEventException {
    ValueType t = u.getNextFormat().getValueType();
    if (t == ValueType.STRING || t == ValueType.BINARY) {
      return u.string(where);
    }
    throw new MalformedKvEventException(where + " must be a string, got " + t);
  }

  private static String readKey(PayloadUnpacker u) throws IOException, MalformedKvEventException {
    return readString(u, "map key");
  }
}
