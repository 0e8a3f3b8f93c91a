package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;

import com.dynatrace.hash4j.hashing.Hasher64;
import com.dynatrace.hash4j.hashing.Hashing;
import io.epp4j.api.ChatMessage;
import io.epp4j.api.InferenceRequest;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;

/** The block hashes follow the scheme documented in docs/plugins.md, whatever the chunking. */
class BlockHasherTest {
  private static final Hasher64 XXH3 = Hashing.xxh3_64();

  /** MurmurHash3's 64-bit finaliser. */
  static long fmix64(long k) {
    k ^= k >>> 33;
    k *= 0xFF51AFD7ED558CCDL;
    k ^= k >>> 33;
    k *= 0xC4CEB9FE1A85EC53L;
    k ^= k >>> 33;
    return k;
  }

  /** The documented scheme, written the slow and obvious way. */
  static long[] reference(long seed, String text, int blockSizeTokens, int maxBlocks) {
    int bc = 4 * blockSizeTokens;
    int n = Math.min(maxBlocks, text.length() / bc);
    long[] out = new long[n];
    long h = seed;
    for (int i = 0; i < n; i++) {
      String block = text.substring(i * bc, (i + 1) * bc);
      boolean latin1 = block.chars().allMatch(c -> c <= 0xFF);
      ByteBuffer b = ByteBuffer.allocate(latin1 ? bc : 2 * bc).order(ByteOrder.LITTLE_ENDIAN);
      for (int j = 0; j < bc; j++) {
        if (latin1) {
          b.put((byte) block.charAt(j));
        } else {
          b.putChar(block.charAt(j));
        }
      }
      h = fmix64(h * 0x9E3779B97F4A7C15L + XXH3.hashBytesToLong(b.array()));
      out[i] = h;
    }
    return out;
  }

  static long[] reference(long seed, int[] tokens, int blockSizeTokens) {
    int n = tokens.length / blockSizeTokens;
    long[] out = new long[n];
    long h = seed;
    for (int i = 0; i < n; i++) {
      ByteBuffer b = ByteBuffer.allocate(4 * blockSizeTokens).order(ByteOrder.LITTLE_ENDIAN);
      for (int j = 0; j < blockSizeTokens; j++) {
        b.putInt(tokens[i * blockSizeTokens + j]);
      }
      h = fmix64(h * 0x9E3779B97F4A7C15L + XXH3.hashBytesToLong(b.array()));
      out[i] = h;
    }
    return out;
  }

  /** Mostly ASCII with some Latin-1, other BMP characters, surrogate pairs and lone surrogates. */
  static String text(SplittableRandom rnd, int length) {
    StringBuilder sb = new StringBuilder(length);
    while (sb.length() < length) {
      int kind = rnd.nextInt(1000);
      if (kind < 990) {
        sb.append((char) (' ' + rnd.nextInt(95)));
      } else if (kind < 994) {
        sb.append((char) (0x80 + rnd.nextInt(0x80)));
      } else if (kind < 997) {
        sb.append((char) (0x100 + rnd.nextInt(0xD000)));
      } else if (kind < 999) {
        sb.appendCodePoint(0x1F600 + rnd.nextInt(64));
      } else {
        sb.append((char) (0xD800 + rnd.nextInt(0x800)));
      }
    }
    return sb.toString();
  }

  @Test
  void textHashesFollowTheDocumentedSchemeAcrossChunks() {
    // 3, 5, 8, 16 and 32 put narrow (4 × size bytes) or UTF-16 (8 × size) blocks in ShortXxh3's
    // 17–128-byte range, the others outside it
    assertCompletionsFollowTheReference(new SplittableRandom(1), new int[] {1, 3, 5, 8, 16, 32, 100, 2000},
        (rnd, round) -> text(rnd, rnd.nextInt(20_000)));
  }

