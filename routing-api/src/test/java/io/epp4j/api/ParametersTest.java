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
        "parameter 'threshold' must be a finite number, got 'NaN'",
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
  /**
   * An integer given as text is ASCII digits after an optional sign, as YAML or JSON writes one:
   * Long.parseLong read Arabic-Indic ({@code ٣}) and full-width ({@code ３}) digits, so a file
   * holding them loaded with a value no reader of it would see. One beyond a long is too large.
   */
  @Test
  void anIntegerAsTextIsAsciiDigitsOrAnErrorNamingTheParameter() {
    for (String ok : List.of("3", " 42 ", "+4", "-5", "007")) {
      Parameters p = Parameters.of(Map.of("n", ok));
      assertThat(p.getLong("n", -9)).as(ok).isEqualTo(Long.parseLong(ok.trim()));
      assertThat(p.errors()).as(ok).isEmpty();
    }
    for (String bad : List.of("\u0663", "\u0661\u0660\u0662\u0664", "\uFF13", "1\u0663",
        "\u0966", "+", "-", "", "1e3", "3.0")) {
      Parameters p = Parameters.of(Map.of("n", bad));
      assertThat(p.getLong("n", 7)).as(bad).isEqualTo(7);
      assertThat(p.errors()).as(bad).singleElement()
          .isEqualTo("parameter 'n' must be an integer, got '" + bad + "'");
    }
    Parameters arabic = Parameters.of(Map.of("n", "\u0663"));
    assertThat(arabic.getInt("n", 1, 1, 10)).isEqualTo(1);
    assertThat(arabic.errors()).singleElement().satisfies(e -> assertThat(e)
        .startsWith("parameter 'n' must be an integer"));
    Parameters huge = Parameters.of(Map.of("n", "99999999999999999999"));
    assertThat(huge.getLong("n", 7)).isEqualTo(7);
    assertThat(huge.errors()).containsExactly("parameter 'n' is too large: 99999999999999999999");
  }

  /**
   * {@code true} and {@code false} in any ASCII case; a letter that only case-folds to one of
   * theirs (the long s, {@code ſ}, folds to S) makes another word, which is an error.
   */
  @Test
  void aBooleanAsTextIsTrueOrFalseInAsciiLettersOnly() {
    for (String yes : List.of("true", "TRUE", "True")) {
      Parameters p = Parameters.of(Map.of("b", yes));
      assertThat(p.getBoolean("b", false)).as(yes).isTrue();
      assertThat(p.errors()).as(yes).isEmpty();
    }
    for (String no : List.of("false", "FALSE", "False")) {
      Parameters p = Parameters.of(Map.of("b", no));
      assertThat(p.getBoolean("b", true)).as(no).isFalse();
      assertThat(p.errors()).as(no).isEmpty();
    }
    for (String bad : List.of("fal\u017Fe", "FAL\u017FE", "yes", "1")) {
      Parameters p = Parameters.of(Map.of("b", bad));
      assertThat(p.getBoolean("b", true)).as(bad).isTrue();
      assertThat(p.errors()).as(bad).singleElement()
          .isEqualTo("parameter 'b' must be true or false, got '" + bad + "'");
    }
  }

  /**
   * A number beyond a double's range (YAML's 1e400, the same as text, a huge integer turned into
   * a double) read as Infinity and was taken: a weight or threshold of Infinity. Upstream's JSON
   * decoding refuses such a number; it is refused here too, naming the parameter.
   */
  @Test
  void aNumberBeyondADoublesRangeIsRefusedNotReadAsInfinity() {
    for (Object bad : List.<Object>of(Double.POSITIVE_INFINITY, Double.NEGATIVE_INFINITY,
        Double.NaN, "1e400", "-1e400", new java.math.BigInteger("1" + "0".repeat(400)))) {
      Parameters p = Parameters.of(Map.of("w", bad));
      assertThat(p.getDouble("w", 7.0)).as("%s", bad).isEqualTo(7.0);
      assertThat(p.errors()).as("%s", bad).singleElement().satisfies(e -> assertThat(e)
          .startsWith("parameter 'w' must be a finite number, got '"));
    }
    Parameters big = Parameters.of(Map.of("w", new java.math.BigInteger("1" + "0".repeat(30))));
    assertThat(big.getDouble("w", 7.0)).isEqualTo(1e30);
    assertThat(big.errors()).isEmpty();
  }

  /**
   * A provider checks what a getter returned; when the getter refused the value, that is the
   * default, and a check on it ("is required", "must be >= 0, got -1") reported a second error
   * about a value the file never held. The getter's error is now the only one for that
   * parameter, while errors about other parameters, and about a value that was read, stay.
   */
  @Test
  void aValueAGetterRefusedIsOneErrorWhateverTheProviderChecksAfterwards() {
    Parameters p = Parameters.of(Map.of("cap", "abc", "name", List.of(1), "ok", 5, "w", "1e400",
        "mode", "x"));
    long cap = p.getLong("cap", -1);
    if (cap < 0) {
      p.error("cap", "must be >= 0, got " + cap);
    }
    String name = p.getString("name", "");
    if (name == null || name.isEmpty()) {
      p.error("name", "is required");
    }
    double w = p.getDouble("w", Double.NaN);
    if (Double.isNaN(w)) {
      p.error("w", "is required");
    }
    p.getEnum("mode", "a", java.util.Set.of("a", "b"));
    p.error("mode", "has no default");
    int ok = p.getInt("ok", 0);
    p.error("ok", "is odd: " + ok);
    p.error("other", "is missing");
    assertThat(p.errors()).containsExactly(
        "parameter 'cap' must be an integer, got 'abc'",
        "parameter 'name' must be a string, got a list",
        "parameter 'w' must be a finite number, got '1e400'",
        "parameter 'mode' must be one of [a, b], got 'x'",
        "parameter 'ok' is odd: 5",
        "parameter 'other' is missing");
  }
}
