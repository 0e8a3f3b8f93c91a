package io.epp4j.api;

import java.util.List;
import java.util.Objects;

/**
 * One chat message. When the OpenAI body gives {@code content} as an array of parts, the parts
 * are joined with {@code "\n"} between them, as vLLM joins them for a chat template that takes
 * string content; a text part gives its text and every other part its compact JSON, so two
 * requests with different images never look identical to the prefix index. The parts are also
 * kept one by one in {@link #parts()}, for a chat template that iterates over a message's
 * content, to which vLLM hands them as a list.
 *
 * @param role    {@code system}, {@code user}, {@code assistant}, {@code tool}, ...
 * @param content the message text
 * @param parts   the parts of an array content as a chat template sees them, in order; empty
 *     when the content was a string (or absent)
 * @param fields  the message's other fields that a chat template reads, as one compact JSON
 *     object holding those the client gave with a non-null value, each value as given:
 *     {@code name}, {@code tool_calls}, {@code tool_call_id}, {@code reasoning},
 *     {@code reasoning_content}; empty when there is none. Kept apart from the content because
 *     the engine hands them to the template as fields of the message ({@code message.tool_calls}),
 *     which renders them in its own way
 * @param contentAbsent whether the client gave no content: {@code content} {@code null} (as an
 *     assistant message with {@code tool_calls} sends it) or no {@code content} at all. The
 *     message's {@code content} is then empty and it has no parts; kept apart from an empty
 *     string because vLLM hands a chat template that iterates over content an empty list for it
 *     (one empty text part for {@code ""}), and a template may tell the two apart
 */
public record ChatMessage(String role, String content, List<Part> parts, String fields,
    boolean contentAbsent) {
  public ChatMessage {
    Objects.requireNonNull(role, "role");
    Objects.requireNonNull(content, "content");
    Objects.requireNonNull(fields, "fields");
    parts = List.copyOf(parts);
    if (contentAbsent && (!content.isEmpty() || !parts.isEmpty())) {
      throw new IllegalArgumentException("a message without content has no text or parts");
    }
  }

  /** A message whose content the client gave (a string, or an array of parts). */
  public ChatMessage(String role, String content, List<Part> parts, String fields) {
    this(role, content, parts, fields, false);
  }

  /**
   * A message whose content is {@code null} or absent, with its other fields (compact JSON, as
   * {@link #fields()}; empty for none).
   */
  public static ChatMessage withoutContent(String role, String fields) {
    return new ChatMessage(role, "", List.of(), fields, true);
  }

  /** A message without fields other than its role and content. */
  public ChatMessage(String role, String content, List<Part> parts) {
    this(role, content, parts, "");
  }

  /** A message whose content is a string. */
  public ChatMessage(String role, String content) {
    this(role, content, List.of());
  }

  /** Whether the message has fields other than its role and content. */
  public boolean hasFields() {
    return !fields.isEmpty();
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

  /**
   * One part of an array content as vLLM hands it to a chat template that iterates over the
   * content: {@code {"type": "text", "text": ...}} for a text part, {@code {"type": "image"}}
   * (or {@code audio}, {@code video}) for media, whose data the template never sees.
   *
   * @param type {@code text}, {@code image}, {@code audio}, {@code video}, or the part's own
   *     type for one vLLM does not know
   * @param text the text of a {@code text} part; empty for any other
   * @param json a part other than text as the client sent it (compact JSON, its type and data,
   *     e.g. {@code {"image_url":{"url":"..."},"type":"image_url"}}), for a tokenizer that hands
   *     the chat to the engine, which reads the media itself; empty for a text part, or when
   *     unknown
   */
  public record Part(String type, String text, String json) {
    public Part {
      Objects.requireNonNull(type, "type");
      Objects.requireNonNull(text, "text");
      Objects.requireNonNull(json, "json");
    }

    /** A part without its JSON. */
    public Part(String type, String text) {
      this(type, text, "");
    }

    /** A text part. */
    public static Part text(String text) {
      return new Part("text", text);
    }

    /** Whether this is a text part. */
    public boolean isText() {
      return type.equals("text");
    }
  }
}
