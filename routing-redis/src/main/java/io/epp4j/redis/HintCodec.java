package io.epp4j.redis;

import io.epp4j.api.PrefixBlocks;
import java.io.ByteArrayInputStream;
import java.io.DataInputStream;
import java.io.EOFException;
import java.io.IOException;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;

/**
 * The bytes of one hint batch: a header (format version, pool, origin router, when it was sent)
 * and records of three kinds. Compact and binary because a batch carries up to thousands of
 * 64-bit block hashes; self-describing enough that a corrupt or foreign entry is rejected as a
 * whole instead of being half applied.
 *
 * <pre>
 * byte 1 (version) | UTF pool | UTF origin | long sentEpochMicros | int records
 * PREFIX   byte 1 | long capturedEpochMicros | UTF endpoint | int blockSize | int n | n x long
 * SESSION  byte 2 | long capturedEpochMicros | UTF sessionKey | UTF endpoint
 * INFLIGHT byte 3 | UTF endpoint | int requests | long tokens
 * </pre>
 */
final class HintCodec {
  static final int VERSION = 1;
  static final byte PREFIX = 1;
  static final byte SESSION = 2;
  static final byte IN_FLIGHT = 3;
  /** Longer session keys are not shared: a key is an id, and ids this long are not ids. */
  static final int MAX_SESSION_KEY_CHARS = 1024;
  /** Longest string a batch holds (pool, router id, endpoint id), in bytes of modified UTF-8. */
  static final int MAX_STRING_BYTES = 65535;

  /** Bytes of {@code s} in modified UTF-8, the encoding batches hold strings in. */
  static long encodedLength(String s) {
    int n = s.length();
    long len = 0;
    for (int i = 0; i < n; i++) {
      char c = s.charAt(i);
      len += c >= 1 && c <= 0x7f ? 1 : c <= 0x7ff ? 2 : 3;
    }
    return len;
  }

  /**
   * Whether a batch can hold {@code s}: at most {@link #MAX_STRING_BYTES} in modified UTF-8.
   * Cheap for the ids a pool has (a string of up to a third of that many characters always fits).
   */
  static boolean fits(String s) {
    return s.length() <= MAX_STRING_BYTES / 3 || encodedLength(s) <= MAX_STRING_BYTES;
  }

  /** More blocks than any prefix scorer considers (its maximum is 2^22). */
  static final int MAX_BLOCKS = 1 << 22;
  /**
   * Latest send or capture time a batch may carry, in µs since the epoch: the end of the year
   * 9999. A router stamps its own clock's reading, never before 1970 nor anywhere near this; a
   * time outside is a corrupt or foreign entry's. Taken as it was, such a time (a
   * {@link Long#MIN_VALUE} send time, say) overflowed the reader's clock-offset arithmetic,
   * which then held for that router's later batches too.
   */
  static final long MAX_EPOCH_MICROS = 253_402_300_799_999_999L;

  /** Whether {@code epochMicros} is a time a router's clock reads: 1970 to the year 9999. */
  static boolean plausibleTime(long epochMicros) {
    return epochMicros >= 0 && epochMicros <= MAX_EPOCH_MICROS;
  }

  private HintCodec() {}

  /**
   * Writes one batch; call the record methods, then {@link #finish}. Reusable: {@link #reset}
   * keeps the buffer, so the publisher allocates one array per batch sent and nothing per hint.
   * Strings are written as {@link java.io.DataOutput#writeUTF} does (modified UTF-8), numbers
   * big-endian as {@link java.io.DataOutput} does, each with one store: a batch is mostly block
   * hashes, and writing them a byte at a time made the encoding most of the publisher's work.
   */
  static final class Writer {
    private static final VarHandle INT =
        MethodHandles.byteArrayViewVarHandle(int[].class, ByteOrder.BIG_ENDIAN);
    private static final VarHandle LONG =
        MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.BIG_ENDIAN);

    /** Endpoint ids whose encoding is kept; a power of two. */
    static final int ID_CACHE = 64;

    private byte[] buf = new byte[8192];
    private int pos;
    private int records;
    // the records start this far into buf, leaving room for a header as long as the last one
    // (the same pool and origin batch after batch), so that the batch is one copy of buf
    private int headerRoom;
    // the same few endpoint ids come in every record: their encoded form (length included) is
    // kept in a small direct-mapped table, so a record copies it instead of encoding it again
    private final String[] ids = new String[ID_CACHE];
    private final byte[][] idBytes = new byte[ID_CACHE][];

