package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;

import java.nio.ByteBuffer;
import java.nio.charset.CharsetDecoder;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.Test;

class Utf8ValidatorTest {
  static final CharsetDecoder JDK = StandardCharsets.UTF_8.newDecoder()
      .onMalformedInput(CodingErrorAction.REPORT).onUnmappableCharacter(CodingErrorAction.REPORT);

  static final java.nio.CharBuffer OUT = java.nio.CharBuffer.allocate(16);

  /** The JDK's verdict, through the result-returning call: exceptions would dominate the run. */
  static boolean jdkAccepts(byte[] b) {
    JDK.reset();
    OUT.clear();
    ByteBuffer in = ByteBuffer.wrap(b);
    return !JDK.decode(in, OUT, true).isError() && !JDK.flush(OUT).isError() && !in.hasRemaining();
  }

  /**
   * Every first and second byte, with third and fourth bytes at the edges of the continuation
   * range and outside it, at every alignment to the eight-byte ASCII step: the validator accepts
   * exactly what the JDK's strict decoder accepts, and names a problem wherever it stops.
   */
  @Test
  void agreesWithTheJdkDecoderOnEverySequenceShape() {
    byte[] tails = {0x00, 0x41, 0x7F, (byte) 0x80, (byte) 0x8F, (byte) 0x90, (byte) 0xBF, (byte) 0xC0, (byte) 0xFF};
    int checked = 0;
    java.util.List<String> disagreements = new java.util.ArrayList<>();
    for (int lead = 0; lead < 256; lead++) {
      for (int second = 0; second < 256; second++) {
        for (byte third : tails) {
          for (byte fourth : tails) {
            int pad = (lead + second) & 7;
            byte[] b = new byte[pad + 4];
            java.util.Arrays.fill(b, 0, pad, (byte) 'a');
            b[pad] = (byte) lead;
            b[pad + 1] = (byte) second;
            b[pad + 2] = third;
            b[pad + 3] = fourth;
            check(b, disagreements);
            if (fourth == tails[0]) {
              // the same bytes cut short: sequences truncated by the end of the input
              check(java.util.Arrays.copyOf(b, pad + 3), disagreements);
              if (third == tails[0]) {
                check(java.util.Arrays.copyOf(b, pad + 2), disagreements);
                check(java.util.Arrays.copyOf(b, pad + 1), disagreements);
              }
            }
            checked++;
          }
        }
      }
    }
    assertThat(disagreements).isEmpty();
    assertThat(checked).isEqualTo(256 * 256 * tails.length * tails.length);
  }

  static void check(byte[] b, java.util.List<String> disagreements) {
    int bad = Utf8Validator.firstInvalid(b);
    if ((bad < 0) != jdkAccepts(b) || bad >= 0 && Utf8Validator.problem(b, bad) == null) {
      disagreements.add(java.util.HexFormat.ofDelimiter(" ").formatHex(b));
    }
  }

  @Test
  void positionsCountLinesAndByteColumnsFromOne() {
    byte[] b = "ab\ncd\u00e9f".getBytes(StandardCharsets.UTF_8);
    assertThat(Utf8Validator.position(b, 0)).isEqualTo("line 1, column 1 (byte offset 0)");
    assertThat(Utf8Validator.position(b, 3)).isEqualTo("line 2, column 1 (byte offset 3)");
    assertThat(Utf8Validator.position(b, 7)).isEqualTo("line 2, column 5 (byte offset 7)");
  }
}
