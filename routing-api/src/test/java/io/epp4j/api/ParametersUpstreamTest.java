package io.epp4j.api;

import static org.assertj.core.api.Assertions.assertThat;

import java.time.Duration;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** The getters and notices upstream files need: Go durations and "accepted, changes nothing". */
class ParametersUpstreamTest {

  static Duration read(Object value) {
    Parameters p = Parameters.of(Map.of("d", value));
    Duration d = p.getDuration("d", Duration.ofDays(1));
    return p.errors().isEmpty() ? d : null;
  }

  @Test
  void goDurationsAreReadWithTheirUnits() {
    assertThat(read("200ms")).isEqualTo(Duration.ofMillis(200));
    assertThat(read("5s")).isEqualTo(Duration.ofSeconds(5));
    assertThat(read("1m30s")).isEqualTo(Duration.ofSeconds(90));
    assertThat(read("1h")).isEqualTo(Duration.ofHours(1));
    assertThat(read("1.5s")).isEqualTo(Duration.ofMillis(1500));
    assertThat(read("250us")).isEqualTo(Duration.ofNanos(250_000));
    assertThat(read("60000000000ns")).isEqualTo(Duration.ofMinutes(1));
  }

  /**
   * Go reads a duration's digits as integers, so a figure of whole nanoseconds is exact; the
   * same spelling must not lose a nanosecond here to a binary fraction (1.005 * 1e9 is
   * 1004999999.99...). Go also takes a fraction without leading or trailing digits, the bare
   * zero, and anything up to the largest int64 of nanoseconds.
   */
  @Test
  void goDurationsAreExactToTheNanosecondAndTakeGoSpellings() {
    assertThat(read("1.005s")).isEqualTo(Duration.ofMillis(1005));
    assertThat(read("2.01h")).isEqualTo(Duration.ofSeconds(7236));
    assertThat(read("0.000000001s")).isEqualTo(Duration.ofNanos(1));
    assertThat(read("1.0000000009s")).isEqualTo(Duration.ofNanos(1_000_000_000));
    assertThat(read(".5s")).isEqualTo(Duration.ofMillis(500));
    assertThat(read("5.s")).isEqualTo(Duration.ofSeconds(5));
    assertThat(read("0")).isEqualTo(Duration.ZERO);
    assertThat(read("250\u00b5s")).isEqualTo(Duration.ofNanos(250_000));
    assertThat(read("250\u03bcs")).isEqualTo(Duration.ofNanos(250_000));
    assertThat(read("2562047h47m16.854775807s")).isEqualTo(Duration.ofNanos(Long.MAX_VALUE));
    assertThat(read("9223372036854775807ns")).isEqualTo(Duration.ofNanos(Long.MAX_VALUE));
    assertThat(read("9223372036854775808ns")).isNull();
    assertThat(read("2562048h")).isNull();
    assertThat(read(".s")).isNull();
    assertThat(read("00")).isNull();
  }

  @Test
  void aDurationWithoutAUnitOrWithAnUnknownOneIsAnErrorNamingTheParameter() {
    for (Object bad : List.of(200, "200", "5x", "", "s", "1m 30s", "-5s", Map.of("s", 1))) {
      Parameters p = Parameters.of(Map.of("d", bad));
      assertThat(p.getDuration("d", Duration.ofSeconds(7))).as("%s", bad)
          .isEqualTo(Duration.ofSeconds(7));
      assertThat(p.errors()).as("%s", bad).singleElement()
          .satisfies(e -> assertThat(e).startsWith("parameter 'd'").contains("duration"));
    }
  }

  /** A minus sign is what is wrong with '-5s', not its form: the error says so. */
  @Test
  void aNegativeDurationIsRefusedAsNegativeNotAsNoDuration() {
    assertThat(read("-0")).isEqualTo(Duration.ZERO); // Go's negative zero
    assertThat(read("-0s")).isEqualTo(Duration.ZERO);
    for (String bad : List.of("-5s", " -1m30s", "-0.5ms", "-1ns")) {
      Parameters p = Parameters.of(Map.of("d", bad));
      p.getDuration("d", Duration.ofSeconds(7));
      assertThat(p.errors()).as("%s", bad).singleElement().satisfies(e -> assertThat(e)
          .startsWith("parameter 'd'").contains("must not be a negative duration")
          .doesNotContain("with a unit"));
    }
    for (String bad : List.of("-", "-x", "--5s", "-5")) {
      Parameters p = Parameters.of(Map.of("d", bad));
      p.getDuration("d", Duration.ofSeconds(7));
      assertThat(p.errors()).as("%s", bad).singleElement()
          .satisfies(e -> assertThat(e).contains("must be a duration with a unit"));
    }
  }

  @Test
  void aNoticeMarksTheParameterReadAndKeepsTheReason() {
    Parameters p = Parameters.of(Map.of("primaryPort", 8000, "typo", 1));
    p.notice("primaryPort", "has no effect: the gateway forwards to the rank");
    assertThat(p.notices()).containsExactly(
        "parameter 'primaryPort' has no effect: the gateway forwards to the rank");
    assertThat(p.unreadNames()).containsExactly("typo");
    assertThat(p.errors()).isEmpty();
  }
}