    int records() {
      return records;
    }

    /** Bytes the batch holds so far (its header's room included). */
    int bytes() {
      return pos;
    }

    void reset() {
      pos = headerRoom;
      records = 0;
    }

    /**
     * Takes the batch back to what it held when it had {@code bytes} bytes and {@code records}
     * records (as {@link #bytes} and {@link #records} said then): drops a record left half
     * written by a failure.
     */
    void rewind(int bytes, int records) {
      pos = bytes;
      this.records = records;
    }

    void prefix(long capturedEpochMicros, String endpointId, int blockSize, long[] hashes) {
      prefix(capturedEpochMicros, endpointId, PrefixBlocks.of(blockSize, hashes));
    }

    void prefix(long capturedEpochMicros, String endpointId, PrefixBlocks blocks) {
      int n = blocks.size();
      ensure(1 + 8);
      buf[pos++] = PREFIX;
      putLong(capturedEpochMicros);
      putId(endpointId);
      ensure(8 + 8 * n);
      putInt(blocks.blockSizeTokens());
      putInt(n);
      byte[] b = buf;
      int p = pos;
      for (int i = 0; i < n; i++, p += 8) {
        LONG.set(b, p, blocks.hash(i));
      }
      pos = p;
      records++;
    }

    void session(long capturedEpochMicros, String sessionKey, String endpointId) {
      ensure(9);
      buf[pos++] = SESSION;
      putLong(capturedEpochMicros);
      putUtf(sessionKey);
      putId(endpointId);
      records++;
    }

    void inFlight(String endpointId, int requests, long tokens) {
      ensure(1);
      buf[pos++] = IN_FLIGHT;
      putId(endpointId);
      ensure(12);
      putInt(requests);
      putLong(tokens);
      records++;
    }

    byte[] finish(String pool, String origin, long sentEpochMicros) {
      int poolLen = utfLength(pool);
      int originLen = utfLength(origin);
      int headerLen = 1 + 2 + poolLen + 2 + originLen + 8 + 4;
      if (headerLen != headerRoom) {
        // the first batch, or another pool or origin: the records move to fit the header
        if (headerLen > headerRoom) {
          ensure(headerLen - headerRoom);
        }
        System.arraycopy(buf, headerRoom, buf, headerLen, pos - headerRoom);
        pos += headerLen - headerRoom;
        headerRoom = headerLen;
      }
      byte[] b = buf;
      b[0] = VERSION;
      int p = writeUtf(pool, poolLen, b, 1);
      p = writeUtf(origin, originLen, b, p);
      LONG.set(b, p, sentEpochMicros);
      INT.set(b, p + 8, records);
      // a copy of one range into a new array: the JIT need not zero the array first
      return java.util.Arrays.copyOf(b, pos);
    }

    private void ensure(int n) {
      if (pos + n > buf.length) {
        buf = java.util.Arrays.copyOf(buf, Math.max(buf.length * 2, pos + n));
      }
    }

    private void putInt(int v) {
      INT.set(buf, pos, v);
      pos += 4;
    }

    private void putLong(long v) {
      LONG.set(buf, pos, v);
      pos += 8;
    }

    private void putUtf(String s) {
      int len = utfLength(s);
      ensure(2 + len);
      pos = writeUtf(s, len, buf, pos);
    }

    /** An endpoint id, as {@link #putUtf} writes it. */
    private void putId(String id) {
      int slot = id.hashCode() & (ID_CACHE - 1);
      String known = ids[slot];
      byte[] enc;
      if (known == id || id.equals(known)) {
        enc = idBytes[slot];
      } else {
        int len = utfLength(id);
        enc = new byte[2 + len];
        writeUtf(id, len, enc, 0);
        ids[slot] = id;
        idBytes[slot] = enc;
      }
      ensure(enc.length);
      System.arraycopy(enc, 0, buf, pos, enc.length);
      pos += enc.length;
    }

    /** Bytes of {@code s} in modified UTF-8, without the length. */
    private static int utfLength(String s) {
      long len = encodedLength(s);
      if (len > MAX_STRING_BYTES) {
        throw new IllegalArgumentException("string longer than 65535 bytes in modified UTF-8");
      }
      return (int) len;
    }

