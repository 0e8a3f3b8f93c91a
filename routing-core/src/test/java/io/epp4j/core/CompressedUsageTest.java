package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Usage;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Random;
import java.util.zip.Deflater;
import java.util.zip.DeflaterOutputStream;
import java.util.zip.GZIPOutputStream;
import org.junit.jupiter.api.Test;

/** Usage read from answers a server compressed ({@code content-encoding} gzip or deflate). */
class CompressedUsageTest {
  static final String STREAM = UsageScannerTest.STREAM;
  static final Usage EXPECTED = new Usage(30, 16, 2);
  static final String JSON_BODY = "{\"id\":\"c\",\"choices\":[{\"message\":{\"content\":\"Hi\"}}],"
      + "\"usage\":{\"prompt_tokens\":30,\"completion_tokens\":2,\"total_tokens\":32,"
      + "\"prompt_tokens_details\":{\"cached_tokens\":16}}}";

  static byte[] gzip(String s) throws IOException {
    ByteArrayOutputStream b = new ByteArrayOutputStream();
    try (GZIPOutputStream z = new GZIPOutputStream(b)) {
      z.write(s.getBytes(StandardCharsets.UTF_8));
    }
    return b.toByteArray();
  }

  static byte[] deflate(String s, boolean zlibWrapper) throws IOException {
    ByteArrayOutputStream b = new ByteArrayOutputStream();
    Deflater d = new Deflater(Deflater.DEFAULT_COMPRESSION, !zlibWrapper);
    try (DeflaterOutputStream z = new DeflaterOutputStream(b, d)) {
      z.write(s.getBytes(StandardCharsets.UTF_8));
    }
    d.end();
    return b.toByteArray();
  }

  static byte[] concat(byte[] a, byte[] b) {
    byte[] r = new byte[a.length + b.length];
    System.arraycopy(a, 0, r, 0, a.length);
    System.arraycopy(b, 0, r, a.length, b.length);
    return r;
  }

  /** Feeds {@code bytes} in chunks cut at random, each buffer's position not at 0. */
  static UsageScanner feedInRandomChunks(UsageScanner s, byte[] bytes, Random rnd, int maxChunk) {
    int p = 0;
    while (p < bytes.length) {
      int n = Math.min(bytes.length - p, 1 + rnd.nextInt(maxChunk));
      byte[] c = new byte[n + 3];
      System.arraycopy(bytes, p, c, 3, n);
      s.feed(ByteBuffer.wrap(c).position(3));
      p += n;
    }
    return s;
  }

  @Test
  void aGzipStreamGivesItsUsageWhereverTheChunksAreCut() throws IOException {
    byte[] z = gzip(STREAM);
    for (int cut = 0; cut <= z.length; cut++) {
      UsageScanner s = new UsageScanner("text/event-stream", "gzip");
      s.feed(ByteBuffer.wrap(z, 0, cut));
      s.feed(ByteBuffer.wrap(z, cut, z.length - cut));
      assertThat(s.sawDone()).as("cut at %d", cut).isTrue();
      assertThat(s.finish()).as("cut at %d", cut).isEqualTo(EXPECTED);
    }
    Random rnd = new Random(7);
    for (int i = 0; i < 200; i++) {
      UsageScanner s = feedInRandomChunks(new UsageScanner("text/event-stream", "GZIP"), z, rnd, 9);
      assertThat(s.finish()).isEqualTo(EXPECTED);
    }
  }

  @Test
  void aCompressedJsonBodyGivesItsUsage() throws IOException {
    Random rnd = new Random(11);
    for (String encoding : new String[] {"gzip", "x-gzip", " Gzip "}) {
      UsageScanner s = feedInRandomChunks(
          new UsageScanner("application/json", encoding), gzip(JSON_BODY), rnd, 5);
      assertThat(s.finish()).as(encoding).isEqualTo(EXPECTED);
    }
  }