  /** 30 completion prompts per block size, each hashed as the reference hashes it. */
  private static void assertCompletionsFollowTheReference(SplittableRandom rnd, int[] blockSizes,
      java.util.function.BiFunction<SplittableRandom, Integer, String> promptOf) {
    for (int blockSize : blockSizes) {
      BlockHasher hasher = new BlockHasher(blockSize, 8192);
      for (int r = 0; r < 30; r++) {
        String prompt = promptOf.apply(rnd, r);
        InferenceRequest req = InferenceRequest.completion("m", prompt);
        assertThat(hasher.hash(req)).as("block size %d, round %d", blockSize, r)
            .containsExactly(reference(BlockHasher.namespace(req), prompt, blockSize, 8192));
      }
    }
  }

  @Test
  void chatHashesTheCanonicalText() {
    SplittableRandom rnd = new SplittableRandom(2);
    BlockHasher hasher = new BlockHasher(16, 8192);
    for (int r = 0; r < 20; r++) {
      List<ChatMessage> messages = new ArrayList<>();
      StringBuilder canonical = new StringBuilder();
      String tools = r % 2 == 0 ? "[{\"type\":\"function\"}]" : null;
      if (tools != null) {
        canonical.append("tools\u001f").append(tools).append('\u001e');
      }
      for (int m = 0, count = 1 + rnd.nextInt(6); m < count; m++) {
        ChatMessage msg = new ChatMessage(m % 2 == 0 ? "user" : "assistant", text(rnd, rnd.nextInt(3000)));
        messages.add(msg);
        canonical.append(msg.role()).append('\u001f').append(msg.content()).append('\u001e');
      }
      InferenceRequest req = InferenceRequest.builder().model("m").messages(messages)
          .toolsJson(tools).build();
      assertThat(hasher.hash(req))
          .containsExactly(reference(BlockHasher.namespace(req), canonical.toString(), 16, 8192));
    }
  }

  @Test
  void aMessagesToolCallsCountTowardsTheChatsIdentity() {
    // a message's tool calls (kept apart from its content, for the template) follow its
    // content after a unit separator; a message without them hashes as before
    SplittableRandom rnd = new SplittableRandom(3);
    BlockHasher hasher = new BlockHasher(16, 8192);
    for (int r = 0; r < 20; r++) {
      List<ChatMessage> messages = new ArrayList<>();
      StringBuilder canonical = new StringBuilder();
      for (int m = 0, count = 1 + rnd.nextInt(6); m < count; m++) {
        String fields = m % 2 == 1 ? "{\"tool_calls\":[{\"id\":\"" + text(rnd, rnd.nextInt(300))
            + "\"}]}" : "";
        ChatMessage msg = new ChatMessage(m % 2 == 0 ? "user" : "assistant",
            text(rnd, rnd.nextInt(600)), List.of(), fields);
        messages.add(msg);
        canonical.append(msg.role()).append('\u001f').append(msg.content());
        if (!fields.isEmpty()) {
          canonical.append('\u001f').append(fields);
        }
        canonical.append('\u001e');
      }
      InferenceRequest req = InferenceRequest.builder().model("m").messages(messages).build();
      assertThat(hasher.hash(req))
          .containsExactly(reference(BlockHasher.namespace(req), canonical.toString(), 16, 8192));
    }
    // two chats that differ only in an assistant's tool call hash apart
    String calls = "{\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}";
    String text = "x".repeat(200);
    InferenceRequest a = InferenceRequest.builder().model("m").messages(List.of(
        new ChatMessage("assistant", text, List.of(), calls), ChatMessage.user(text))).build();
    InferenceRequest b = InferenceRequest.builder().model("m").messages(List.of(
        new ChatMessage("assistant", text), ChatMessage.user(text))).build();
    assertThat(hasher.hash(a)[3]).isNotEqualTo(hasher.hash(b)[3]);
  }

  /** Only characters up to U+00FF: a string the JDK stores one byte per character. */
  static String latin1Text(SplittableRandom rnd, int length) {
    StringBuilder sb = new StringBuilder(length);
    for (int i = 0; i < length; i++) {
      sb.append(rnd.nextInt(20) == 0 ? (char) (0x80 + rnd.nextInt(0x80)) : (char) (' ' + rnd.nextInt(95)));
    }
    return sb.toString();
  }

