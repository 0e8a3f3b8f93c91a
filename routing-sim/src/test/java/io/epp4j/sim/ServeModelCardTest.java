package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * {@code GET /v1/models} has the shape of vLLM's {@code ModelList}: each card every field of its
 * {@code ModelCard} in its order, {@code created} the server's time in seconds, and a
 * {@code permission} list holding one {@code ModelPermission}, as vLLM's
 * {@code show_available_models} builds it. The emulator wrote {@code "created": 0} and no
 * {@code permission}, which a client that reads either (OpenAI's SDK types both) saw as missing or
 * as a model made in 1970.
 */
@Timeout(60)
class ServeModelCardTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  private static List<String> names(JsonNode object) {
    List<String> names = new ArrayList<>();
    object.fieldNames().forEachRemaining(names::add);
    return names;
  }

  @Test
  void everyCardHasVllmsFieldsInItsOrderWithTheServersTimeAndOnePermission() throws Exception {
    int port = replica.start(List.of("sql"));
    HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();
    long before = System.currentTimeMillis() / 1000;
    HttpResponse<String> res = http.send(HttpRequest.newBuilder(
        URI.create("http://127.0.0.1:" + port + "/v1/models")).timeout(Duration.ofSeconds(30))
        .GET().build(), HttpResponse.BodyHandlers.ofString());
    long after = System.currentTimeMillis() / 1000;
    assertThat(res.statusCode()).isEqualTo(200);
    JsonNode list = JSON.readTree(res.body());
    assertThat(names(list)).containsExactly("object", "data");
    JsonNode data = list.get("data");
    assertThat(data).hasSize(2);
    List<String> permissionIds = new ArrayList<>();
    for (JsonNode card : data) {
      assertThat(names(card)).as(card.toString()).containsExactly("id", "object", "created",
          "owned_by", "root", "parent", "max_model_len", "permission");
      assertThat(card.get("object").asText()).isEqualTo("model");
      assertThat(card.get("owned_by").asText()).isEqualTo("vllm");
      assertThat(card.get("created").isIntegralNumber()).isTrue();
      assertThat(card.get("created").asLong()).isBetween(before, after);
      JsonNode permissions = card.get("permission");
      assertThat(permissions.isArray()).isTrue();
      assertThat(permissions).hasSize(1);
      JsonNode p = permissions.get(0);
      assertThat(names(p)).containsExactly("id", "object", "created", "allow_create_engine",
          "allow_sampling", "allow_logprobs", "allow_search_indices", "allow_view",
          "allow_fine_tuning", "organization", "group", "is_blocking");
      // vLLM's id is "modelperm-" and a random UUID's 32 hex digits, a new one for each card
      assertThat(p.get("id").asText()).matches("modelperm-[0-9a-f]{32}");
      permissionIds.add(p.get("id").asText());
      assertThat(p.get("object").asText()).isEqualTo("model_permission");
      assertThat(p.get("created").isIntegralNumber()).isTrue();
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
    assertThat(permissionIds).doesNotHaveDuplicates();
    JsonNode base = data.get(0);
    assertThat(base.get("id").asText()).isEqualTo("qwen3-1.7b");
    assertThat(base.get("root").asText()).isEqualTo("qwen3-1.7b");
    assertThat(base.get("parent").isNull()).isTrue();
    assertThat(base.get("max_model_len").asInt())
        .isEqualTo(HardwareProfile.qwen3H100Mps6().maxModelLen());
    JsonNode adapter = data.get(1);
    assertThat(adapter.get("id").asText()).isEqualTo("sql");
    assertThat(adapter.get("parent").asText()).isEqualTo("qwen3-1.7b");
    assertThat(adapter.get("max_model_len").isNull()).isTrue();
  }

  /**
   * vLLM's card for an adapter of {@code --lora-modules NAME=PATH} names its path as
   * {@code root} and the base model as {@code parent}; the emulator named the adapter's name as
   * its root. An adapter given by name alone, which has no path, keeps its name there.
   */
  @Test
  void anAdaptersRootIsThePathItWasGivenWithAndItsParentTheBaseModel() throws Exception {
    int port = replica.start(base -> Serve.parse(new String[] {"--replicas", "1", "--port",
        String.valueOf(base), "--kv-events-port", String.valueOf(base + 1_000), "--speed", "20",
        "--lora-adapters", "sql=/adapters/sql-v2, chat"}));
    HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();
    HttpResponse<String> res = http.send(HttpRequest.newBuilder(
        URI.create("http://127.0.0.1:" + port + "/v1/models")).timeout(Duration.ofSeconds(30))
        .GET().build(), HttpResponse.BodyHandlers.ofString());
    assertThat(res.statusCode()).isEqualTo(200);
    JsonNode data = JSON.readTree(res.body()).get("data");
    assertThat(data).hasSize(3);
    assertThat(data.get(0).get("root").asText()).isEqualTo("qwen3-1.7b");
    JsonNode sql = data.get(1);
    assertThat(sql.get("id").asText()).isEqualTo("sql");
    assertThat(sql.get("root").asText()).isEqualTo("/adapters/sql-v2");
    assertThat(sql.get("parent").asText()).isEqualTo("qwen3-1.7b");
    JsonNode chat = data.get(2);
    assertThat(chat.get("id").asText()).isEqualTo("chat");
    assertThat(chat.get("root").asText()).isEqualTo("chat");
    assertThat(chat.get("parent").asText()).isEqualTo("qwen3-1.7b");
    // the adapter is served under its name, not under NAME=PATH
    assertThat(replica.post(port, "/v1/completions",
        "{\"model\":\"sql\",\"prompt\":[1,2,3],\"max_tokens\":1}").statusCode()).isEqualTo(200);
  }
}
