package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.InferenceRequest;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * A chat's media parts count as the tokens the engine's encoder makes of them, an amount that
 * does not depend on how long their URL or base64 data is, not as that text divided by four.
 */
class ChatMediaPromptEstimateTest {
  private final OpenAiRequestParser parser = OpenAiRequestParser.defaults();

  private InferenceRequest chat(String parts) {
    String body = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[" + parts
        + "]}]}";
    return parser.parse("/v1/chat/completions", Map.of(), body.getBytes(StandardCharsets.UTF_8))
        .value();
  }

  private static String image(String url) {
    return "{\"type\":\"image_url\",\"image_url\":{\"url\":\"" + url + "\"}}";
  }

  @Test
  void aMegabyteBase64ImageCountsAsOneImageNotAsItsText() {
    String text = "{\"type\":\"text\",\"text\":\"" + "d".repeat(400) + "\"}";
    InferenceRequest plain = chat(text);
    // 400 characters of text
    assertThat(plain.estimatedPromptTokens()).isEqualTo(100);
    String data = "data:image/png;base64," + "A".repeat(1 << 20);
    InferenceRequest large = chat(text + "," + image(data));
    InferenceRequest small = chat(text + "," + image("http://x/1.png"));
    // the text, the "\n" the parts are joined with, and one image
    assertThat(large.estimatedPromptTokens())
        .isEqualTo((401 + 3) / 4 + InferenceRequest.MEDIA_PART_TOKENS);
    assertThat(small.estimatedPromptTokens()).isEqualTo(large.estimatedPromptTokens());
  }

  @Test
  void eachMediaPartCountsWhateverItsModality() {
    InferenceRequest r = chat(image("http://x/1.png") + "," + image("http://x/2.png")
        + ",{\"type\":\"input_audio\",\"input_audio\":{\"data\":\"" + "B".repeat(100_000)
        + "\",\"format\":\"wav\"}}");
    // three media parts and the two "\n" between them
    assertThat(r.estimatedPromptTokens()).isEqualTo(1 + 3 * InferenceRequest.MEDIA_PART_TOKENS);
  }
}
