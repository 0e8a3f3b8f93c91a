package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import java.lang.management.ManagementFactory;
import org.junit.jupiter.api.Test;

/**
 * The stand-in tokenizer of {@code serve}: what it gives, and that a long text (a body may hold
 * 64 MiB of it, some 32 million one-letter words) costs its token IDs and little more: a boxed
 * {@code Integer} per token took about 30 bytes each, close to a gigabyte for such a body, enough
 * to run a default heap out of memory and stop the emulated engine with it.
 */
class StandInTokenizerTest {
  @Test
  void equalLeadingWordsGiveEqualLeadingTokens() {
    int[] a = EmulatedServer.tokenize("  the cat\tsat\n");
    int[] b = EmulatedServer.tokenize("the cat sat on the mat");
    assertThat(a).hasSize(3);
    assertThat(b).hasSize(6).startsWith(a);
    assertThat(b[4]).isEqualTo(b[0]);
    assertThat(EmulatedServer.tokenize(" \n ")).isEmpty();
    for (int id : b) {
      assertThat(id).isBetween(0, SyntheticTokens.VOCAB - 1);
    }
  }

  @Test
  void aLongTextCostsLittleMoreThanItsTokenIds() {
    int words = 2_000_000;
    StringBuilder text = new StringBuilder(words * 2);
    for (int i = 0; i < words; i++) {
      text.append((char) ('a' + i % 26)).append(' ');
    }
    String s = text.toString();
    EmulatedServer.tokenize("warm up");
    com.sun.management.ThreadMXBean threads =
        (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();
    long before = threads.getCurrentThreadAllocatedBytes();
    int[] ids = EmulatedServer.tokenize(s);
    long allocated = threads.getCurrentThreadAllocatedBytes() - before;
    assertThat(ids).hasSize(words);
    // the result is 4 bytes a token; allow twice that for whatever else the scan needs
    assertThat((double) allocated / words).as("bytes allocated per token").isLessThan(8);
  }
}
