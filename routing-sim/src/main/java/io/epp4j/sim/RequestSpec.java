package io.epp4j.sim;

import java.util.function.Supplier;

/**
 * One request a workload wants served: who sends it (the session key the router sees), how long
 * the prompt and the answer are, and its tokens. Tokens are produced on demand so a long trace
 * does not hold every prompt in memory at once.
 *
 * @param id            unique request id
 * @param sessionKey    the user's or dialog's session key
 * @param promptLength  prompt tokens (after any clipping to the model's context)
 * @param outputLength  tokens the model will generate (at least 1)
 * @param tokens        supplies prompt tokens followed by output tokens
 *                      ({@code promptLength + outputLength} entries)
 * @param clipped       whether the prompt was cut to fit the model's context
 * @param tag           workload-private data (e.g. the dialog and turn)
 */
public record RequestSpec(String id, String sessionKey, int promptLength, int outputLength,
    Supplier<int[]> tokens, boolean clipped, Object tag) {

  public RequestSpec {
    if (promptLength < 1 || outputLength < 1) {
      throw new IllegalArgumentException("prompt and output lengths must be >= 1, got "
          + promptLength + "/" + outputLength);
    }
  }
}
