package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.epp4j.api.ChatMessage;
import java.nio.charset.StandardCharsets;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.ValueSource;

/** The streaming reader of request bodies: what it makes of prompts, chats and bad JSON. */
class RequestBodyTest {
  private static final int VOCAB = 151_643;

  private static RequestBody read(String json) throws RequestBody.Malformed {
    return RequestBody.read(json.getBytes(StandardCharsets.UTF_8), VOCAB);
  }

  @ParameterizedTest
  @ValueSource(strings = {"{\"prompt\":[1,2", "{\"prompt\":[1,2]} x", "{\"prompt\":",
      "{\"messages\":[{\"role\":\"user\"", "{\"a\":{\"b\":[1,{}]}", "[1,2", "{]"})
  void invalidJsonIsSaidSo(String json) {
    assertThatThrownBy(() -> read(json)).isInstanceOf(RequestBody.Malformed.class)
        .hasMessage("the request body is not valid JSON");
  }

  @ParameterizedTest
  @ValueSource(strings = {"", "[1,2]", "\"text\"", "3", "null"})
  void jsonThatIsNoObjectIsSaidSo(String json) {
    assertThatThrownBy(() -> read(json)).isInstanceOf(RequestBody.Malformed.class)
        .hasMessage("the request body must be a JSON object");
  }

  @Test
  void tokenIdsBecomeAnArrayAndABatchOfOneIsItsPrompt() throws Exception {
    assertThat(((RequestBody.Ids) read("{\"prompt\":[1,2,151642]}").prompt()).ids())
        .containsExactly(1, 2, 151_642);
    assertThat(((RequestBody.Ids) read("{\"prompt\":[[7,8]]}").prompt()).ids())
        .containsExactly(7, 8);
    assertThat(((RequestBody.Text) read("{\"prompt\":[\"hi\"]}").prompt()).text())
        .isEqualTo("hi");
    // as in a tree, a field given twice is its last value
    assertThat(read("{\"prompt\":\"a\",\"prompt\":[3]}").prompt())
        .isInstanceOf(RequestBody.Ids.class);
    assertThat(read("{\"model\":\"m\"}").prompt()).isNull();
  }

  @Test
  void aLongPromptFillsSeveralChunks() throws Exception {
    StringBuilder b = new StringBuilder("{\"prompt\":[");
    int n = 200_000;
    for (int i = 0; i < n; i++) {
      b.append(i % 1000).append(i < n - 1 ? "," : "]}");
    }
    int[] ids = ((RequestBody.Ids) read(b.toString()).prompt()).ids();
    assertThat(ids).hasSize(n);
    for (int i = 0; i < n; i++) {
      assertThat(ids[i]).isEqualTo(i % 1000);
    }
  }

  @ParameterizedTest
  @CsvSource(delimiter = '|', value = {
      "[1,\"a\"]|non-negative integers", "[1,-1]|non-negative integers",
      "[1,2.0]|non-negative integers", "[1,3000000000]|non-negative integers",
      "[1,{}]|non-negative integers", "[[\"a\"]]|non-negative integers",
      "[5,151643]|out of vocabulary", "[151643,\"a\"]|out of vocabulary",
      "[\"a\",\"b\"]|a batch of 2 prompts", "[[1],[2],[3]]|a batch of 3 prompts",
      "null|non-empty array", "5|non-empty array"})
  void aBadPromptIsNamedNotQuoted(String prompt, String expected) throws Exception {
    RequestBody.Prompt p = read("{\"prompt\":" + prompt + "}").prompt();
    assertThat(p).isInstanceOf(RequestBody.Bad.class);
    assertThat(((RequestBody.Bad) p).message()).contains(expected).startsWith("field 'prompt'");
  }

  @ParameterizedTest
  @ValueSource(strings = {"[]", "[[]]"})
  void aPromptListWithoutTokensIsAnEmptyPrompt(String prompt) throws Exception {
    // valid to vLLM's request model; its engine refuses the empty prompt, after the model check
    RequestBody.Prompt p = read("{\"prompt\":" + prompt + "}").prompt();
    assertThat(p).isInstanceOf(RequestBody.Ids.class);
    assertThat(((RequestBody.Ids) p).ids()).isEmpty();
  }

  @Test
  void messagesBecomeRolesAndTheirTextPartsJoined() throws Exception {
    RequestBody r = read("{\"messages\":[{\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
        + "{\"type\":\"image_url\",\"image_url\":{\"url\":\"x\"}},"
        + "{\"type\":\"text\",\"text\":\"b\"},\"c\",{\"video_url\":\"y\"}],"
        + "\"role\":\"user\",\"name\":\"n\"},{\"role\":\"assistant\",\"content\":null},"
        + "{\"role\":\"system\"}]}");
    assertThat(r.hasMessages()).isTrue();
    // the parts one by one too, as a template that iterates over content gets them, and the
    // fields a template reads besides the content, as the router keeps them
    // (a plain string part is a text part, and a plain media URL part a media part, as vLLM
    // reads them)
    assertThat(r.messages()).isEqualTo(List.of(new ChatMessage("user", "a\nb\nc",
            List.of(ChatMessage.Part.text("a"), new ChatMessage.Part("image", ""),
                ChatMessage.Part.text("b"), ChatMessage.Part.text("c"),
                new ChatMessage.Part("video", "")), "{\"name\":\"n\"}"),
        ChatMessage.withoutContent("assistant", ""), ChatMessage.withoutContent("system", "")));
    // an empty string is content given, which a template that iterates over content gets as
    // one empty text part, where it gets none for a null or absent content (as the router)
    assertThat(read("{\"messages\":[{\"role\":\"user\",\"content\":\"\"}]}").messages())
        .isEqualTo(List.of(new ChatMessage("user", "")));
  }

