package io.epp4j.api;

/**
 * Token counts a model server reports for a finished request ({@code usage} in an OpenAI
 * response).
 *
 * @param promptTokens     prompt tokens
 * @param cachedTokens     prompt tokens served from the prefix cache
 *                         ({@code prompt_tokens_details.cached_tokens}), 0 if not reported
 * @param completionTokens generated tokens
 */
public record Usage(int promptTokens, int cachedTokens, int completionTokens) {
  public Usage {
    if (promptTokens < 0) {
      throw new IllegalArgumentException("promptTokens must be >= 0, got " + promptTokens);
    }
    if (cachedTokens < 0) {
      throw new IllegalArgumentException("cachedTokens must be >= 0, got " + cachedTokens);
    }
    if (completionTokens < 0) {
      throw new IllegalArgumentException("completionTokens must be >= 0, got " + completionTokens);
    }
  }

  /** Usage with nothing known. */
  public static final Usage NONE = new Usage(0, 0, 0);
}
