package io.epp4j.redis;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;

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
  /** More blocks than any prefix scorer considers (its maximum is 2^22). */
  static final int MAX_BLOCKS = 1 << 22;

  private HintCodec() {}

  /** Writes one batch; call the record methods, then {@link #finish}. */
  static final class Writer {
    private final ByteArrayOutputStream bytes = new ByteArrayOutputStream(4096);
    private final DataOutputStream out = new DataOutputStream(bytes);
    private final ByteArrayOutputStream body = new ByteArrayOutputStream(4096);
    private final DataOutputStream rec = new DataOutputStream(body);
    private int records;

    int records() {
      return records;
    }

    void prefix(long capturedEpochMicros, String endpointId, int blockSize, long[] hashes) {
      try {
        rec.writeByte(PREFIX);
        rec.writeLong(capturedEpochMicros);
        rec.writeUTF(endpointId);
        rec.writeInt(blockSize);
        rec.writeInt(hashes.length);
        for (long h : hashes) {
          rec.writeLong(h);
        }
        records++;
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }

    void session(long capturedEpochMicros, String sessionKey, String endpointId) {
      try {
        rec.writeByte(SESSION);
        rec.writeLong(capturedEpochMicros);
        rec.writeUTF(sessionKey);
        rec.writeUTF(endpointId);
        records++;
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }

    void inFlight(String endpointId, int requests, long tokens) {
      try {
        rec.writeByte(IN_FLIGHT);
        rec.writeUTF(endpointId);
        rec.writeInt(requests);
        rec.writeLong(tokens);
        records++;
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }

    byte[] finish(String pool, String origin, long sentEpochMicros) {
      try {
        out.writeByte(VERSION);
        out.writeUTF(pool);
        out.writeUTF(origin);
        out.writeLong(sentEpochMicros);
        out.writeInt(records);
        rec.flush();
        body.writeTo(out);
        out.flush();
        return bytes.toByteArray();
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
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
  static Header header(DataInputStream in) throws MalformedBatchException {
    try {
      int v = in.readUnsignedByte();
      if (v != VERSION) {
        throw new MalformedBatchException("unknown batch version " + v);
      }
      String pool = in.readUTF();
      String origin = in.readUTF();
      long sent = in.readLong();
      int n = in.readInt();
      if (n < 0) {
        throw new MalformedBatchException("negative record count");
      }
      return new Header(pool, origin, sent, n);
    } catch (IOException e) {
      throw new MalformedBatchException("truncated header");
    }
  }

  static DataInputStream input(byte[] batch) {
    return new DataInputStream(new ByteArrayInputStream(batch));
  }

  /**
   * Decodes every record before handing any to {@code visitor}, so a batch that turns out
   * corrupt halfway applies nothing.
   */
  static void records(DataInputStream in, Header h, Visitor visitor)
      throws MalformedBatchException {
    java.util.List<Runnable> decoded = new java.util.ArrayList<>(Math.min(h.records(), 4096));
    try {
      for (int i = 0; i < h.records(); i++) {
        int kind = in.readUnsignedByte();
        switch (kind) {
          case PREFIX -> {
            long at = in.readLong();
            String ep = in.readUTF();
            int bs = in.readInt();
            int n = in.readInt();
            if (bs < 1 || n < 0 || n > MAX_BLOCKS || n > in.available() / 8) {
              throw new MalformedBatchException("bad prefix record");
            }
            long[] hashes = new long[n];
            for (int j = 0; j < n; j++) {
              hashes[j] = in.readLong();
            }
            decoded.add(() -> visitor.prefix(at, ep, bs, hashes));
          }
          case SESSION -> {
            long at = in.readLong();
            String key = in.readUTF();
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
