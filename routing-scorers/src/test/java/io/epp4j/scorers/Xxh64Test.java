package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;

import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.Test;

/** Published XXH64 test vectors (xxHash reference outputs quoted by many ports). */
class Xxh64Test {
  @Test
  void matchesPublishedVectors() {
    assertThat(Xxh64.hash("", 0)).isEqualTo(0xEF46DB3751D8E999L);
    assertThat(Xxh64.hash("a", 0)).isEqualTo(0xD24EC4F1A98C6E5BL);
    assertThat(Xxh64.hash("abc", 0)).isEqualTo(0x44BC2CF5AD770999L);
    // 39 bytes: exercises the 32-byte stripe loop and the merge rounds
    assertThat(Xxh64.hash("Nobody inspects the spammish repetition", 0))
        .isEqualTo(0xFBCEA83C8A378BF1L);
    assertThat(Xxh64.hash("The quick brown fox jumps over the lazy dog", 0))
        .isEqualTo(0x0B242D361FDA71BCL);
    assertThat(Xxh64.hash("a".repeat(32), 0)).isEqualTo(0x856E843298F99AD7L);
  }

  @Test
  void seedChangesTheHash() {
    assertThat(Xxh64.hash("abc", 12345)).isEqualTo(0x01700E64F6F23509L);
    assertThat(Xxh64.hash("abc", 1)).isNotEqualTo(Xxh64.hash("abc", 0));
  }

  @Test
  void offsetAndLengthSelectTheSameBytes() {
    byte[] b = "xxabcyy".getBytes(StandardCharsets.UTF_8);
    assertThat(Xxh64.hash(b, 2, 3, 0)).isEqualTo(0x44BC2CF5AD770999L);
  }
}
