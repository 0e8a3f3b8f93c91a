package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * {@code allowed_token_ids} and {@code logits_processors}, which vLLM checks when it makes a
 * request's sampling parameters: an empty {@code allowed_token_ids} and IDs outside the
 * vocabulary refused in vLLM's words, any other list refused because the filler output does not
 * keep to it; a non-empty {@code logits_processors} refused as vLLM refuses it without
 * {@code --logits-processor-pattern}.
 */
@Timeout(60)
class ServeAllowedTokenIdsTest {
  private static final List<String> PATHS = List.of("/v1/completions", "/v1/chat/completions");
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  private static String input(String path) {
    return path.endsWith("chat/completions")
        ? "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]" : "\"prompt\":\"hi\"";
  }

  @Test
  void anEmptyListAndIdsOutOfVocabularyAreRefusedInVllmsWords() throws Exception {
    int port = replica.start();
    int vocab = HardwareProfile.qwen3H100Mps6().vocab();
    for (String path : PATHS) {
      JsonNode empty = replica.refusal(port, path, "{" + input(path)
          + ",\"allowed_token_ids\":[]}");
      assertThat(empty.get("message").asText()).isEqualTo("allowed_token_ids is not None and"
          + " empty! (parameter=allowed_token_ids, value=[])");
      assertThat(empty.get("param").asText()).isEqualTo("allowed_token_ids");
      JsonNode outside = replica.refusal(port, path, "{" + input(path)
          + ",\"allowed_token_ids\":[-1,5," + vocab + ",\"" + (vocab + 1) + "\"]}");
      assertThat(outside.get("message").asText()).isEqualTo("allowed_token_ids contains"
          + " out-of-vocab token id! (parameter=allowed_token_ids, value=[-1, " + vocab + ", "
          + (vocab + 1) + "])");
      assertThat(outside.get("param").asText()).isEqualTo("allowed_token_ids");
    }
  }

  @Test
  void anyOtherListIsRefusedAsTheFillerDoesNotKeepToIt() throws Exception {
    int port = replica.start();
    for (String path : PATHS) {
      JsonNode error = replica.refusal(port, path, "{" + input(path)
          + ",\"allowed_token_ids\":[5,6]}");
      assertThat(error.get("message").asText()).startsWith("field 'allowed_token_ids' limits the"
          + " tokens generated");
      assertThat(error.get("param").asText()).isEqualTo("allowed_token_ids");
      // the last of two is the one read, as in vLLM
      assertThat(replica.post(port, path, "{" + input(path)
          + ",\"allowed_token_ids\":[5],\"allowed_token_ids\":null}").statusCode())
          .isEqualTo(200);
    }
  }

  @Test
  void logitsProcessorsAreRefusedAsVllmRefusesThemWithoutAPattern() throws Exception {
    int port = replica.start();
    for (String path : PATHS) {
      for (String processors : List.of("[\"my.Processor\"]", "[{\"qualname\":\"my.P\"}]")) {
        JsonNode error = replica.refusal(port, path, "{" + input(path)
            + ",\"logits_processors\":" + processors + "}");
        assertThat(error.get("message").asText()).isEqualTo("The `logits_processors` argument"
            + " is not supported by this server. See --logits-processor-pattern engine argument"
            + " for more information.");
        assertThat(error.get("param").isNull()).isTrue();
      }
      // none asked for is no processor, as in vLLM
      assertThat(replica.post(port, path, "{" + input(path) + ",\"logits_processors\":[]}")
          .statusCode()).isEqualTo(200);
    }
  }
}
