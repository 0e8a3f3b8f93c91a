package io.epp4j.core;

import static io.epp4j.core.RequestBodyErrors.at;

import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.epp4j.api.ChatMessage;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import org.jspecify.annotations.Nullable;

/**
 * Reads a chat {@code messages} array from the request parser's stream into {@link ChatMessage}s:
 * string content kept as parsed, content parts joined (text as is, media as canonical JSON so
 * distinct media never look alike), a {@code null} or absent content marked as such
 * ({@link ChatMessage#contentAbsent()}), and the fields a chat template reads besides the content
 * ({@code name}, {@code tool_calls}, {@code tool_call_id}, {@code reasoning},
 * {@code reasoning_content}) kept apart as {@link ChatMessage#fields()}, each value as given (a
 * {@code null} one is absent, and a field given twice counts with its last value, as the engine
 * reads them), so that the template renders them as the engine's does.
 * Errors are returned as values naming the message and part.
 */
final class ChatMessagesReader {

  private ChatMessagesReader() {}

  /** Reads the array whose START_ARRAY is the current token; an error message or null. */
  static @Nullable String readMessages(JsonParser p, List<ChatMessage> out) throws IOException {
    int index = 0;
    for (JsonToken t = p.nextToken(); t != JsonToken.END_ARRAY; t = p.nextToken(), index++) {
      if (t != JsonToken.START_OBJECT) {
        return messageField(index, "") + "' must be an object" + at(p);
      }
      String role = null;
      // the common case, one string content, is kept as parsed; a builder only for parts
      String text = null;
      StringBuilder content = null;
      // an array content's parts one by one, for templates that iterate over them
      List<ChatMessage.Part> parts = null;
      // the fields of FIELDS as compact JSON, always in that order whatever order the body
      // gives them (the engine's template reads them by name); a key given twice keeps its
      // last value, as everywhere in the body
      String @Nullable [] extra = null;
      while (p.nextToken() == JsonToken.FIELD_NAME) {
        String f = p.currentName();
        JsonToken v = p.nextToken();
        switch (f) {
          case "role" -> {
            if (v != JsonToken.VALUE_STRING) {
              return messageField(index, ".role") + "' must be a string" + at(p);
            }
            role = p.getText();
          }
          case "content" -> {
            // given twice, the last one counts, as the engine's JSON reader takes it
            text = null;
            content = null;
            parts = null;
            if (v == JsonToken.VALUE_STRING) {
              text = p.getText();
            } else if (v == JsonToken.START_ARRAY) {
              content = new StringBuilder();
              parts = new ArrayList<>();
              String err = readParts(p, content, parts, index);
              if (err != null) {
                return err;
              }
            } else if (v != JsonToken.VALUE_NULL) {
              return messageField(index, ".content") + "' must be a string or an array of parts" + at(p);
            }
          }
          case "name", "tool_calls", "tool_call_id", "reasoning", "reasoning_content" -> {
            int slot = FIELDS.indexOf(f);
            if (v == JsonToken.VALUE_NULL) {
              // what clients that write every field of their message type send: the engine
              // renders the message as without the field, so it adds nothing to the identity
              if (extra != null) {
                extra[slot] = null;
              }
              continue;
            }
            if (extra == null) {
              extra = new String[FIELDS.size()];
            }
            // as given, key order kept: a template prints a tool call's arguments object as
            // the client wrote it
            extra[slot] = AS_GIVEN.writeValueAsString(CanonicalJson.readTree(p));
          }
          default -> p.skipChildren();
        }
      }
      if (role == null) {
        return messageField(index, ".role") + "' is required";
      }
      String given = extra == null ? "" : fields(extra);
      // null or absent content stays apart from "": vLLM gives a template that iterates over
      // content an empty list for it, and one empty text part for ""
      if (text == null && content == null) {
        out.add(ChatMessage.withoutContent(role, given));
      } else {
        out.add(new ChatMessage(role, text != null ? text : String.valueOf(content),
            parts == null ? List.of() : parts, given));
      }
    }
    return null;
  }

