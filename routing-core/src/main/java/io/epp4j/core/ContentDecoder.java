package io.epp4j.core;

import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.Locale;
import java.util.function.Consumer;
import java.util.zip.DataFormatException;
import java.util.zip.Inflater;
import org.jspecify.annotations.Nullable;

/**
 * Undoes an answer's {@code content-encoding} as its chunks pass, for {@link UsageScanner}:
 * {@code gzip} (RFC 1952, members one after another included) and {@code deflate} (the zlib
 * format of RFC 1950, or raw deflate as some servers send it). Holds a fixed 8 KiB output buffer
 * and the header bytes of the current gzip member (at most {@value #MAX_HEADER}); what it
 * decodes is handed on and not kept.
 *
 * <p>Decoding stops for good (and the answer's usage is not read further) when the data is
 * corrupt, when a gzip header outgrows {@value #MAX_HEADER} bytes, or when the decoded bytes
 * exceed {@value #FREE_BYTES} plus {@value #MAX_RATIO} times the encoded bytes seen: text and
 * server-sent events compress some 3–20 times, and a stream that expands far more is not worth
 * a gateway thread's time. Not thread-safe.
 */
final class ContentDecoder {
  /** Decoded bytes allowed beyond {@link #MAX_RATIO} times the encoded ones. */
  static final long FREE_BYTES = 1L << 20;
  /** Most decoded bytes per encoded byte, beyond {@link #FREE_BYTES}. */
  static final long MAX_RATIO = 100;
  /**
   * Longest gzip member header read, its optional name, comment and extra field included (HTTP
   * servers write none of them, or a file name).
   */
  static final int MAX_HEADER = 1024;

  private static final int FHCRC = 2;
  private static final int FEXTRA = 4;
  private static final int FNAME = 8;
  private static final int FCOMMENT = 16;

  private enum State { HEADER, BODY, TRAILER, DEFLATE_START, FAILED }

  private final boolean gzip;
  private final Consumer<ByteBuffer> out;
  private final byte[] buf = new byte[8192];
  private @Nullable Inflater inflater;
  private State state;
  /** gzip: the current member's header bytes so far. */
  private byte[] header = new byte[0];
  private int headerLen;
  /** gzip: trailer bytes (CRC-32 and size) still to skip. */
  private int trailerLeft;
  private long encodedSeen;
  private long decoded;

  private ContentDecoder(boolean gzip, Consumer<ByteBuffer> out) {
    this.gzip = gzip;
    this.out = out;
    this.state = gzip ? State.HEADER : State.DEFLATE_START;
  }

  /** What an answer's {@code content-encoding} means to the scanner. */
  enum Encoding { IDENTITY, GZIP, DEFLATE, UNSUPPORTED }

  /**
   * {@code value}: the header's value, or null without one. A list of codings (applied one
   * after another) and codings other than gzip, x-gzip, deflate and identity are unsupported.
   */
  static Encoding encoding(@Nullable String value) {
    if (value == null) {
      return Encoding.IDENTITY;
    }
    String v = value.trim().toLowerCase(Locale.ROOT);
    switch (v) {
      case "", "identity":
        return Encoding.IDENTITY;
      case "gzip", "x-gzip":
        return Encoding.GZIP;
      case "deflate":
        return Encoding.DEFLATE;
      default:
        return Encoding.UNSUPPORTED;
    }
  }

  /** A decoder for {@code encoding} (GZIP or DEFLATE) handing decoded bytes to {@code out}. */
  static ContentDecoder of(Encoding encoding, Consumer<ByteBuffer> out) {
    if (encoding != Encoding.GZIP && encoding != Encoding.DEFLATE) {
      throw new IllegalArgumentException("not a compressed encoding: " + encoding);
    }
    return new ContentDecoder(encoding == Encoding.GZIP, out);
  }

  /** Whether decoding stopped for good (corrupt data, or past the bounds in the class doc). */
  boolean failed() {
    return state == State.FAILED;
  }

