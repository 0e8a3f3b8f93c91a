package io.epp4j.api;

import org.jspecify.annotations.Nullable;

/**
 * The fields of a chat request that change how the model's chat template renders the messages,
 * as vLLM's {@code /v1/chat/completions} reads them. A tokenizer that renders the template needs
 * them to produce the prompt the engine sees; without them a request that sets any of them gets
 * other tokens than the engine, and so other KV block keys.
 *
 * @param addGenerationPrompt  {@code add_generation_prompt}: end the prompt with the opening of
 *     the assistant's reply (vLLM's default: true)
 * @param continueFinalMessage {@code continue_final_message}: end the prompt inside the last
 *     message, so that the model continues it (default false); never with
 *     {@code addGenerationPrompt}
 * @param kwargsJson           {@code chat_template_kwargs} as a compact JSON object, or
 *     {@code null}: extra variables for the template ({@code {"enable_thinking":false}} for
 *     Qwen3). Its {@code add_generation_prompt} and {@code continue_final_message} keys, if any,
 *     give way to the two fields above, as in vLLM. The request parser merges the request's
 *     other template fields into it as vLLM's {@code build_chat_params} does:
 *     {@code documents} over a key of that name, then {@code reasoning_effort} and, unless
 *     the request's kwargs set it, {@code enable_thinking} ({@code false} for effort
 *     {@code "none"}, else {@code true})
 * @param requestTemplate      the request's own {@code chat_template} (Jinja source), or
 *     {@code null}: vLLM refuses such a request unless started with
 *     {@code --trust-request-chat-template}, and then renders the chat with it instead of the
 *     model's template, so a tokenizer that renders the model's template would compute tokens no
 *     engine holds; the tokenizers of routing-kv-events refuse it (the request is scored as
 *     uncached), but for the one that asks the engine, which is sent it
 */
public record ChatTemplateArgs(boolean addGenerationPrompt, boolean continueFinalMessage,
    @Nullable String kwargsJson, @Nullable String requestTemplate) {

  /** What a request that sets none of the fields gets. */
  public static final ChatTemplateArgs DEFAULTS = new ChatTemplateArgs(true, false, null);

  /** Fields without a template of the request's own. */
  public ChatTemplateArgs(boolean addGenerationPrompt, boolean continueFinalMessage,
      @Nullable String kwargsJson) {
    this(addGenerationPrompt, continueFinalMessage, kwargsJson, null);
  }

  /** These fields with other kwargs, the request's own template kept. */
  public ChatTemplateArgs withKwargs(@Nullable String kwargs) {
    return new ChatTemplateArgs(addGenerationPrompt, continueFinalMessage, kwargs,
        requestTemplate);
  }

  /** Whether these are the {@link #DEFAULTS}. */
  public boolean isDefault() {
    return addGenerationPrompt && !continueFinalMessage && kwargsJson == null
        && requestTemplate == null;
  }

  @Override
  public String toString() {
    // the kwargs and the template are client text: their size only
    return "ChatTemplateArgs{addGenerationPrompt=" + addGenerationPrompt
        + ", continueFinalMessage=" + continueFinalMessage
        + (kwargsJson == null ? "" : ", kwargs=" + kwargsJson.length() + " chars")
        + (requestTemplate == null ? "" : ", requestTemplate=" + requestTemplate.length()
            + " chars") + "}";
  }
}