    /** Writes the length and the bytes of {@code s} at {@code at}; returns the end. */
    private static int writeUtf(String s, int len, byte[] b, int at) {
      int p = at;
      b[p++] = (byte) (len >>> 8);
      b[p++] = (byte) len;
      int n = s.length();
      for (int i = 0; i < n; i++) {
        char c = s.charAt(i);
        if (c >= 1 && c <= 0x7f) {
          b[p++] = (byte) c;
        } else if (c <= 0x7ff) {
          b[p++] = (byte) (0xc0 | (c >> 6));
          b[p++] = (byte) (0x80 | (c & 0x3f));
        } else {
          b[p++] = (byte) (0xe0 | (c >> 12));
          b[p++] = (byte) (0x80 | ((c >> 6) & 0x3f));
          b[p++] = (byte) (0x80 | (c & 0x3f));
        }
      }
      return p;
    }
  }

  /** Receives the records of a decoded batch. */
  interface Visitor {
    void prefix(long capturedEpochMicros, String endpointId, int blockSize, long[] hashes);

    void session(long capturedEpochMicros, String sessionKey, String endpointId);

    void inFlight(String endpointId, int requests, long tokens);
  }

  /** A decoded batch header. */
  record Header(String pool, String origin, long sentEpochMicros, int records) {}

  /** Thrown for a batch that is not one this version writes. */
  static final class MalformedBatchException extends Exception {
    MalformedBatchException(String message) {
      super(message);
    }
  }

  /** Reads the header; the stream is left at the first record. */
  static Header header(Input in) throws MalformedBatchException {
    try {
      int v = in.readUnsignedByte();
      if (v != VERSION) {
        throw new MalformedBatchException("unknown batch version " + v);
      }
      String pool = in.readUTF();
      String origin = in.readUTF();
      long sent = in.readLong();
      if (!plausibleTime(sent)) {
        throw new MalformedBatchException("send time outside the years 1970 to 9999");
      }
      int n = in.readInt();
      if (n < 0) {
        throw new MalformedBatchException("negative record count");
      }
      return new Header(pool, origin, sent, n);
    } catch (IOException e) {
      throw new MalformedBatchException("truncated header");
    }
  }

  /**
   * The header's length in {@code stored} (from its position) when the batch is of a pool other
   * than the one {@code poolUtf} encodes, or written by the router {@code originUtf} encodes
   * (each as {@link java.io.DataOutput#writeUTF} writes it, length first) and sent at or after
   * {@code ownSentFrom}: the reader needs no more of it. -1 when it is one to read whole (an
   * earlier run's under the same id among them), or its header cannot be read (it is then read
   * whole and found malformed).
   */
  static int headerLengthIfSkipped(java.nio.ByteBuffer stored, byte[] poolUtf, byte[] originUtf,
      long ownSentFrom) {
    int start = stored.position();
    int end = stored.limit();
    int p = start + 1; // the version
    if (p + 2 > end) {
      return -1;
    }
    int poolEnd = p + 2 + (((stored.get(p) & 0xFF) << 8) | (stored.get(p + 1) & 0xFF));
    if (poolEnd + 2 > end) {
      return -1;
    }
    int originEnd = poolEnd + 2
        + (((stored.get(poolEnd) & 0xFF) << 8) | (stored.get(poolEnd + 1) & 0xFF));
    int headerEnd = originEnd + 8 + 4;
    if (headerEnd > end) {
      return -1;
    }
    boolean otherPool = !sameBytes(stored, p, poolEnd, poolUtf);
    boolean own = !otherPool && sameBytes(stored, poolEnd, originEnd, originUtf)
        && sentMicros(stored, originEnd) >= ownSentFrom;
    return otherPool || own ? headerEnd - start : -1;
  }

  /** The header's send time, at {@code at} in {@code b}, big-endian whatever the buffer's order. */
  private static long sentMicros(java.nio.ByteBuffer b, int at) {
    long v = 0;
    for (int i = 0; i < 8; i++) {
      v = (v << 8) | (b.get(at + i) & 0xFF);
    }
    return v;
  }

  private static boolean sameBytes(java.nio.ByteBuffer b, int from, int to, byte[] expected) {
    if (to - from != expected.length) {
      return false;
    }
    for (int i = 0; i < expected.length; i++) {
      if (b.get(from + i) != expected[i]) {
        return false;
      }
    }
    return true;
  }

  /** {@code s} as {@link java.io.DataOutput#writeUTF} writes it: its length, then its bytes. */
  static byte[] utf(String s) {
    java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream();
    try {
      new java.io.DataOutputStream(out).writeUTF(s);
    } catch (IOException e) {
      throw new IllegalArgumentException("longer than a batch can hold", e);
    }
    return out.toByteArray();
  }

  static Input input(byte[] batch) {
    return new Input(batch);
  }

  /**
   * Reads a batch as {@link DataInputStream} would (big-endian numbers, modified UTF-8 strings),
   * each number with one load rather than a stream's synchronized eight-byte read: every router
   * decodes every other router's block hashes. A read past the end is an {@link EOFException}.
   */
  static final class Input {
    private static final VarHandle INT =
        MethodHandles.byteArrayViewVarHandle(int[].class, ByteOrder.BIG_ENDIAN);
    private static final VarHandle LONG =
        MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.BIG_ENDIAN);
    private final byte[] buf;
    private int pos;

    Input(byte[] buf) {
      this.buf = buf;
    }

    int available() {
      return buf.length - pos;
    }

    private void need(int n) throws EOFException {
      if (n > buf.length - pos) {
        throw new EOFException();
      }
    }

    int readUnsignedByte() throws EOFException {
      need(1);
      return buf[pos++] & 0xFF;
    }

    int readInt() throws EOFException {
      need(4);
      int v = (int) INT.get(buf, pos);
      pos += 4;
      return v;
    }

    long readLong() throws EOFException {
      need(8);
      long v = (long) LONG.get(buf, pos);
      pos += 8;
      return v;
    }

    void readLongs(long[] into) throws EOFException {
      need(8 * into.length);
      for (int i = 0; i < into.length; i++) {
        into[i] = (long) LONG.get(buf, pos);
        pos += 8;
      }
    }

    /** A {@link java.io.DataOutput#writeUTF} string: ASCII directly, anything else decoded. */
    String readUTF() throws IOException {
      need(2);
      int len = ((buf[pos] & 0xFF) << 8) | (buf[pos + 1] & 0xFF);
      need(2 + len);
      int start = pos + 2;
      for (int i = start, end = start + len; i < end; i++) {
        if (buf[i] < 0) {
          // multi-byte modified UTF-8 (rare: ids and keys are ASCII): decoded as DataInput does
          String v = new DataInputStream(new ByteArrayInputStream(buf, pos, 2 + len)).readUTF();
          pos = start + len;
          return v;
        }
      }
      String v = new String(buf, start, len, StandardCharsets.ISO_8859_1);
      pos = start + len;
      return v;
    }
  }

  /** A record's capture time, which must be one a router's clock reads as the send time must. */
  private static long capturedAt(Input in) throws IOException, MalformedBatchException {
    long at = in.readLong();
    if (!plausibleTime(at)) {
      throw new MalformedBatchException("capture time outside the years 1970 to 9999");
    }
    return at;
  }

  /**
   * Decodes every record before handing any to {@code visitor}, so a batch that turns out
   * corrupt halfway applies nothing.
   */
  static void records(Input in, Header h, Visitor visitor)
      throws MalformedBatchException {
    java.util.List<Runnable> decoded = new java.util.ArrayList<>(Math.min(h.records(), 4096));
    try {
      for (int i = 0; i < h.records(); i++) {
        int kind = in.readUnsignedByte();
        switch (kind) {
          case PREFIX -> {
            long at = capturedAt(in);
            String ep = in.readUTF();
            int bs = in.readInt();
            int n = in.readInt();
            if (bs < 1 || n < 0 || n > MAX_BLOCKS || n > in.available() / 8) {
              throw new MalformedBatchException("bad prefix record");
            }
            long[] hashes = new long[n];
            in.readLongs(hashes);
            decoded.add(() -> visitor.prefix(at, ep, bs, hashes));
          }
          case SESSION -> {
            long at = capturedAt(in);
            String key = in.readUTF();
            if (key.length() > MAX_SESSION_KEY_CHARS) {
              // no router sends one: each would hold up to 64 KiB wherever sessions are kept
              throw new MalformedBatchException("session key longer than "
                  + MAX_SESSION_KEY_CHARS + " characters");
            }
            String ep = in.readUTF();
            decoded.add(() -> visitor.session(at, key, ep));
          }
          case IN_FLIGHT -> {
            String ep = in.readUTF();
            int r = in.readInt();
            long t = in.readLong();
            decoded.add(() -> visitor.inFlight(ep, r, t));
          }
          default -> throw new MalformedBatchException("unknown record kind " + kind);
        }
      }
      if (in.available() != 0) {
        throw new MalformedBatchException("trailing bytes after the last record");
      }
    } catch (IOException e) {
      throw new MalformedBatchException("truncated record");
    }
    for (Runnable r : decoded) {
      r.run();
    }
  }
}
