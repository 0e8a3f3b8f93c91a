package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.Router;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;

/**
 * A request with {@code n} sequences makes the engine generate {@code max_tokens} for each: the
 * picker's decode account counts them all while the request runs, and takes them all off at its
 * end.
 */
class TokenCostPickerSequencesTest {
  private static final Endpoint A = Endpoint.of("10.0.0.1", 8000);

  @Test
  void theDecodeAccountCountsMaxTokensForEachSequence() {
    AtomicLong now = new AtomicLong();
    try (Router r = Router.builder().endpoints(List.of(A)).randomSeed(1).ticker(now::get)
        .configYaml(Epp4jPreset.yaml(), Epp4jPreset.NAME).build()) {
      TokenCostPicker p = (TokenCostPicker) r.config().plugins().get(TokenCostPicker.TYPE);
      RoutingDecision four = r.route(InferenceRequest.builder().model("m")
          .tokenIds(new int[] {1, 2, 3}).maxTokens(50).sequences(4).build());
      assertThat(four.primary()).isEqualTo(A);
      assertThat(p.decodeTokens(A.id())).isEqualTo(200);

      // a body's n, as the request parser reads it
      RoutingDecision three = r.route("/v1/completions", Map.of(),
          "{\"model\":\"m\",\"prompt\":[4,5],\"max_tokens\":10,\"n\":3}"
              .getBytes(StandardCharsets.UTF_8));
      assertThat(three.primary()).isEqualTo(A);
      assertThat(p.decodeTokens(A.id())).isEqualTo(230);

      four.onComplete(Usage.NONE);
      assertThat(p.decodeTokens(A.id())).isEqualTo(30);
      three.onComplete(Usage.NONE);
      assertThat(p.decodeTokens(A.id())).isZero();
    }
  }
}
