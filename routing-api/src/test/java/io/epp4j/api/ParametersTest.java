package io.epp4j.api;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;

/** The typed getters: defaults for absent parameters, one error naming a bad one. */
class ParametersTest {

  /**
   * A default is what the provider chose, not a value the user gave: an absent parameter gives
   * it without an error even when it lies outside the range (e.g. -1 for "not set").
   */
  @Test
  void anAbsentParameterGivesItsDefaultWithoutAnErrorWhateverTheRange() {
    Parameters p = Parameters.empty();
    assertThat(p.getInt("port", -1, 1, 65535)).isEqualTo(-1);
    assertThat(p.getDouble("threshold", -1.0, 0.0, 1.0)).isEqualTo(-1.0);
    assertThat(p.getEnum("mode", "auto", Set.of("fast", "slow"))).isEqualTo("auto");
    assertThat(p.errors()).isEmpty();
  }

  /** A value of the wrong type is one error, not a second one about the default. */
  @Test
  void aValueOfTheWrongTypeIsOneErrorNamingTheParameter() {
    Parameters p = Parameters.of(Map.of("port", "eighty", "threshold", List.of(1),
        "mode", Map.of("x", 1)));
    assertThat(p.getInt("port", -1, 1, 65535)).isEqualTo(-1);
    assertThat(p.getDouble("threshold", -1.0, 0.0, 1.0)).isEqualTo(-1.0);
    assertThat(p.getEnum("mode", "auto", Set.of("fast", "slow"))).isEqualTo("auto");
    assertThat(p.errors()).hasSize(3).allSatisfy(e -> assertThat(e).startsWith("parameter '"));
    assertThat(p.errors().get(0)).startsWith("parameter 'port'");
    assertThat(p.errors().get(1)).startsWith("parameter 'threshold'");
    assertThat(p.errors().get(2)).startsWith("parameter 'mode'");
  }

  @Test
  void aGivenValueOutOfRangeIsAnErrorAndGivesTheDefault() {
    Parameters p = Parameters.of(Map.of("port", 70000, "threshold", Double.NaN, "mode", "medium",
        "big", 3_000_000_000L));
    assertThat(p.getInt("port", 8000, 1, 65535)).isEqualTo(8000);
    assertThat(p.getDouble("threshold", 0.5, 0.0, 1.0)).isEqualTo(0.5);
    assertThat(p.getEnum("mode", "fast", Set.of("fast", "slow"))).isEqualTo("fast");
    assertThat(p.getInt("big", 7, 0, 10)).isEqualTo(7);
    assertThat(p.errors()).containsExactly(
        "parameter 'port' must be in [1, 65535], got 70000",
        "parameter 'threshold' must be in [0.0, 1.0], got NaN",
        "parameter 'mode' must be one of [fast, slow], got 'medium'",
        "parameter 'big' must fit in a 32-bit integer, got 3000000000");
  }

  /**
   * A number given as text is a decimal number, as YAML or JSON would write it; Java's literal
   * spellings are not ({@code 5d} is five days to a reader, not 5.0), nor is NaN.
   */
  @Test
  void aNumberAsTextIsDecimalOrAnErrorNamingTheParameter() {
    for (String ok : List.of("0.5", " 2 ", "-3", "+4", "1e3", "2.5E-1", ".5", "6.")) {
      Parameters p = Parameters.of(Map.of("w", ok));
      assertThat(p.getDouble("w", -9)).as(ok).isEqualTo(Double.parseDouble(ok.trim()));
      assertThat(p.errors()).as(ok).isEmpty();
    }
    for (String bad : List.of("5d", "0.5f", "0x1p3", "NaN", "Infinity", "-Infinity", "1_000",
        "", "e3")) {
      Parameters p = Parameters.of(Map.of("w", bad));
      assertThat(p.getDouble("w", 7.0)).as(bad).isEqualTo(7.0);
      assertThat(p.errors()).as(bad).singleElement()
          .isEqualTo("parameter 'w' must be a number, got '" + bad + "'");
    }
  }
}
