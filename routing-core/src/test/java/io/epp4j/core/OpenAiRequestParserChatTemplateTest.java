package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.ChatMessage;
import io.epp4j.api.ChatTemplateArgs;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Result;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * The chat fields that change how vLLM renders the model's chat template
 * ({@code add_generation_prompt}, {@code continue_final_message}, {@code chat_template_kwargs})
 * are carried to the request, so a tokenizer renders the prompt the engine renders; bad values
 * are 400s naming the field, as the engine refuses them.
 */
class OpenAiRequestParserChatTemplateTest {
  private final OpenAiRequestParser parser = OpenAiRequestParser.defaults();
  private static final String CHAT = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\","
      + "\"content\":\"hi\"}]";

  private Result<InferenceRequest> chat(String fields) {
    return parser.parse("/v1/chat/completions", Map.of(),
        (CHAT + fields + "}").getBytes(StandardCharsets.UTF_8));
  }

  @Test
  void theTemplateFieldsReachTheRequest() {
    InferenceRequest r = chat(",\"chat_template_kwargs\":{\"enable_thinking\":false,\"b\":[1,"
        + "{\"z\":1,\"a\":2}]},\"add_generation_prompt\":false,\"continue_final_message\":true")
        .value();
    // in the body's key order: a template that walks the dict sees that order
    assertThat(r.chatTemplateArgs()).isEqualTo(new ChatTemplateArgs(false, true,
        "{\"enable_thinking\":false,\"b\":[1,{\"z\":1,\"a\":2}]}"));
  }

  @Test
  void absentOrNullFieldsAreTheEnginesDefaults() {
    assertThat(chat("").value().chatTemplateArgs()).isEqualTo(ChatTemplateArgs.DEFAULTS);
    assertThat(chat(",\"chat_template_kwargs\":null,\"add_generation_prompt\":null,"
        + "\"continue_final_message\":null").value().chatTemplateArgs())
        .isEqualTo(ChatTemplateArgs.DEFAULTS);
    // continue_final_message alone is accepted here, as by vLLM's request model
    assertThat(chat(",\"continue_final_message\":true").value().chatTemplateArgs())
        .isEqualTo(new ChatTemplateArgs(true, true, null));
  }

  @Test
  void badValuesAreRefusedByName() {
    assertThat(chat(",\"add_generation_prompt\":\"maybe\"").errors()).singleElement()
        .asString().startsWith("field 'add_generation_prompt' must be true or false");
    assertThat(chat(",\"continue_final_message\":[true]").errors()).singleElement()
        .asString().startsWith("field 'continue_final_message' must be true or false");
    assertThat(chat(",\"chat_template_kwargs\":\"enable_thinking\"").errors()).singleElement()
        .asString().startsWith("field 'chat_template_kwargs' must be an object");
    assertThat(chat(",\"chat_template_kwargs\":{\"tokenize\":true}").errors()).singleElement()
        .asString().isEqualTo("field 'chat_template_kwargs' must not set 'tokenize'");
    assertThat(chat(",\"add_generation_prompt\":true,\"continue_final_message\":true").errors())
        .singleElement().asString().isEqualTo(
            "fields 'add_generation_prompt' and 'continue_final_message' must not both be true");
  }

  @Test
  void documentsJoinTheKwargsAsVllmMergesThem() {
    // build_chat_params: the request's kwargs, then documents over a key of that name
    String docs = "[{\"title\":\"T\",\"text\":\"x\"}]";
    assertThat(chat(",\"documents\":" + docs).value().chatTemplateArgs())
        .isEqualTo(new ChatTemplateArgs(true, false, "{\"documents\":" + docs + "}"));
    assertThat(chat(",\"chat_template_kwargs\":{\"documents\":[],\"a\":1},\"documents\":"
        + docs).value().chatTemplateArgs().kwargsJson())
        .isEqualTo("{\"documents\":" + docs + ",\"a\":1}");
    assertThat(chat(",\"documents\":null").value().chatTemplateArgs())
        .isEqualTo(ChatTemplateArgs.DEFAULTS);
    // the engine's request model takes a list of objects of strings
    assertThat(chat(",\"documents\":{\"text\":\"x\"}").errors()).singleElement().asString()
        .startsWith("field 'documents' must be an array of objects");
    assertThat(chat(",\"documents\":[{\"text\":\"x\"},\"y\"]").errors()).singleElement()
        .asString().startsWith("field 'documents[1]' must be an object");
    assertThat(chat(",\"documents\":[{\"secret-key\":7}]").errors()).singleElement()
        .asString().startsWith("field 'documents[0]' must have only string values")
        .doesNotContain("secret-key");
  }

