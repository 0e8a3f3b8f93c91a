package io.epp4j.kvevents;

import io.epp4j.api.ChatMessage;
import io.epp4j.api.ChatTemplateArgs;
import java.util.List;
import org.jspecify.annotations.Nullable;

/**
 * Turns request text into the token IDs the model server will see, so that text requests can be
 * matched against the blocks vLLM reports. Offer one to the router with
 * {@code Router.builder().service(Tokenizer.class, tokenizer)}; the precise scorers use it for
 * completion and chat requests that carry no token IDs. Implementations must be thread-safe.
 *
 * <p>A tokenizer that calls a remote server blocks the routing thread for the call; prefer an
 * in-process tokenizer, or wrap a remote one in a {@link CachingChatTokenizer}.
 */
public interface Tokenizer extends AutoCloseable {

  /**
   * Token IDs of {@code text}, without special tokens added.
   *
   * @throws TokenizationException when the text cannot be tokenized (server down, bad answer)
   */
  int[] encode(String text);

  /**
   * Token IDs of a completion request's text prompt as vLLM's {@code /v1/completions} tokenizes
   * it: with the special tokens the tokenizer adds to a sequence (the BOS token of Llama, Gemma,
   * DeepSeek and others), since that endpoint's {@code add_special_tokens} defaults to true.
   * The engine's first block then starts with them, and so must the router's keys. Chats never
   * go through here: their template writes the special tokens itself. The default returns
   * {@link #encode}, which is right for a tokenizer that adds none (Qwen).
   *
   * @throws TokenizationException when the text cannot be tokenized
   */
  default int[] encodePrompt(String prompt) {
    return encode(prompt);
  }

  /**
   * Token IDs of a chat rendered with the model's template, ending with the generation prompt
   * of the assistant turn. The default renders ChatML ({@link ChatTemplate#CHATML}), the
   * template of Qwen and many other models.
   */
  default int[] encodeChat(List<ChatMessage> messages) {
    return encode(ChatTemplate.CHATML.render(messages));
  }

  /**
   * As {@link #encodeChat(List)}, for a request that also declares tools (the {@code tools}
   * array as JSON), which templates render into the prompt. The default ignores the tools;
   * tokenizers that render the model's own template override it.
   */
  default int[] encodeChat(List<ChatMessage> messages, @Nullable String toolsJson) {
    return encodeChat(messages);
  }

  /**
   * As {@link #encodeChat(List, String)}, for a request that also sets the chat template's
   * fields ({@code add_generation_prompt}, {@code continue_final_message},
   * {@code chat_template_kwargs}), which change the rendered prompt. The default serves
   * {@link ChatTemplateArgs#DEFAULTS} through {@link #encodeChat(List, String)} and refuses
   * anything else, since a tokenizer that does not render them would give other tokens than the
   * engine's (and the scorer then counts the request as uncached, rather than looking up keys no
   * engine holds); the tokenizers of this package override it.
   *
   * @throws TokenizationException when the arguments cannot be rendered
   */
  default int[] encodeChat(List<ChatMessage> messages, @Nullable String toolsJson,
      ChatTemplateArgs args) {
    if (args.isDefault()) {
      return encodeChat(messages, toolsJson);
    }
    throw new TokenizationException(getClass().getName() + " does not render a chat's"
        + " add_generation_prompt, continue_final_message or chat_template_kwargs");
  }

  /**
   * As {@link #encodeChat(List, String, ChatTemplateArgs)}, for a request that sets
   * {@code add_special_tokens}: vLLM tokenizes the rendered chat with the special tokens its
   * tokenizer adds to a sequence when it is true (a Llama 3 prompt then starts with two BOS
   * tokens). The default serves {@code false} through the three-argument form and refuses
   * {@code true}, which it cannot render; the tokenizers of this package override it.
   *
   * @throws TokenizationException when the arguments cannot be rendered
   */
  default int[] encodeChat(List<ChatMessage> messages, @Nullable String toolsJson,
      ChatTemplateArgs args, boolean addSpecialTokens) {
    if (!addSpecialTokens) {
      return encodeChat(messages, toolsJson, args);
    }
    throw new TokenizationException(getClass().getName() + " does not tokenize a chat with"
        + " add_special_tokens");
  }

  @Override
  default void close() {}

  /** Tokenization failed; the scorer then treats the request as having no cached prefix. */
  final class TokenizationException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public TokenizationException(String message, Throwable cause) {
      super(message, cause);
    }

    public TokenizationException(String message) {
      super(message);
    }
  }
}