  @Test
  void latin1PromptsHashAsTheDocumentedScheme() {
    // a long prompt stored as Latin-1 is copied as bytes, a shorter one or one holding a wider
    // character as characters; both give the documented hashes
    assertCompletionsFollowTheReference(new SplittableRandom(7), new int[] {1, 3, 16, 32, 100, 2000},
        (rnd, round) -> {
          String prompt = latin1Text(rnd, rnd.nextInt(20_000));
          if (round % 5 != 0 || prompt.isEmpty()) {
            return prompt;
          }
          int at = rnd.nextInt(prompt.length());
          return prompt.substring(0, at) + '\u20ac' + prompt.substring(at + 1);
        });
  }

  @Test
  void chatsWithLongLatin1MessagesHashTheCanonicalText() {
    // a chunk wholly inside a long Latin-1 message is copied as bytes, the chunks around it as
    // characters; short, wider and long messages in any order give the documented hashes
    SplittableRandom rnd = new SplittableRandom(9);
    for (int blockSize : new int[] {1, 16, 100, 2000}) {
      BlockHasher hasher = new BlockHasher(blockSize, 1 << 16);
      for (int r = 0; r < 25; r++) {
        List<ChatMessage> messages = new ArrayList<>();
        StringBuilder canonical = new StringBuilder();
        for (int m = 0, count = 1 + rnd.nextInt(6); m < count; m++) {
          int length = rnd.nextBoolean() ? rnd.nextInt(300) : 4096 + rnd.nextInt(12_000);
          String content = rnd.nextInt(4) == 0 ? text(rnd, length) : latin1Text(rnd, length);
          ChatMessage msg = new ChatMessage(rnd.nextInt(5) == 0 ? "r\u00f4le\u0101" : "user", content);
          messages.add(msg);
          canonical.append(msg.role()).append('\u001f').append(msg.content()).append('\u001e');
        }
        String tools = r % 3 == 0 ? "[" + latin1Text(rnd, 5000) + "]" : null;
        if (tools != null) {
          canonical.insert(0, "tools\u001f" + tools + '\u001e');
        }
        InferenceRequest req = InferenceRequest.builder().model("m").messages(messages)
            .toolsJson(tools).build();
        assertThat(hasher.hash(req)).as("block size %d, round %d", blockSize, r)
            .containsExactly(reference(BlockHasher.namespace(req), canonical.toString(), blockSize, 1 << 16));
      }
    }
  }

  @Test
  void latin1StringsAreRecognisedWithoutMistakingWiderOnes() {
    SplittableRandom rnd = new SplittableRandom(8);
    String latin1 = latin1Text(rnd, 5000);
    assertThat(BlockHasher.Latin1.known(latin1)).isTrue();
    assertThat(BlockHasher.Latin1.known(latin1 + '\u0100')).isFalse();
    assertThat(BlockHasher.Latin1.known('\uffff' + latin1)).isFalse();
    // a string that held a wide character and lost it is Latin-1 again
    assertThat(BlockHasher.Latin1.known((latin1 + '\u0100').substring(0, 5000))).isTrue();
    // short strings are not worth the probe
    assertThat(BlockHasher.Latin1.known(latin1.substring(0, BlockHasher.Latin1.PROBE_FROM - 1)))
        .isFalse();
  }

  @Test
  void tokenHashesFollowTheDocumentedScheme() {
    SplittableRandom rnd = new SplittableRandom(3);
    // 4, 5, 32 and 33 tokens: the edges of the blocks hashed from the int[] without a copy
    for (int blockSize : new int[] {1, 4, 5, 8, 9, 16, 17, 24, 25, 32, 33, 300}) {
      BlockHasher hasher = new BlockHasher(blockSize, 8192);
      int[] tokens = rnd.ints(rnd.nextInt(5000), 0, 150_000).toArray();
      InferenceRequest req = InferenceRequest.builder().model("m").tokenIds(tokens).build();
      assertThat(hasher.hash(req))
          .containsExactly(reference(BlockHasher.namespace(req), tokens, blockSize));
    }
  }