  @Test
  void deflateIsReadInTheZlibFormatAndRaw() throws IOException {
    Random rnd = new Random(3);
    for (boolean zlib : new boolean[] {true, false}) {
      byte[] z = deflate(STREAM, zlib);
      for (int i = 0; i < 50; i++) {
        // chunks of one byte included: a first chunk of one byte cannot tell zlib from raw
        UsageScanner s = feedInRandomChunks(
            new UsageScanner("text/event-stream", "deflate"), z, rnd, i % 2 == 0 ? 1 : 6);
        assertThat(s.finish()).as("zlib %s", zlib).isEqualTo(EXPECTED);
      }
    }
  }

  @Test
  void gzipMembersOneAfterAnotherAreOneAnswer() throws IOException {
    int half = STREAM.indexOf("data: {\"id\":\"c\",\"choices\":[],");
    byte[] z = concat(gzip(STREAM.substring(0, half)), gzip(STREAM.substring(half)));
    Random rnd = new Random(5);
    for (int i = 0; i < 100; i++) {
      UsageScanner s = feedInRandomChunks(new UsageScanner("text/event-stream", "gzip"), z, rnd,
          1 + i % 13);
      assertThat(s.sawDone()).isTrue();
      assertThat(s.finish()).isEqualTo(EXPECTED);
    }
  }

  @Test
  void aGzipHeaderWithItsOptionalFieldsIsSkipped() throws IOException {
    byte[] plain = gzip(STREAM);
    // the same member with FEXTRA (3 bytes), FNAME, FCOMMENT and FHCRC (the CRC is not checked)
    ByteArrayOutputStream b = new ByteArrayOutputStream();
    b.write(plain, 0, 3);
    b.write(4 | 8 | 16 | 2);
    b.write(plain, 4, 6);
    b.write(new byte[] {3, 0, 'a', 'b', 'c'});
    b.write("answer.json\0".getBytes(StandardCharsets.ISO_8859_1));
    b.write("a comment\0".getBytes(StandardCharsets.ISO_8859_1));
    b.write(new byte[] {0x12, 0x34});
    b.write(plain, 10, plain.length - 10);
    Random rnd = new Random(9);
    for (int i = 0; i < 100; i++) {
      UsageScanner s = feedInRandomChunks(new UsageScanner("text/event-stream", "gzip"),
          b.toByteArray(), rnd, 1 + i % 7);
      assertThat(s.finish()).isEqualTo(EXPECTED);
    }
  }

  @Test
  void anEncodingItCannotUndoIsNotReadAtAll() {
    for (String encoding : new String[] {"br", "zstd", "gzip, br", "compress"}) {
      // the answer as it would be if the server had not compressed it: still not read, since
      // the header says it is something else
      UsageScanner s = new UsageScanner("text/event-stream", encoding);
      s.feed(UsageScannerTest.utf8(STREAM));
      assertThat(s.sawDone()).as(encoding).isFalse();
      assertThat(s.finish()).as(encoding).isEqualTo(Usage.NONE);
    }
  }

  @Test
  void identityOrNoEncodingIsReadAsBefore() {
    for (String encoding : new String[] {null, "identity", ""}) {
      UsageScanner s = new UsageScanner("text/event-stream", encoding);
      s.feed(UsageScannerTest.utf8(STREAM));
      assertThat(s.finish()).as("%s", encoding).isEqualTo(EXPECTED);
    }
  }

  @Test
  void corruptDataEndsTheScanWithoutAnErrorAndKeepsWhatWasReadBefore() throws IOException {
    byte[] z = gzip(STREAM);
    byte[] bad = z.clone();
    for (int i = 10; i < bad.length - 8; i++) {
      bad[i] = (byte) 0xFF; // the deflate data, header and trailer left as they were
    }
    UsageScanner s = new UsageScanner("text/event-stream", "gzip");
    s.feed(ByteBuffer.wrap(bad));
    assertThat(s.finish()).isEqualTo(Usage.NONE);

    // not gzip at all
    UsageScanner t = new UsageScanner("text/event-stream", "gzip");
    t.feed(UsageScannerTest.utf8(STREAM));
    assertThat(t.finish()).isEqualTo(Usage.NONE);

    // a whole first member with the usage, then garbage: the usage read stands
    UsageScanner u = new UsageScanner("text/event-stream", "gzip");
    u.feed(ByteBuffer.wrap(concat(z, new byte[] {0x1F, (byte) 0x8B, 9, 0, 0, 0, 0, 0, 0, 0})));
    assertThat(u.finish()).isEqualTo(EXPECTED);
  }

