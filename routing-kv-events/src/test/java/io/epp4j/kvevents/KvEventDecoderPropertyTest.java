package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.Arrays;
import java.util.List;
import java.util.Random;
import net.jqwik.api.Arbitraries;
import net.jqwik.api.Arbitrary;
import net.jqwik.api.Combinators;
import net.jqwik.api.Example;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.Provide;
import net.jqwik.api.constraints.Size;

/**
 * What the decoder promises for any bytes a socket may deliver: a batch or a
 * {@link MalformedKvEventException}, nothing else, and never more memory than a small multiple
 * of the payload's size. Valid encodings decode to exactly what was encoded.
 */
class KvEventDecoderPropertyTest {

  /**
   * The most a decode may allocate for an {@code n}-byte payload. Decoding legitimately expands:
   * a one-byte hash becomes a {@code long}, a one-byte token an {@code int}, a three-byte event
   * an object with its arrays; 64 bytes per payload byte covers that with room. The constant is
   * the unpacker, the exception and its stack trace.
   */
  static long allocationBound(int n) {
    return 64L * n + 64 * 1024;
  }

  @Property(tries = 3000)
  void arbitraryBytesDecodeOrFailAsMalformedWithinTheBound(
      @ForAll @Size(max = 400) byte[] payload) {
    assertDecodesCleanly(payload);
  }

  @Property(tries = 4000)
  void mutatedEncodingsDecodeOrFailAsMalformedWithinTheBound(
      @ForAll("mutatedEncodings") byte[] payload) {
    assertDecodesCleanly(payload);
  }

  @Property(tries = 1000)
  void validEncodingsRoundTripExactly(@ForAll long seed,
      @ForAll VllmEventEncoder.Shape shape, @ForAll boolean binaryHashes,
      @ForAll boolean extraFields) throws MalformedKvEventException {
    KvEventBatch batch = KvEventDecoderTest.randomBatch(new Random(seed));
    byte[] payload = new VllmEventEncoder(shape, binaryHashes, seed, extraFields).encode(batch);
    assertThat(KvEventDecoder.decode(payload)).isEqualTo(batch);
    assertThat(KvEventDecoderTest.allocatedBytes(() -> decodeQuietly(payload)))
        .isLessThanOrEqualTo(allocationBound(payload.length));
  }

  private static void decodeQuietly(byte[] payload) {
    try {
      KvEventDecoder.decode(payload);
    } catch (MalformedKvEventException e) {
      throw new AssertionError(e);
    }
  }

  static void assertDecodesCleanly(byte[] payload) {
    Throwable[] thrown = new Throwable[1];
    KvEventBatch[] decoded = new KvEventBatch[1];
    Runnable decode = () -> {
      try {
        decoded[0] = KvEventDecoder.decode(payload);
      } catch (Throwable t) { // anything but MalformedKvEventException is the failure looked for
        thrown[0] = t;
      }
    };
    long allocated = KvEventDecoderTest.allocatedBytes(decode);
    if (thrown[0] != null) {
      assertThat(thrown[0]).isInstanceOf(MalformedKvEventException.class);
      assertThat(thrown[0].getMessage()).isNotBlank();
    } else {
      assertThat(decoded[0].events()).doesNotContainNull();
    }
    if (allocated > allocationBound(payload.length)) {
      // the first decode along a new path also loads classes on this thread: measure again
      allocated = KvEventDecoderTest.allocatedBytes(decode);
    }
    assertThat(allocated).as("bytes allocated decoding %d bytes", payload.length)
        .isLessThanOrEqualTo(allocationBound(payload.length));
  }

  /** One change to a valid encoding. */
  sealed interface Mutation {
    byte[] apply(byte[] p);
  }

  /** One byte replaced. */
  record Overwrite(int at, byte value) implements Mutation {
    public byte[] apply(byte[] p) {
      byte[] q = p.clone();
      if (q.length > 0) {
        q[Math.floorMod(at, q.length)] = value;
      }
      return q;
    }
  }

  /** The payload cut short. */
  record Truncate(int at) implements Mutation {
    public byte[] apply(byte[] p) {
      return Arrays.copyOf(p, p.length == 0 ? 0 : Math.floorMod(at, p.length));
    }
  }