  @Test
  void reasoningEffortJoinsTheKwargsWithTheThinkingItImplies() {
    assertThat(chat(",\"reasoning_effort\":\"low\"").value().chatTemplateArgs().kwargsJson())
        .isEqualTo("{\"reasoning_effort\":\"low\",\"enable_thinking\":true}");
    assertThat(chat(",\"reasoning_effort\":\"none\",\"documents\":[]").value()
        .chatTemplateArgs().kwargsJson())
        .isEqualTo("{\"documents\":[],\"reasoning_effort\":\"none\",\"enable_thinking\":false}");
    // a request's own enable_thinking stays, even null (a server default then applies)
    assertThat(chat(",\"chat_template_kwargs\":{\"enable_thinking\":null,"
        + "\"reasoning_effort\":\"x\"},\"reasoning_effort\":\"none\"").value()
        .chatTemplateArgs().kwargsJson())
        .isEqualTo("{\"enable_thinking\":null,\"reasoning_effort\":\"none\"}");
    assertThat(chat(",\"reasoning_effort\":null").value().chatTemplateArgs())
        .isEqualTo(ChatTemplateArgs.DEFAULTS);
    assertThat(chat(",\"reasoning_effort\":{\"effort\":\"low\"}").errors()).singleElement()
        .asString().startsWith("field 'reasoning_effort' must be a string");
  }

  @Test
  void theRequestsOwnChatTemplateIsKeptSoThatTheModelsIsNotRenderedInItsPlace() {
    ChatTemplateArgs args = chat(",\"chat_template\":\"{{ messages }}\"").value()
        .chatTemplateArgs();
    assertThat(args).isEqualTo(new ChatTemplateArgs(true, false, null, "{{ messages }}"));
    assertThat(args.isDefault()).isFalse();
    assertThat(args.toString()).doesNotContain("messages");
    assertThat(chat(",\"chat_template\":null").value().chatTemplateArgs())
        .isEqualTo(ChatTemplateArgs.DEFAULTS);
    assertThat(chat(",\"chat_template\":[\"x\"]").errors()).singleElement().asString()
        .startsWith("field 'chat_template' must be a string");
  }

  @Test
  void onACompletionRequestTheyAreUnknownFieldsAndIgnored() {
    Result<InferenceRequest> r = parser.parse("/v1/completions", Map.of(),
        ("{\"model\":\"m\",\"prompt\":\"x\",\"add_generation_prompt\":\"maybe\","
            + "\"chat_template_kwargs\":7,\"documents\":7,\"reasoning_effort\":7,\"chat_template\":7}")
            .getBytes(StandardCharsets.UTF_8));
    assertThat(r.isOk()).isTrue();
    assertThat(r.value().chatTemplateArgs()).isEqualTo(ChatTemplateArgs.DEFAULTS);
  }

  @Test
  void anArrayContentKeepsItsPartsForTemplatesThatIterateOverThem() {
    InferenceRequest r = parser.parse("/v1/chat/completions", Map.of(), ("{\"model\":\"m\","
        + "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
        + "{\"type\":\"image_url\",\"image_url\":{\"url\":\"u\"}},{\"text\":\"b\",\"type\":\"text\","
        + "\"cache_control\":{}}]},{\"role\":\"assistant\",\"content\":\"c\"}]}")
        .getBytes(StandardCharsets.UTF_8)).value();
    assertThat(r.messages().get(0).parts()).containsExactly(ChatMessage.Part.text("a"),
        new ChatMessage.Part("image", "", "{\"image_url\":{\"url\":\"u\"},\"type\":\"image_url\"}"),
        ChatMessage.Part.text("b"));
    // the joined text the prefix index reads is as before
    assertThat(r.messages().get(0).content())
        .isEqualTo("a\n{\"image_url\":{\"url\":\"u\"},\"type\":\"image_url\"}\nb");
    assertThat(r.messages().get(1).parts()).isEmpty();
  }
}