  /** The fields besides role and content that the engine hands a chat template, in order. */
  private static final List<String> FIELDS =
      List.of("name", "tool_calls", "tool_call_id", "reasoning", "reasoning_content");

  /** Compact JSON in the order given. */
  private static final ObjectMapper AS_GIVEN = new ObjectMapper();

  /** {@code {"name":...,...}} of the non-null values, or empty when all are null. */
  private static String fields(String[] values) throws JsonProcessingException {
    StringBuilder sb = null;
    for (int i = 0; i < values.length; i++) {
      if (values[i] != null) {
        sb = sb == null ? new StringBuilder("{") : sb.append(',');
        sb.append(AS_GIVEN.writeValueAsString(FIELDS.get(i))).append(':').append(values[i]);
      }
    }
    return sb == null ? "" : sb.append('}').toString();
  }

  /** {@code field 'messages[i]<suffix>}, built only when an error is reported. */
  private static String messageField(int index, String suffix) {
    return "field 'messages[" + index + "]" + suffix;
  }

  /**
   * Reads a content array. Text parts ({@code type} and {@code text} strings only, or a plain
   * string, which vLLM reads as a text part) are read from the stream; any other part is read as
   * a tree. A part vLLM reads as text under another type ({@code input_text}, {@code output_text},
   * {@code refusal}, {@code thinking}) gives its text, as a text part; any other is kept as
   * canonical JSON.
   */
  private static @Nullable String readParts(JsonParser p, StringBuilder content,
      List<ChatMessage.Part> parts, int message) throws IOException {
    int i = 0;
    // where each part's text ends in content, to join them once all are read
    int base = content.length();
    int[] ends = new int[4];
    for (JsonToken t = p.nextToken(); t != JsonToken.END_ARRAY; t = p.nextToken(), i++) {
      if (t != JsonToken.START_OBJECT && t != JsonToken.VALUE_STRING) {
        return partField(message, i, "") + "' must be an object or a string" + at(p);
      }
      if (i > 0) {
        if (i > ends.length) {
          ends = java.util.Arrays.copyOf(ends, ends.length * 2);
        }
        ends[i - 1] = content.length();
      }
      if (t == JsonToken.VALUE_STRING) {
        // a plain string part: vLLM's request model takes one (its content part type includes
        // str) and reads it as a text part
        String text = p.getText();
        content.append(text);
        parts.add(ChatMessage.Part.text(text));
        continue;
      }
      String type = null;
      String text = null;
      ObjectNode other = null;
      while (p.nextToken() == JsonToken.FIELD_NAME) {
        String f = p.currentName();
        JsonToken v = p.nextToken();
        if (other == null && v == JsonToken.VALUE_STRING && (f.equals("type") || f.equals("text"))) {
          if (f.equals("type")) {
            type = p.getText();
          } else {
            text = p.getText();
          }
          continue;
        }
        if (other == null) {
          other = JsonNodeFactory.instance.objectNode();
          if (type != null) {
            other.put("type", type);
          }
          if (text != null) {
            other.put("text", text);
          }
        }
        other.set(f, CanonicalJson.readTree(p));
      }
      if (other == null) {
        if (type == null) {
          return partField(message, i, ".type") + "' is required";
        }
        if (!type.equals("text") && text != null && "text".equals(textKey(type))) {
          // a Responses-style text part ("input_text", "output_text"), which vLLM reads as text
          content.append(text);
          parts.add(ChatMessage.Part.text(text));
          continue;
        }
        if (type.equals("text")) {
          if (text == null) {
            return partField(message, i, ".text") + "' must be a string";
          }
          content.append(text);
          parts.add(ChatMessage.Part.text(text));
          continue;
        }
        other = JsonNodeFactory.instance.objectNode();
        other.put("type", type);
        if (text != null) {
          other.put("text", text);
        }
      }
      String err = appendPart(other, content, parts, message, i);
      if (err != null) {
        return err;
      }
    }
    if (i > 1) {
      if (i > ends.length) {
        ends = java.util.Arrays.copyOf(ends, i);
      }
      ends[i - 1] = content.length();
      joinWithNewlines(content, base, ends, i);
    }
    return null;
  }

