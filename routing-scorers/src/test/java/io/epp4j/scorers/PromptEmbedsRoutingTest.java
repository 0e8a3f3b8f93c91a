package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.OpenAiRequestParser;
import io.epp4j.core.Router;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * A completion given as {@code prompt_embeds} alone reaches the router as a prompt of no tokens:
 * the EPP default profile and the {@code epp4j} preset route it on load, next to ordinary
 * prompts, and count it in flight like any other request.
 */
class PromptEmbedsRoutingTest {
  private static final List<Endpoint> POOL =
      List.of(Endpoint.parse("10.0.0.1:8000"), Endpoint.parse("10.0.0.2:8000"));

  @Test
  void theDefaultProfileAndTheEpp4jPresetRouteIt() {
    InferenceRequest embeds = OpenAiRequestParser.defaults().parse("/v1/completions", Map.of(),
        "{\"model\":\"m\",\"prompt_embeds\":\"AAAA\",\"max_tokens\":5}"
            .getBytes(StandardCharsets.UTF_8)).value();
    InferenceRequest text = InferenceRequest.completion("m", "a prompt of a few words ".repeat(40));
    for (Router.Builder b : List.of(Router.builder(),
        Router.builder().configYaml(Epp4jPreset.yaml(), Epp4jPreset.NAME))) {
      try (Router r = b.endpoints(POOL).build()) {
        for (Endpoint e : POOL) {
          r.updateMetrics(e.id(), EndpointMetrics.builder().waitingRequests(0).build());
        }
        for (int i = 0; i < 4; i++) {
          RoutingDecision d = r.route(i % 2 == 0 ? embeds : text);
          assertThat(d.isRouted()).isTrue();
          assertThat(r.endpoints().stream().mapToInt(c -> c.inFlightRequests()).sum())
              .isEqualTo(1);
          d.onComplete(Usage.NONE);
        }
      }
    }
  }
}
