package io.epp4j.kvevents;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.epp4j.api.ChatMessage;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import org.jspecify.annotations.Nullable;

/**
 * An in-process {@link Tokenizer} over a Hugging Face {@code tokenizer.json}, using DJL's
 * tokenizers binding (its jar carries the native library for Linux x86_64/aarch64 and macOS, so
 * nothing is downloaded at run time). Chat requests are rendered with the template named by
 * {@code tokenizer_config.json}: templates built on ChatML markers ({@code <|im_start|>}, as
 * Qwen's) render as {@link ChatTemplate#CHATML}; other Jinja templates are not interpreted and
 * chat requests then fail with a {@link Tokenizer.TokenizationException} naming the file.
 */
public final class HuggingFaceTokenizer implements Tokenizer {
  private final ai.djl.huggingface.tokenizers.HuggingFaceTokenizer tokenizer;
  private final @Nullable ChatTemplate template;
  private final String source;

  private HuggingFaceTokenizer(ai.djl.huggingface.tokenizers.HuggingFaceTokenizer tokenizer,
      @Nullable ChatTemplate template, String source) {
    this.tokenizer = tokenizer;
    this.template = template;
    this.source = source;
  }

  /**
   * Loads {@code tokenizer.json} from a model directory and, when present, the chat template of
   * {@code tokenizer_config.json} next to it.
   *
   * @throws IOException when the files cannot be read or parsed
   */
  public static HuggingFaceTokenizer load(Path modelDir) throws IOException {
    Path json = modelDir.resolve("tokenizer.json");
    if (!Files.isRegularFile(json)) {
      throw new IOException("no tokenizer.json in " + modelDir);
    }
    ai.djl.huggingface.tokenizers.HuggingFaceTokenizer t;
    try {
      t = ai.djl.huggingface.tokenizers.HuggingFaceTokenizer.newInstance(json,
          Map.of("addSpecialTokens", "false"));
    } catch (RuntimeException e) {
      throw new IOException("cannot load " + json + ": " + e.getMessage(), e);
    }
    ChatTemplate template = null;
    Path config = modelDir.resolve("tokenizer_config.json");
    if (Files.isRegularFile(config)) {
      JsonNode chat = new ObjectMapper().readTree(config.toFile()).get("chat_template");
      if (chat != null && chat.isTextual() && chat.asText().contains("<|im_start|>")) {
        template = ChatTemplate.CHATML;
      }
    }
    return new HuggingFaceTokenizer(t, template, modelDir.toString());
  }

  @Override
  public int[] encode(String text) {
    long[] ids = tokenizer.encode(text, false, false).getIds();
    int[] out = new int[ids.length];
    for (int i = 0; i < ids.length; i++) {
      out[i] = (int) ids[i];
    }
    return out;
  }

  @Override
  public int[] encodeChat(List<ChatMessage> messages) {
    if (template == null) {
      throw new TokenizationException("the chat template of " + source
          + " is not a ChatML template; tokenize chats with a VllmTokenizer instead");
    }
    return encode(template.render(messages));
  }

  /** The chat template in use, or {@code null} when chats are not supported. */
  public @Nullable ChatTemplate chatTemplate() {
    return template;
  }

  @Override
  public void close() {
    tokenizer.close();
  }
}
