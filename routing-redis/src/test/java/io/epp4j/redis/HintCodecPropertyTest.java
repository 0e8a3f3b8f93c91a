package io.epp4j.redis;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.io.ByteArrayOutputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.constraints.IntRange;
import net.jqwik.api.constraints.LongRange;
import net.jqwik.api.constraints.Size;
import net.jqwik.api.constraints.StringLength;

/** The batch format: what is written reads back exactly; anything else is rejected whole. */
class HintCodecPropertyTest {

  /** Every record of a batch, as text, in order. */
  static List<String> read(byte[] batch) throws HintCodec.MalformedBatchException {
    HintCodec.Input in = HintCodec.input(batch);
    HintCodec.Header h = HintCodec.header(in);
    List<String> seen = new ArrayList<>();
    seen.add(h.pool() + "|" + h.origin() + "|" + h.sentEpochMicros());
    HintCodec.records(in, h, new HintCodec.Visitor() {
      @Override
      public void prefix(long at, String ep, int bs, long[] hashes) {
        seen.add("p|" + at + "|" + ep + "|" + bs + "|" + Arrays.toString(hashes));
      }

      @Override
      public void session(long at, String key, String ep) {
        seen.add("s|" + at + "|" + key + "|" + ep);
      }

      @Override
      public void inFlight(String ep, int r, long t) {
        seen.add("f|" + ep + "|" + r + "|" + t);
      }
    });
    return seen;
  }

  @Property(tries = 500)
  void batchesRoundTripExactly(@ForAll @StringLength(max = 40) String pool,
      @ForAll @StringLength(max = 40) String origin,
      @ForAll @LongRange(max = HintCodec.MAX_EPOCH_MICROS) long sent,
      @ForAll @Size(max = 20) List<@Size(max = 40) long[]> prefixes,
      @ForAll @Size(max = 20) List<@StringLength(max = 60) String> sessions,
      @ForAll @IntRange(min = 1, max = 1 << 20) int blockSize,
      @ForAll @LongRange(max = HintCodec.MAX_EPOCH_MICROS) long at,
      @ForAll @IntRange(max = 1000) int requests, @ForAll long tokens) throws Exception {
    HintCodec.Writer w = new HintCodec.Writer();
    List<String> expected = new ArrayList<>();
    expected.add(pool + "|" + origin + "|" + sent);
    for (int i = 0; i < Math.max(prefixes.size(), sessions.size()); i++) {
      String ep = "10.0.0." + i + ":8000";
      if (i < prefixes.size()) {
        w.prefix(at, ep, blockSize, prefixes.get(i));
        expected.add("p|" + at + "|" + ep + "|" + blockSize + "|"
            + Arrays.toString(prefixes.get(i)));
      }
      if (i < sessions.size()) {
        w.session(at, sessions.get(i), ep);
        expected.add("s|" + at + "|" + sessions.get(i) + "|" + ep);
      }
      w.inFlight(ep, requests, tokens);
      expected.add("f|" + ep + "|" + requests + "|" + tokens);
    }
    byte[] batch = w.finish(pool, origin, sent);
    assertThat(read(batch)).containsExactlyElementsOf(expected);
    // the writer is reused for the next batch: nothing of this one leaks into it
    w.reset();
    w.inFlight("e", 1, 2);
    assertThat(read(w.finish("p", "o", 3))).containsExactly("p|o|3", "f|e|1|2");
  }

  @Property(tries = 1000)
  void aTruncatedBatchIsRejectedWhole(@ForAll @Size(min = 1, max = 30) long[] hashes,
      @ForAll @StringLength(max = 30) String session, @ForAll @IntRange(min = 1) int cutFrom)
      throws Exception {
    HintCodec.Writer w = new HintCodec.Writer();
    w.prefix(1, "e1", 16, hashes);
    w.session(2, session, "e2");
    byte[] full = w.finish("pool", "origin", 3);
    byte[] cut = Arrays.copyOf(full, cutFrom % full.length);
    assertThatThrownBy(() -> read(cut)).isInstanceOf(HintCodec.MalformedBatchException.class);
  }

