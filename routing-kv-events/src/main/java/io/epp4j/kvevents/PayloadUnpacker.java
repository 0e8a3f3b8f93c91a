package io.epp4j.kvevents;

import java.io.IOException;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import org.jspecify.annotations.Nullable;
import org.msgpack.core.MessageFormat;
import org.msgpack.core.MessageIntegerOverflowException;
import org.msgpack.core.MessagePack;
import org.msgpack.core.MessageUnpacker;
import org.msgpack.core.buffer.ArrayBufferInput;
import org.msgpack.value.ValueType;

/**
 * The msgpack reader of one untrusted KV-event payload: every length it hands out (array, map,
 * str, bin) has been checked against the bytes that remain after it, so a caller may size an
 * array from it, and every typed read names the field in its {@link MalformedKvEventException}.
 * It knows msgpack and nothing of vLLM's event shapes, which {@link KvEventDecoder} reads with
 * it.
 *
 * <p>It can also read a run of integers straight from the payload's bytes ({@link #readLongs},
 * {@link #readInts}): token IDs are most of a {@code BlockStored}, and decoding them value by
 * value through the unpacker costs several times more.
 *
 * <p>One instance reads one payload on one thread and is then dropped; it is not thread-safe.
 */
final class PayloadUnpacker extends MessageUnpacker {
  private static final VarHandle BIG_ENDIAN_INT =
      MethodHandles.byteArrayViewVarHandle(int[].class,
          ByteOrder.BIG_ENDIAN);
  private static final VarHandle BIG_ENDIAN_SHORT =
      MethodHandles.byteArrayViewVarHandle(short[].class,
          ByteOrder.BIG_ENDIAN);
  private static final VarHandle BIG_ENDIAN_LONG =
      MethodHandles.byteArrayViewVarHandle(long[].class,
          ByteOrder.BIG_ENDIAN);
  private final byte[] payload;

  PayloadUnpacker(byte[] payload) {
    super(new ArrayBufferInput(payload),
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

  /** Names a field of an event in error messages. */
  static String where(int event, String field) {
    return "event " + event + " field '" + field + "'";
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
    return new String(payload, start, len, StandardCharsets.UTF_8);
  }

  /** A bin digest folded to 64 bits without copying it. */
  long foldBinary(int event, String field) throws IOException, MalformedKvEventException {
    int len = rawLength(event, field);
    int start = (int) getTotalReadBytes();
    readPayloadAsReference(len);
    return foldDigest(payload, start, len);
  }

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

  // ------------------------------------------------------------------ typed reads of one value

  /**
   * A block hash: an integer (uint64 kept bit for bit, so values above {@code Long.MAX_VALUE}
   * survive) or a binary digest folded to 64 bits.
   */
  long readHash(int event, String field) throws IOException, MalformedKvEventException {
    MessageFormat fmt = getNextFormat();
    switch (fmt.getValueType()) {
      case INTEGER -> {
        if (fmt == MessageFormat.UINT64) {
          // 0xcf and 8 big-endian bytes; read raw so that values above Long.MAX_VALUE keep
          // their 64 bits without a BigInteger per hash
          byte[] b = readPayload(9);
          long v = 0;
          for (int i = 1; i < 9; i++) {
            v = v << 8 | (b[i] & 0xFF);
          }
          return v;
        }
        return unpackLong();
      }
      case BINARY -> {
        return foldBinary(event, field);
      }
      default -> throw new MalformedKvEventException(where(event, field)
          + " must hold integers or binary, got "
          + fmt.getValueType());
    }
  }

  /** Folds a binary digest to 64 bits: XOR of its big-endian 8-byte words (last word padded). */
  static long foldDigest(byte[] b, int from, int len) {
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

  /** A float or an integer, as a double. */
  double readNumber(String where) throws IOException, MalformedKvEventException {
    ValueType t = getNextFormat().getValueType();
    if (t == ValueType.FLOAT) {
      return unpackDouble();
    }
    if (t == ValueType.INTEGER) {
      try {
        return unpackLong();
      } catch (MessageIntegerOverflowException e) {
        // the unpacker's own message is the bare number: name the field instead
        throw new MalformedKvEventException("'" + where + "' is an integer beyond 64 bits");
      }
    }
    throw new MalformedKvEventException("'" + where + "' must be a number, got " + t);
  }

  /** An int, or {@code absent} for nil. */
  int readOptionalInt(String where, int absent) throws IOException, MalformedKvEventException {
    if (tryUnpackNil()) {
      return absent;
    }
    if (getNextFormat().getValueType() != ValueType.INTEGER) {
      throw new MalformedKvEventException(where + " must be an integer");
    }
    try {
      return unpackInt();
    } catch (MessageIntegerOverflowException e) {
      // the unpacker's own message is the bare number: name the field instead
      throw new MalformedKvEventException(where + " is an integer beyond the int range");
    }
  }

  /** A str or bin as text, or null for nil. */
  @Nullable String readOptionalString(String where) throws IOException, MalformedKvEventException {
    if (tryUnpackNil()) {
      return null;
    }
    return readString(where);
  }

  /** A str or bin as text; anything else is malformed. */
  String readString(String where) throws IOException, MalformedKvEventException {
    ValueType t = getNextFormat().getValueType();
    if (t == ValueType.STRING || t == ValueType.BINARY) {
      return string(where);
    }
    throw new MalformedKvEventException(where + " must be a string, got " + t);
  }

  /** A map key, which vLLM's encoders always write as a str. */
  String readKey() throws IOException, MalformedKvEventException {
    return readString("map key");
  }
}
