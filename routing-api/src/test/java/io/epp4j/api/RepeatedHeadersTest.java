package io.epp4j.api;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

class RepeatedHeadersTest {

  @Test
  void headerLinesAreJoinedInTheirOrderCookiesWithASemicolon() {
    Map<String, List<String>> lines = new LinkedHashMap<>();
    lines.put("X-Session-Id", List.of("a", "b"));
    lines.put("Cookie", List.of("x=1", "sid=2"));
    lines.put("x-session-id", List.of("c"));
    lines.put("Accept", List.of());
    lines.put("x-nothing", Arrays.asList((String) null));
    assertThat(RepeatedHeaders.of(lines)).containsOnly(
        Map.entry("x-session-id", "a,b,c"),
        Map.entry("cookie", "x=1; sid=2"),
        Map.entry("accept", ""));
  }

  @Test
  void aMapInLowerCaseWithoutNullsIsTakenAsItIs() {
    Map<String, String> h = Map.of("x-session-id", "a", "accept", "*/*");
    assertThat(RepeatedHeaders.lowerCased(h)).isSameAs(h);
  }

  @Test
  void theRequestsHeadersJoinNamesThatDifferOnlyInCaseInsteadOfKeepingTheLast() {
    // before, the builder lower-cased the names into a map where the last one won
    Map<String, String> h = new LinkedHashMap<>();
    h.put("X-Session-Id", "a");
    h.put("x-session-id", "b");
    h.put("COOKIE", "x=1");
    h.put("cookie", "y=2");
    InferenceRequest r = InferenceRequest.builder().requestId("r").model("m").prompt("p")
        .headers(h).build();
    assertThat(r.headers()).containsOnly(Map.entry("x-session-id", "a,b"),
        Map.entry("cookie", "x=1; y=2"));
  }

  @Test
  void aNullInTheRequestsHeadersIsRefusedNamingTheHeader() {
    Map<String, String> h = new LinkedHashMap<>();
    h.put("X-Session-Id", null);
    assertThatThrownBy(() -> InferenceRequest.builder().headers(h))
        .isInstanceOf(NullPointerException.class).hasMessageContaining("X-Session-Id");
  }

  @Test
  void manyLinesOfOneHeaderAreJoinedOnce() {
    List<String> values = new ArrayList<>();
    for (int i = 0; i < 10_000; i++) {
      values.add("v" + i);
    }
    String joined = RepeatedHeaders.of(Map.of("x-forwarded-for", values)).get("x-forwarded-for");
    assertThat(joined).isEqualTo(String.join(",", values));
  }
}
