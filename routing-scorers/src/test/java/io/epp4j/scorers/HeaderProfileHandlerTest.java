package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Rejection;
import io.epp4j.api.RoutingDecision;
import io.epp4j.core.Router;
import io.epp4j.testkit.ContractFixtures;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** llm-d's header-profile-handler: one profile per request, named by a header. */
class HeaderProfileHandlerTest {
  static final List<Endpoint> POOL = List.of(Endpoint.parseWithRole("10.0.0.1:8000=prefill"),
      Endpoint.parseWithRole("10.0.0.2:8000=decode"));

  static String yaml(String handlerParameters, String... profiles) {
    StringBuilder b = new StringBuilder("""
        plugins:
        - type: prefill-filter
        - type: decode-filter
        - type: max-score-picker
        - type: header-profile-handler
        """).append(handlerParameters).append("schedulingProfiles:\n");
    for (String p : profiles) {
      b.append("- name: ").append(p).append("\n  plugins:\n  - pluginRef: ")
          .append(p.equals("prefill") ? "prefill-filter" : "decode-filter")
          .append("\n  - pluginRef: max-score-picker\n");
    }
    return b.toString();
  }

  static RoutingDecision route(String yaml, Map<String, String> headers) {
    try (Router r = Router.builder().endpoints(POOL).configYaml(yaml, "t.yaml").build()) {
      RoutingDecision d = r.route(InferenceRequest.builder().model("m").prompt("p")
          .headers(headers).build());
      if (d.isRouted()) {
        d.onComplete(io.epp4j.api.Usage.NONE);
      }
      return d;
    }
  }

  static final String TWO = yaml("", "prefill", "decode");

  @Test
  void runsOnlyTheProfileTheHeaderNamesAndMakesItPrimary() {
    RoutingDecision d = route(TWO, Map.of("EPP-Profile", " prefill "));
    assertThat(d.primaryProfile()).isEqualTo("prefill");
    assertThat(d.profileResults()).containsOnlyKeys("prefill");
    assertThat(d.primary().id()).isEqualTo("10.0.0.1:8000");
    assertThat(route(TWO, Map.of("epp-profile", "decode")).profileResults())
        .containsOnlyKeys("decode");
  }

  @Test
  void aMissingOrBlankHeaderRunsTheDefaultProfile() {
    for (Map<String, String> headers : List.of(Map.<String, String>of(),
        Map.of("epp-profile", "  "))) {
      RoutingDecision d = route(TWO, headers);
      assertThat(d.primaryProfile()).as("%s", headers).isEqualTo("decode");
      assertThat(d.profileResults()).containsOnlyKeys("decode");
    }
    String prefillByDefault = yaml("""
          parameters: {headerName: ' X-Stage ', defaultProfile: ' prefill '}
        """, "prefill", "decode");
    assertThat(route(prefillByDefault, Map.of()).primaryProfile()).isEqualTo("prefill");
    // the configured header, not the default one, names the profile
    assertThat(route(prefillByDefault, Map.of("epp-profile", "decode")).primaryProfile())
        .isEqualTo("prefill");
    assertThat(route(prefillByDefault, Map.of("x-stage", "decode")).primaryProfile())
        .isEqualTo("decode");
  }

  @Test
  void aHeaderNamingAnUnknownProfileIsRejectedSayingWhy() {
    RoutingDecision d = route(TWO, Map.of("epp-profile", "Prefill"));
    assertThat(d.isRouted()).isFalse();
    Rejection why = d.rejection();
    assertThat(why).isNotNull();
    assertThat(why.httpStatus()).isEqualTo(400);
    assertThat(why.message()).contains("'epp-profile'").contains("'Prefill'")
        .contains("[prefill, decode]");
  }

  @Test
  void noHeaderAndNoDefaultProfileIsRejectedAsAConfigurationGap() {
    String noDecode = yaml("", "prefill", "encode");
    RoutingDecision d = route(noDecode, Map.of());
    assertThat(d.isRouted()).isFalse();
    assertThat(d.rejection().httpStatus()).isEqualTo(503);
    assertThat(d.rejection().message()).contains("defaultProfile 'decode'")
        .contains("no 'epp-profile' header");
    // the header still selects a profile that exists
    assertThat(route(noDecode, Map.of("epp-profile", "encode")).primaryProfile())
        .isEqualTo("encode");
  }

  @Test
  void aSingleProfileRunsWhateverTheHeaderSays() {
    String one = yaml("", "prefill");
    for (Map<String, String> headers : List.of(Map.<String, String>of(),
        Map.of("epp-profile", "nonsense"))) {
      RoutingDecision d = route(one, headers);
      assertThat(d.primaryProfile()).as("%s", headers).isEqualTo("prefill");
      assertThat(d.primary().id()).isEqualTo("10.0.0.1:8000");
    }
  }

  @Test
  void aHeaderNameWithWhitespaceInsideIsRefusedNamingIt() {
    var r = new HeaderProfileHandler.Provider().create(ContractFixtures.context("h"),
        Parameters.of(Map.of("headerName", "EPP Profile")));
    assertThat(r.errors()).singleElement().satisfies(e -> assertThat(e)
        .startsWith("parameter 'headerName'"));
  }
}
