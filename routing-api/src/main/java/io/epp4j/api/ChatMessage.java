package io.epp4j.api;

import java.util.Objects;

/**
 * One chat message. When the OpenAI body gives {@code content} as an array of parts, the parts
 * are joined with {@code "\n"} between them, as vLLM joins them for a chat template that takes
 * string content; a text part gives its text and every other part its compact JSON, so two
 * requests with different images never look identical to the prefix index.
 *
 * @param role    {@code system}, {@code user}, {@code assistant}, {@code tool}, ...
 * @param content the message text
 */
public record ChatMessage(String role, String content) {
  public ChatMessage {
    Objects.requireNonNull(role, "role");
    Objects.requireNonNull(content, "content");
  }

  public static ChatMessage system(String content) {
    return new ChatMessage("system", content);
  }

  public static ChatMessage user(String content) {
    return new ChatMessage("user", content);
  }

  public static ChatMessage assistant(String content) {
    return new ChatMessage("assistant", content);
  }
}