  @Test
  void aStreamThatExpandsFarMoreThanTextStopsBeingDecoded() throws IOException {
    // 64 MiB of one repeated byte compresses about 1000 times; then the usage chunk
    StringBuilder filler = new StringBuilder(": ");
    filler.append("x".repeat(1 << 20)).append('\n');
    ByteArrayOutputStream b = new ByteArrayOutputStream();
    try (GZIPOutputStream z = new GZIPOutputStream(b)) {
      byte[] chunk = filler.toString().getBytes(StandardCharsets.US_ASCII);
      for (int i = 0; i < 64; i++) {
        z.write(chunk);
      }
      z.write(STREAM.getBytes(StandardCharsets.UTF_8));
    }
    byte[] bomb = b.toByteArray();
    assertThat(bomb.length).isLessThan(1 << 20); // far more than 100 times smaller

    int[] decodedCalls = {0};
    long[] decodedBytes = {0};
    ContentDecoder d = ContentDecoder.of(ContentDecoder.Encoding.GZIP, buf -> {
      decodedCalls[0]++;
      decodedBytes[0] += buf.remaining();
    });
    d.feed(ByteBuffer.wrap(bomb));
    assertThat(d.failed()).isTrue();
    assertThat(decodedBytes[0])
        .isLessThanOrEqualTo(ContentDecoder.FREE_BYTES + ContentDecoder.MAX_RATIO * bomb.length);

    UsageScanner s = new UsageScanner("text/event-stream", "gzip");
    s.feed(ByteBuffer.wrap(bomb));
    assertThat(s.finish()).isEqualTo(Usage.NONE);

    // the same text (SSE comments and the stream) compressed as ordinary text does pass
    Random rnd = new Random(1);
    StringBuilder text = new StringBuilder();
    while (text.length() < 2 << 20) {
      text.append(": ");
      for (int i = 0; i < 60; i++) {
        text.append((char) ('a' + rnd.nextInt(26)));
      }
      text.append('\n');
    }
    text.append(STREAM);
    UsageScanner ok = new UsageScanner("text/event-stream", "gzip");
    ok.feed(ByteBuffer.wrap(gzip(text.toString())));
    assertThat(ok.finish()).isEqualTo(EXPECTED);
  }

  @Test
  void directBuffersAreReadAsHeapOnesAre() throws IOException {
    // Netty hands gateways direct buffers; each is released once fed, so the decoder keeps none
    byte[] z = gzip(STREAM);
    for (int cut = 1; cut < z.length; cut += 5) {
      UsageScanner s = new UsageScanner("text/event-stream", "gzip");
      for (int[] part : new int[][] {{0, cut}, {cut, z.length}}) {
        ByteBuffer direct = ByteBuffer.allocateDirect(part[1] - part[0]);
        direct.put(z, part[0], part[1] - part[0]).flip();
        s.feed(direct);
        direct.clear();
        while (direct.hasRemaining()) {
          direct.put((byte) 0x55); // the buffer reused for something else
        }
      }
      assertThat(s.finish()).as("cut at %d", cut).isEqualTo(EXPECTED);
    }
  }

  @Test
  void theChunkHandedInIsLeftAsItWas() throws IOException {
    byte[] z = gzip(STREAM);
    ByteBuffer chunk = ByteBuffer.wrap(z);
    UsageScanner s = new UsageScanner("text/event-stream", "gzip");
    s.feed(chunk);
    assertThat(chunk.position()).isZero();
    assertThat(chunk.limit()).isEqualTo(z.length);
    assertThat(s.finish()).isEqualTo(EXPECTED);
  }
}
