package com.example.epp4j.gateway;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * The stand-in's {@code /v1/models} has the shape of vLLM's: a card with every field of vLLM's
 * {@code ModelCard} in its order, {@code created} the time of the request in seconds, and a
 * {@code permission} list of one {@code ModelPermission}. The stand-in wrote {@code parent} after
 * {@code max_model_len}, no {@code permission}, and the time it started as {@code created}.
 */
class StandInModelCardTest {
  private static final ObjectMapper JSON = new ObjectMapper();

  private static List<String> names(JsonNode object) {
    List<String> names = new ArrayList<>();
    object.fieldNames().forEachRemaining(names::add);
    return names;
  }

  @Test
  void theCardHasVllmsFieldsInItsOrderWithTheRequestsTimeAndOnePermission() throws Exception {
    HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();
    try (StandInVllm s = StandInVllm.start(
        new InetSocketAddress(InetAddress.getLoopbackAddress(), 0),
        StandInVllm.Options.defaults().withModel("qwen3"))) {
      long before = System.currentTimeMillis() / 1000;
      HttpResponse<String> res = http.send(HttpRequest.newBuilder(
          URI.create("http://127.0.0.1:" + s.port() + "/v1/models"))
          .timeout(Duration.ofSeconds(10)).GET().build(), HttpResponse.BodyHandlers.ofString());
      long after = System.currentTimeMillis() / 1000;
      assertThat(res.statusCode()).isEqualTo(200);
      JsonNode data = JSON.readTree(res.body()).get("data");
      assertThat(data).hasSize(1);
      JsonNode card = data.get(0);
      assertThat(names(card)).containsExactly("id", "object", "created", "owned_by", "root",
          "parent", "max_model_len", "permission");
      assertThat(card.get("id").asText()).isEqualTo("qwen3");
      assertThat(card.get("created").isIntegralNumber()).isTrue();
      assertThat(card.get("created").asLong()).isBetween(before, after);
      assertThat(card.get("parent").isNull()).isTrue();
      assertThat(card.get("permission")).hasSize(1);
      JsonNode p = card.get("permission").get(0);
      assertThat(names(p)).containsExactly("id", "object", "created", "allow_create_engine",
          "allow_sampling", "allow_logprobs", "allow_search_indices", "allow_view",
          "allow_fine_tuning", "organization", "group", "is_blocking");
      assertThat(p.get("id").asText()).matches("modelperm-[0-9a-f]{32}");
      assertThat(p.get("object").asText()).isEqualTo("model_permission");
      assertThat(p.get("created").asLong()).isBetween(before, after);
      assertThat(p.get("allow_create_engine").asBoolean(true)).isFalse();
      assertThat(p.get("allow_sampling").asBoolean(false)).isTrue();
      assertThat(p.get("allow_logprobs").asBoolean(false)).isTrue();
      assertThat(p.get("allow_search_indices").asBoolean(true)).isFalse();
      assertThat(p.get("allow_view").asBoolean(false)).isTrue();
      assertThat(p.get("allow_fine_tuning").asBoolean(true)).isFalse();
      assertThat(p.get("organization").asText()).isEqualTo("*");
      assertThat(p.get("group").isNull()).isTrue();
      assertThat(p.get("is_blocking").isBoolean()).isTrue();
      assertThat(p.get("is_blocking").asBoolean(true)).isFalse();
    }
  }
}