  @Test
  void anEmptyTextPartAddsNoNewlineToTheJoinedContentAsInVllm() throws Exception {
    // vLLM's parser keeps the parts whose parsed content is truthy for a template that takes
    // string content: "", an empty text, refusal or thinking part, is left out of the join; a
    // template that iterates over content still gets each as an empty text part
    RequestBody r = read("{\"messages\":[{\"role\":\"user\",\"content\":["
        + "{\"type\":\"text\",\"text\":\"\"},{\"type\":\"text\",\"text\":\"a\"},"
        + "{\"type\":\"text\",\"text\":\"\"},\"\",{\"type\":\"refusal\",\"refusal\":\"\"},"
        + "{\"type\":\"text\",\"text\":\"b\"},{\"type\":\"text\",\"text\":\"\"}]}]}");
    ChatMessage.Part empty = ChatMessage.Part.text("");
    assertThat(r.messages()).isEqualTo(List.of(new ChatMessage("user", "a\nb",
        List.of(empty, ChatMessage.Part.text("a"), empty, empty, empty, ChatMessage.Part.text("b"),
            empty))));
    // parts that are all empty join to "", as a content of ""
    assertThat(((ChatMessage) ((List<?>) read("{\"messages\":[{\"role\":\"user\","
        + "\"content\":[{\"type\":\"text\",\"text\":\"\"},\"\"]}]}").messages()).get(0))
        .content()).isEmpty();
  }

  /**
   * Parts vLLM's request model takes and its chat parser refuses once the model is found: a part
   * without a type, and a text part without a string text (the request model keeps it as a media
   * part none of whose fields it has, without its type). The first such part is named; the
   * messages are still read, as the refusal comes after the model check.
   */
  @ParameterizedTest
  @CsvSource(delimiter = '|', value = {
      "{\"text\":\"b\"}|field 'messages[1].content[1].type' is required",
      "{\"type\":null,\"text\":\"b\"}|field 'messages[1].content[1].type' is required",
      "{\"type\":7,\"text\":\"b\"}|field 'messages[1].content[1].type' is required",
      "{}|field 'messages[1].content[1].type' is required",
      "{\"type\":\"text\"}|field 'messages[1].content[1].text' must be a string",
      "{\"type\":\"text\",\"text\":null}|field 'messages[1].content[1].text' must be a string",
      "{\"text\":5,\"type\":\"text\"}|field 'messages[1].content[1].text' must be a string"})
  void aPartWithoutTypeOrATextPartWithoutTextIsNamed(String part, String expected)
      throws Exception {
    RequestBody r = read("{\"messages\":[{\"role\":\"system\",\"content\":\"s\"},"
        + "{\"role\":\"user\",\"content\":[\"a\"," + part + ",{\"type\":\"text\"}]}]}");
    assertThat(r.messages()).isInstanceOf(List.class);
    assertThat(r.partRefused()).isEqualTo(expected);
    // a part of a plain media URL needs no type, as in vLLM
    for (String media : new String[] {"{\"image_url\":\"x\"}", "{\"audio_url\":null}",
        "{\"type\":\"text\",\"video_url\":\"x\"}"}) {
      assertThat(read("{\"messages\":[{\"role\":\"user\",\"content\":[" + media + "]}]}")
          .partRefused()).as(media).isNull();
    }
  }

  @Test
  void aPartTheRequestModelRefusesComesBeforeOneTheChatParserRefuses() throws Exception {
    // a part that is no object in a later message is the request model's refusal, which vLLM
    // answers before it parses any part
    assertThat(read("{\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"a\"}]},"
        + "{\"role\":\"user\",\"content\":[5]}]}").messages())
        .isEqualTo("field 'messages[].content' must be a string or an array of parts");
  }

  @ParameterizedTest
  @CsvSource(delimiter = '|', value = {
      "[]|field 'messages' must be a non-empty array",
      "{}|field 'messages' must be a non-empty array",
      "[{\"role\":1,\"content\":\"x\"}]|field 'messages[].role' must be a string",
      "[\"hi\"]|field 'messages[].role' must be a string",
      "[{\"role\":\"user\",\"content\":5}]|field 'messages[].content' must be a string or an"
          + " array of parts",
      // a part that is neither an object nor a string, which vLLM's request model refuses
      "[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},5]}]|field"
          + " 'messages[].content' must be a string or an array of parts",
      "[{\"role\":\"user\",\"content\":[[\"a\"]]}]|field 'messages[].content' must be a"
          + " string or an array of parts",
      "[{\"role\":\"user\",\"content\":[null]}]|field 'messages[].content' must be a string"
          + " or an array of parts",
      "[{\"role\":\"user\",\"content\":\"a\"},{\"content\":\"b\"}]|field 'messages[].role'"
          + " must be a string"})
  void badMessagesAreNamed(String messages, String expected) throws Exception {
    assertThat(read("{\"messages\":" + messages + "}").messages()).isEqualTo(expected);
  }

  @Test
  void fieldsNotReadAreSkippedAndTheOthersKept() throws Exception {
    RequestBody r = read("{\"model\":\"m\",\"pad\":{\"a\":[1,2,{\"b\":null}]},\"stream\":true,"
        + "\"stream_options\":{\"include_usage\":true},\"max_tokens\":4}");
    assertThat(r.fields().fieldNames()).toIterable()
        .containsExactly("model", "stream", "stream_options", "max_tokens");
    assertThat(r.fields().get("stream_options").get("include_usage").asBoolean()).isTrue();
    assertThat(r.hasMessages()).isFalse();
  }
}