  @Test
  void tokenBlocksHashAsXxh3OfTheirLittleEndianBytes() {
    SplittableRandom rnd = new SplittableRandom(4);
    for (int count = 5; count <= 32; count++) {
      for (int r = 0; r < 200; r++) {
        // any int, negative ones too: the sign must not leak into the neighbouring token's bits
        int[] tokens = rnd.ints(count + 7).toArray();
        int from = rnd.nextInt(8);
        ByteBuffer b = ByteBuffer.allocate(4 * count).order(ByteOrder.LITTLE_ENDIAN);
        for (int j = 0; j < count; j++) {
          b.putInt(tokens[from + j]);
        }
        assertThat(ShortXxh3.hash(tokens, from, count)).as("%d tokens", count)
            .isEqualTo(XXH3.hashBytesToLong(b.array()));
      }
    }
    assertThat(ShortXxh3.coversTokens(4)).isFalse();
    assertThat(ShortXxh3.coversTokens(33)).isFalse();
  }

  @Test
  void unsignedMultiplyHighIsTheHighHalfOfTheUnsignedProduct() {
    SplittableRandom rnd = new SplittableRandom(6);
    long[] edges = {0, 1, -1, Long.MIN_VALUE, Long.MAX_VALUE, 0xFFFF_FFFFL, 1L << 32};
    java.math.BigInteger mask = java.math.BigInteger.ONE.shiftLeft(64).subtract(
        java.math.BigInteger.ONE);
    for (int r = 0; r < 20_000; r++) {
      long a = r < edges.length * edges.length ? edges[r / edges.length] : rnd.nextLong();
      long b = r < edges.length * edges.length ? edges[r % edges.length] : rnd.nextLong();
      long expected = new java.math.BigInteger(Long.toUnsignedString(a))
          .multiply(new java.math.BigInteger(Long.toUnsignedString(b)))
          .shiftRight(64).and(mask).longValue();
      assertThat(ShortXxh3.unsignedMultiplyHigh(a, b)).as("%x × %x", a, b).isEqualTo(expected);
      assertThat(ShortXxh3.unsignedMultiplyHighPortable(a, b)).as("%x × %x", a, b)
          .isEqualTo(expected);
    }
  }

  @Test
  void theRuntimesUnsignedMultiplyIsUsedFromJava18On() {
    assertThat(ShortXxh3.usesRuntimeUnsignedMultiplyHigh())
        .isEqualTo(Runtime.version().feature() >= 18
            && !Boolean.getBoolean("epp4j.portableMultiply"));
  }

  @Test
  void byteRangesHashAsXxh3() {
    SplittableRandom rnd = new SplittableRandom(5);
    for (int len = 17; len <= 128; len++) {
      for (int r = 0; r < 50; r++) {
        byte[] bytes = new byte[len + 9];
        rnd.nextBytes(bytes);
        int from = rnd.nextInt(10);
        assertThat(ShortXxh3.hash(bytes, from, len)).as("%d bytes at %d", len, from)
            .isEqualTo(XXH3.hashBytesToLong(bytes, from, len));
      }
    }
    assertThat(ShortXxh3.coversBytes(16)).isFalse();
    assertThat(ShortXxh3.coversBytes(129)).isFalse();
  }

  @Test
  void aCharacterAboveLatin1NeverCollidesWithItsLowByte() {
    BlockHasher hasher = new BlockHasher(16, 8192);
    String base = "a".repeat(64);
    long[] low = hasher.hash(InferenceRequest.completion("m", base + "\u0001" + "b".repeat(63)));
    long[] high = hasher.hash(InferenceRequest.completion("m", base + "\u0101" + "b".repeat(63)));
    assertThat(high[0]).isEqualTo(low[0]);
    assertThat(high[1]).isNotEqualTo(low[1]);
  }

  @Test
  void maxBlocksCapsTextAndTokens() {
    BlockHasher hasher = new BlockHasher(16, 3);
    assertThat(hasher.hash(InferenceRequest.completion("m", "x".repeat(64 * 10)))).hasSize(3);
    assertThat(hasher.hash(InferenceRequest.builder().model("m").tokenIds(new int[16 * 10]).build()))
        .hasSize(3);
  }
}