  /**
   * A send or capture time no router's clock reads (before 1970, after the year 9999: a foreign
   * or corrupt entry's) rejects the batch whole, as any other impossible field does.
   */
  @Property(tries = 1000)
  void aTimeNoClockReadsIsRejectedWhole(@ForAll long time, @ForAll @IntRange(max = 2) int where)
      throws Exception {
    net.jqwik.api.Assume.that(time < 0 || time > HintCodec.MAX_EPOCH_MICROS);
    long now = RedisReplication.epochMicros();
    HintCodec.Writer w = new HintCodec.Writer();
    w.prefix(where == 1 ? time : now, "e1", 16, new long[] {1, 2});
    w.session(where == 2 ? time : now, "s", "e2");
    byte[] batch = w.finish("pool", "origin", where == 0 ? time : now);
    assertThatThrownBy(() -> read(batch)).isInstanceOf(HintCodec.MalformedBatchException.class)
        .hasMessageContaining(where == 0 ? "send time" : "capture time");
  }

  @Property(tries = 2000)
  void arbitraryBytesAreRejectedOrReadNeverThrowingAnythingElse(
      @ForAll @Size(max = 300) byte[] bytes) {
    try {
      read(bytes);
    } catch (HintCodec.MalformedBatchException expected) {
      // the only way a foreign entry may fail
    }
  }

  /**
   * The bytes are exactly the documented layout as {@link DataOutputStream} writes it, so that
   * routers of different builds in one pool keep reading each other's batches whatever the
   * writer does to be fast.
   */
  @Property(tries = 500)
  void bytesAreTheDocumentedLayoutAsDataOutputWritesIt(
      @ForAll @StringLength(max = 40) String pool, @ForAll @StringLength(max = 40) String origin,
      @ForAll long sent, @ForAll @Size(max = 12) List<@Size(max = 40) long[]> prefixes,
      @ForAll @Size(max = 12) List<@StringLength(max = 30) String> endpoints,
      @ForAll @StringLength(max = 60) String session,
      @ForAll @IntRange(min = 1, max = Integer.MAX_VALUE) int blockSize, @ForAll long at,
      @ForAll int requests, @ForAll long tokens) throws IOException {
    HintCodec.Writer w = new HintCodec.Writer();
    w.inFlight("warm-up", 1, 1); // a reused writer: the previous batch must leave no trace
    w.finish("x", "y", 0);
    w.reset();
    ByteArrayOutputStream body = new ByteArrayOutputStream();
    DataOutputStream d = new DataOutputStream(body);
    for (int i = 0; i < Math.max(prefixes.size(), endpoints.size()); i++) {
      String ep = i < endpoints.size() ? endpoints.get(i) : "ep-" + i;
      long[] hashes = i < prefixes.size() ? prefixes.get(i) : new long[] {i};
      w.prefix(at + i, ep, blockSize, hashes);
      d.writeByte(HintCodec.PREFIX);
      d.writeLong(at + i);
      d.writeUTF(ep);
      d.writeInt(blockSize);
      d.writeInt(hashes.length);
      for (long h : hashes) {
        d.writeLong(h);
      }
      w.session(at - i, session, ep);
      d.writeByte(HintCodec.SESSION);
      d.writeLong(at - i);
      d.writeUTF(session);
      d.writeUTF(ep);
      w.inFlight(ep, requests + i, tokens - i);
      d.writeByte(HintCodec.IN_FLIGHT);
      d.writeUTF(ep);
      d.writeInt(requests + i);
      d.writeLong(tokens - i);
    }
    ByteArrayOutputStream all = new ByteArrayOutputStream();
    DataOutputStream h = new DataOutputStream(all);
    h.writeByte(HintCodec.VERSION);
    h.writeUTF(pool);
    h.writeUTF(origin);
    h.writeLong(sent);
    h.writeInt(w.records());
    body.writeTo(all);
    assertThat(w.finish(pool, origin, sent)).isEqualTo(all.toByteArray());
  }
}
