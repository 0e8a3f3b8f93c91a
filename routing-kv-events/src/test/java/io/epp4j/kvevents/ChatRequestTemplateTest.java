package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.epp4j.api.ChatTemplateArgs;
import io.epp4j.api.InferenceRequest;
import io.epp4j.core.OpenAiRequestParser;
import io.epp4j.api.CycleState;
import io.epp4j.testkit.CapturedLog;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;

/**
 * A chat request that brings its own {@code chat_template} is refused by vLLM unless it runs with
 * {@code --trust-request-chat-template}, and then rendered with that template. Rendering the
 * model's template in its place computed block keys of a prompt no engine sees; the in-process
 * renderers now refuse it (the scorer counts the request as uncached), whatever the server's
 * default kwargs.
 */
class ChatRequestTemplateTest {
  private static final String OWN = "{% for m in messages %}OWN {{ m.content }}{% endfor %}";

  private static InferenceRequest chat() {
    return OpenAiRequestParser.defaults().parse("/v1/chat/completions", Map.of(),
        ("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],"
            + "\"chat_template\":\"" + OWN + "\"}").getBytes(StandardCharsets.UTF_8)).value();
  }

  @Test
  void theModelsTemplateIsNotRenderedForARequestWithItsOwn() {
    JinjaChatTemplate model = JinjaChatTemplate.compile(
        "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}", Map.of(), "model");
    InferenceRequest r = chat();
    assertThat(r.chatTemplateArgs().requestTemplate()).isEqualTo(OWN);
    assertThatThrownBy(() -> model.render(r.messages(), null, r.chatTemplateArgs()))
        .isInstanceOf(Tokenizer.TokenizationException.class)
        .hasMessageContaining("its own chat_template")
        .hasMessageNotContaining("OWN");
    // a server's default kwargs keep the request's template, so the refusal stands with them
    ChatTemplateArgs withDefaults = DefaultChatTemplateKwargs.parse("{\"enable_thinking\":false}")
        .applyTo(r.chatTemplateArgs());
    assertThat(withDefaults.requestTemplate()).isEqualTo(OWN);
    assertThatThrownBy(() -> model.render(r.messages(), null, withDefaults))
        .isInstanceOf(Tokenizer.TokenizationException.class);
  }

  @Test
  void aPerMessageTemplateRefusesItToo() {
    InferenceRequest r = chat();
    CachingChatTokenizer t = new CachingChatTokenizer(text -> new int[text.length()],
        ChatTemplate.CHATML, 1 << 20);
    assertThatThrownBy(() -> t.encodeChat(r.messages(), null, r.chatTemplateArgs()))
        .isInstanceOf(Tokenizer.TokenizationException.class)
        .hasMessageContaining("its own chat_template");
  }

  /**
   * Scored as uncached, such a request is not silent: the index's metrics count it and the
   * scorer warns (at most once per report interval), without the template.
   */
  @Test
  void theScorerCountsAndWarnsOfARequestItCannotRender() throws Exception {
    KvBlockIndex index = KvBlockIndex.builder().build();
    CachingChatTokenizer t = new CachingChatTokenizer(text -> new int[text.length()],
        ChatTemplate.CHATML, 1 << 20);
    try (CapturedLog log = CapturedLog.of(PrecisePrefixCacheScorer.class.getName());
        PrecisePrefixCacheScorer scorer =
            new PrecisePrefixCacheScorer(index, t, null, 1024, false, true, false)) {
      for (int i = 0; i < 3; i++) {
        double[] scores = new double[PrecisePrefixCacheScorerTest.EPS.size()];
        scorer.score(chat(), new CycleState(0, new SplittableRandom(1)),
            PrecisePrefixCacheScorerTest.candidates(PrecisePrefixCacheScorerTest.EPS), scores);
        assertThat(scores).as("scored as uncached").containsOnly(0.0);
      }
      assertThat(index.metrics().untokenizedRequests()).isEqualTo(3);
      String text = log.text();
      assertThat(text).contains("WARNING").contains("chat_template")
          .contains("untokenizedRequests").doesNotContain("OWN");
      assertThat(text.split("WARNING", -1)).as("one warning for the three").hasSize(2);
    }
  }
}
