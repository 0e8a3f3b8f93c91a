package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import java.net.http.HttpResponse;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Chat content parts vLLM's request model takes and its chat parser then refuses: a part without
 * a {@code type}, and a text part without a string {@code text} (kept by the request model as a
 * media part none of whose fields it has, so without its type). vLLM answers both with a 400
 * once the model is found, on a chat completion and on {@code /tokenize} alike; the stand-in names
 * the part. So does vLLM's parser refuse a part of a type it does not know, whatever text or media
 * field the part carries.
 */
@Timeout(60)
class ServeChatContentPartsTest {
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  @Test
  void aPartWithoutTypeOrATextPartWithoutTextIsA400NamingIt() throws Exception {
    int port = replica.start();
    String[][] parts = {{"{\"text\":\"hi\"}", "'messages[0].content[1].type'"},
        {"{\"type\":\"text\"}", "'messages[0].content[1].text'"},
        {"{\"type\":\"text\",\"text\":null}", "'messages[0].content[1].text'"}};
    for (String[] part : parts) {
      String messages = "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\","
          + "\"text\":\"a\"}," + part[0] + "]}]";
      for (String path : new String[] {"/v1/chat/completions", "/tokenize"}) {
        JsonNode e = replica.refusal(port, path, "{" + messages + ",\"max_tokens\":2}");
        assertThat(e.get("message").asText()).as(path + " " + part[0]).contains(part[1]);
        assertThat(e.get("type").asText()).isEqualTo("BadRequestError");
        assertThat(e.get("code").asInt()).isEqualTo(400);
        // after the model check, as vLLM parses the parts once the model is found
        assertThat(replica.post(port, path, "{\"model\":\"nope\"," + messages + "}")
            .statusCode()).as(path + " " + part[0]).isEqualTo(404);
      }
    }
    // the same chat with the part whole is served
    assertThat(replica.post(port, "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\","
        + "\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"hi\"}]}],"
        + "\"max_tokens\":2}").statusCode()).isEqualTo(200);
  }

  @Test
  void aPartOfATypeVllmDoesNotKnowIsA400EvenWithText() throws Exception {
    int port = replica.start();
    // a text, or a media URL, does not make a part of an unknown type a text or media part
    for (String part : new String[] {"{\"type\":\"mystery\",\"text\":\"hi\"}",
        "{\"type\":\"file\",\"text\":\"hi\"}",
        "{\"type\":\"mystery\",\"image_url\":\"http://x/y.png\"}"}) {
      String messages = "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\","
          + "\"text\":\"a\"}," + part + "]}]";
      for (String path : new String[] {"/v1/chat/completions", "/tokenize"}) {
        JsonNode e = replica.refusal(port, path, "{" + messages + ",\"max_tokens\":2}");
        assertThat(e.get("message").asText()).as(path + " " + part)
            .contains("'messages[0].content[1].type'").contains("text, thinking");
        assertThat(e.get("code").asInt()).isEqualTo(400);
        // found as vLLM finds it, when the parts are parsed once the model is found
        assertThat(replica.post(port, path, "{\"model\":\"nope\"," + messages + "}")
            .statusCode()).as(path + " " + part).isEqualTo(404);
      }
    }
    // the types vLLM's parser reads a text from are served
    for (String type : new String[] {"text", "input_text", "output_text"}) {
      assertThat(replica.post(port, "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\","
          + "\"content\":[{\"type\":\"" + type + "\",\"text\":\"hi\"}]}],\"max_tokens\":2}")
          .statusCode()).as(type).isEqualTo(200);
    }
  }

  @Test
  void aPartWithoutTypeHoldingAnInputAudioIsServedAsAudio() throws Exception {
    int port = replica.start();
    String audio = "{\"input_audio\":{\"data\":\"UklGRg==\",\"format\":\"wav\"}}";
    String messages = "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\","
        + "\"text\":\"a\"}," + audio + "]}]";
    for (String path : new String[] {"/v1/chat/completions", "/tokenize"}) {
      HttpResponse<String> res = replica.post(port, path, "{" + messages + ",\"max_tokens\":2}");
      assertThat(res.statusCode()).as(path + " " + res.body()).isEqualTo(200);
    }
    // an input_audio of null is no audio: the part still has no type
    assertThat(replica.refusal(port, "/v1/chat/completions", "{\"messages\":[{\"role\":"
        + "\"user\",\"content\":[{\"input_audio\":null}]}],\"max_tokens\":2}")
        .get("message").asText()).contains("'messages[0].content[0].type' is required");
  }

  @Test
  void refusalAndThinkingPartsAreReadAsTheirTextAsVllmReadsThem() throws Exception {
    int port = replica.start();
    JsonNode asString = tokenized(port, "\"a\\nb c\"");
    for (String part : new String[] {"{\"type\":\"refusal\",\"refusal\":\"b c\"}",
        "{\"type\":\"thinking\",\"thinking\":\"b c\",\"closed\":true}"}) {
      JsonNode asParts = tokenized(port, "[{\"type\":\"text\",\"text\":\"a\"}," + part + "]");
      assertThat(asParts.get("tokens")).as(part).isEqualTo(asString.get("tokens"));
    }
    // without the field named after its type, such a part adds no text
    JsonNode alone = tokenized(port, "\"a\"");
    assertThat(tokenized(port, "[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"refusal\","
        + "\"text\":\"b c\"}]").get("tokens")).isEqualTo(alone.get("tokens"));
  }

  private JsonNode tokenized(int port, String content) throws Exception {
    HttpResponse<String> res = replica.post(port, "/tokenize", "{\"messages\":[{\"role\":"
        + "\"user\",\"content\":" + content + "}]}");
    assertThat(res.statusCode()).as(content + " " + res.body()).isEqualTo(200);
    return new com.fasterxml.jackson.databind.ObjectMapper().readTree(res.body());
  }
}