  /**
   * Joins the texts of {@code n} parts, written one after the other into {@code content} from
   * {@code base} and ending at {@code ends}, with "\n" as vLLM joins them for a chat template that
   * takes string content: {@code "\n".join} of the parts whose text is not empty, so an empty text
   * part adds no separator.
   */
  private static void joinWithNewlines(StringBuilder content, int base, int[] ends, int n) {
    String all = content.substring(base);
    content.setLength(base);
    int from = 0;
    boolean first = true;
    for (int k = 0; k < n; k++) {
      int to = ends[k] - base;
      if (to > from) {
        if (!first) {
          content.append('\n');
        }
        content.append(all, from, to);
        first = false;
      }
      from = to;
    }
  }

  private static @Nullable String appendPart(JsonNode part, StringBuilder content,
      List<ChatMessage.Part> parts, int message, int i) throws JsonProcessingException {
    JsonNode type = part.get("type");
    if (type == null || type.isNull()) {
      // vLLM takes a part without a type that gives a media field as that medium (its "simple"
      // image, audio and video parts); any other untyped part is refused there too
      String medium = untypedMedium(part);
      if (medium == null) {
        return partField(message, i, ".type") + "' is required";
      }
      String json = CanonicalJson.canonical(part);
      content.append(json);
      parts.add(new ChatMessage.Part(modality(medium), "", json));
      return null;
    }
    if (!type.isTextual()) {
      return partField(message, i, ".type") + "' is required";
    }
    String key = textKey(type.asText());
    JsonNode keyed = key == null ? null : part.get(key);
    if ("text".equals(type.asText())) {
      JsonNode text = part.get("text");
      if (text == null || !text.isTextual()) {
        return partField(message, i, ".text") + "' must be a string";
      }
      content.append(text.asText());
      parts.add(ChatMessage.Part.text(text.asText()));
    } else if (keyed != null && keyed.isTextual()) {
      // a part vLLM reads as text under another type: the template sees its text only
      content.append(keyed.asText());
      parts.add(ChatMessage.Part.text(keyed.asText()));
    } else {
      // images, audio, files: keep their identity so distinct media never look alike, and the
      // part itself for a tokenizer that sends the chat to the engine
      String json = CanonicalJson.canonical(part);
      content.append(json);
      parts.add(new ChatMessage.Part(modality(type.asText()), "", json));
    }
    return null;
  }

  /**
   * The field holding the text of a part that vLLM reads as text ({@code text}, the Responses
   * API's {@code input_text} and {@code output_text}, {@code refusal}, {@code thinking}), or null
   * for a part of any other type.
   */
  private static @Nullable String textKey(String type) {
    return switch (type) {
      case "text", "input_text", "output_text" -> "text";
      case "refusal" -> "refusal";
      case "thinking" -> "thinking";
      default -> null;
    };
  }

  /**
   * The medium of a part without a type, in the order vLLM tries them: a non-null
   * {@code image_url}, {@code audio_url} or {@code input_audio}, or a {@code video_url} field;
   * null for a part that gives none of them.
   */
  private static @Nullable String untypedMedium(JsonNode part) {
    for (String f : new String[] {"image_url", "audio_url", "input_audio"}) {
      JsonNode v = part.get(f);
      if (v != null && !v.isNull()) {
        return f;
      }
    }
    return part.has("video_url") ? "video_url" : null;
  }

  /** The placeholder type vLLM gives a template for a media part of this type. */
  private static String modality(String type) {
    return switch (type) {
      case "image_url", "input_image", "image_embeds", "image_pil" -> "image";
      case "audio_url", "input_audio", "audio_embeds" -> "audio";
      case "video_url" -> "video";
      default -> type;
    };
  }

  private static String partField(int message, int part, String suffix) {
    return messageField(message, ".content") + "[" + part + "]" + suffix;
  }
}