  /** Decodes the bytes from {@code chunk}'s position to its limit; the position is left as is. */
  void feed(ByteBuffer chunk) {
    ByteBuffer in = chunk.duplicate();
    encodedSeen += in.remaining();
    while (in.hasRemaining() && state != State.FAILED) {
      switch (state) {
        case HEADER -> header(in);
        case TRAILER -> {
          int skip = Math.min(trailerLeft, in.remaining());
          in.position(in.position() + skip);
          trailerLeft -= skip;
          if (trailerLeft == 0) {
            state = State.HEADER; // another member may follow
            headerLen = 0;
          }
        }
        case DEFLATE_START -> {
          if (in.remaining() < 2 && headerLen == 0) {
            // one byte cannot tell zlib from raw: hold it
            header = new byte[2];
            header[0] = in.get();
            headerLen = 1;
            continue;
          }
          int b0 = headerLen == 1 ? header[0] & 0xFF : in.get(in.position()) & 0xFF;
          int b1 = headerLen == 1 ? in.get(in.position()) & 0xFF : in.get(in.position() + 1) & 0xFF;
          boolean zlib = (b0 & 0x0F) == 8 && ((b0 << 8) | b1) % 31 == 0;
          inflater = new Inflater(!zlib);
          state = State.BODY;
          if (headerLen == 1) {
            headerLen = 0;
            inflate(ByteBuffer.wrap(header, 0, 1));
          }
        }
        case BODY -> inflate(in);
        default -> throw new IllegalStateException(state.name());
      }
    }
  }

  /** Frees the inflater; later chunks are ignored. */
  void end() {
    Inflater i = inflater;
    if (i != null) {
      i.end();
      inflater = null;
    }
    state = State.FAILED;
  }

  private void fail() {
    end();
  }

  private void inflate(ByteBuffer in) {
    Inflater i = inflater;
    if (i == null) {
      fail();
      return;
    }
    i.setInput(in);
    try {
      while (true) {
        int k = i.inflate(buf);
        if (k > 0) {
          decoded += k;
          if (decoded > FREE_BYTES + MAX_RATIO * encodedSeen) {
            fail();
            return;
          }
          out.accept(ByteBuffer.wrap(buf, 0, k));
        }
        if (i.finished()) {
          // the setInput(ByteBuffer) form advanced in's position past what was consumed
          if (gzip) {
            i.reset();
            state = State.TRAILER;
            trailerLeft = 8;
          } else {
            end(); // a deflate stream holds one; anything after it is not decoded
          }
          return;
        }
        if (k == 0 && (i.needsInput() || i.needsDictionary())) {
          if (i.needsDictionary()) {
            fail(); // a preset dictionary HTTP never names
          }
          return;
        }
      }
    } catch (DataFormatException e) {
      fail();
    }
  }

  /** Collects a gzip member header; switches to BODY once it is complete. */
  private void header(ByteBuffer in) {
    while (in.hasRemaining()) {
      if (headerLen == header.length) {
        if (headerLen >= MAX_HEADER) {
          fail();
          return;
        }
        header = Arrays.copyOf(header, Math.min(MAX_HEADER, Math.max(16, headerLen * 2)));
      }
      header[headerLen++] = in.get();
      int complete = headerComplete();
      if (complete < 0) {
        fail();
        return;
      }
      if (complete > 0) {
        if (inflater == null) {
          inflater = new Inflater(true);
        }
        state = State.BODY;
        headerLen = 0;
        return;
      }
    }
  }

  /** 1 when {@code header[0, headerLen)} is a whole gzip header, 0 when not yet, -1 when bad. */
  private int headerComplete() {
    if (headerLen >= 1 && (header[0] & 0xFF) != 0x1F
        || headerLen >= 2 && (header[1] & 0xFF) != 0x8B
        || headerLen >= 3 && header[2] != 8) {
      return -1; // not gzip, or not deflate inside
    }
    if (headerLen < 10) {
      return 0;
    }
    int flags = header[3] & 0xFF;
    int p = 10;
    if ((flags & FEXTRA) != 0) {
      if (headerLen < p + 2) {
        return 0;
      }
      p += 2 + ((header[p] & 0xFF) | (header[p + 1] & 0xFF) << 8);
      if (headerLen < p) {
        return 0;
      }
    }
    for (int f : new int[] {FNAME, FCOMMENT}) {
      if ((flags & f) != 0) {
        while (p < headerLen && header[p] != 0) {
          p++;
        }
        if (p >= headerLen) {
          return 0;
        }
        p++; // the terminating zero
      }
    }
    if ((flags & FHCRC) != 0) {
      p += 2;
    }
    return headerLen >= p ? 1 : 0;
  }
}