  /** A run of bytes taken out. */
  record Delete(int at, int count) implements Mutation {
    public byte[] apply(byte[] p) {
      if (p.length == 0) {
        return p;
      }
      int from = Math.floorMod(at, p.length);
      int to = Math.min(p.length, from + count);
      byte[] q = new byte[p.length - (to - from)];
      System.arraycopy(p, 0, q, 0, from);
      System.arraycopy(p, to, q, from, p.length - to);
      return q;
    }
  }

  /**
   * A length header (array, map, str, bin or ext of any width) written over the payload or
   * inserted into it, so that lengths the payload cannot back land in every position.
   */
  record LengthHeader(int at, int format, int length, boolean insert) implements Mutation {
    public byte[] apply(byte[] p) {
      byte[] h = header();
      int pos = p.length == 0 ? 0 : Math.floorMod(at, p.length + 1);
      byte[] q;
      if (insert) {
        q = new byte[p.length + h.length];
        System.arraycopy(p, 0, q, 0, pos);
        System.arraycopy(h, 0, q, pos, h.length);
        System.arraycopy(p, pos, q, pos + h.length, p.length - pos);
      } else {
        q = Arrays.copyOf(p, Math.max(p.length, pos + h.length));
        System.arraycopy(h, 0, q, pos, h.length);
      }
      return q;
    }

    private byte[] header() {
      int width = switch (format) {
        case 0xc4, 0xc7, 0xd9 -> 1;
        case 0xc5, 0xc8, 0xda, 0xdc, 0xde -> 2;
        default -> 4; // 0xc6, 0xc9, 0xdb, 0xdd, 0xdf
      };
      boolean ext = format == 0xc7 || format == 0xc8 || format == 0xc9;
      byte[] h = new byte[1 + width + (ext ? 1 : 0)];
      h[0] = (byte) format;
      for (int i = 0; i < width; i++) {
        h[1 + i] = (byte) (length >>> (8 * (width - 1 - i)));
      }
      return h;
    }
  }

  @Provide
  Arbitrary<byte[]> mutatedEncodings() {
    Arbitrary<byte[]> valid = Combinators.combine(Arbitraries.longs(),
            Arbitraries.of(VllmEventEncoder.Shape.class), Arbitraries.of(true, false))
        .as((seed, shape, binary) -> new VllmEventEncoder(shape, binary, seed, seed % 3 == 0)
            .encode(KvEventDecoderTest.randomBatch(new Random(seed))));
    Arbitrary<Integer> at = Arbitraries.integers().greaterOrEqual(0);
    Arbitrary<Integer> lengths = Arbitraries.oneOf(
        Arbitraries.of(Integer.MAX_VALUE, -1, 0x0400_0000, 0xffff, 0xff, 1 << 20),
        Arbitraries.integers());
    Arbitrary<Mutation> mutation = Arbitraries.oneOf(
        Combinators.combine(at, Arbitraries.bytes()).as(Overwrite::new),
        at.map(Truncate::new),
        Combinators.combine(at, Arbitraries.integers().between(1, 16)).as(Delete::new),
        Combinators.combine(at,
            Arbitraries.of(0xc4, 0xc5, 0xc6, 0xc7, 0xc8, 0xc9, 0xd9, 0xda, 0xdb, 0xdc, 0xdd,
                0xde, 0xdf),
            lengths, Arbitraries.of(true, false)).as(LengthHeader::new));
    return Combinators.combine(valid, mutation.list().ofMinSize(1).ofMaxSize(4))
        .as((p, ms) -> {
          byte[] q = p;
          for (Mutation m : ms) {
            q = m.apply(q);
          }
          return q;
        });
  }

  /** The mutations exercise both outcomes: some encodings survive them, most do not. */
  @Example
  void mutationsReachBothOutcomes() {
    int decoded = 0;
    int malformed = 0;
    List<byte[]> samples = mutatedEncodings().sampleStream().limit(2000).toList();
    for (byte[] p : samples) {
      try {
        KvEventDecoder.decode(p);
        decoded++;
      } catch (MalformedKvEventException e) {
        malformed++;
      }
    }
    assertThat(decoded).isPositive();
    assertThat(malformed).isGreaterThan(decoded);
  }
}
