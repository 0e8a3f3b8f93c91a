package io.epp4j.core;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.StreamReadConstraints;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import com.fasterxml.jackson.databind.cfg.JsonNodeFeature;
import com.fasterxml.jackson.databind.json.JsonMapper;
import io.epp4j.api.ChatMessage;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Result;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.UUID;
import org.jspecify.annotations.Nullable;

/**
 * Turns OpenAI {@code /v1/completions} and {@code /v1/chat/completions} bodies into
 * {@link InferenceRequest}s with a single streaming pass. Reads {@code model}, {@code prompt}
 * (text, or token IDs), {@code messages} (content as a string or an array of parts),
 * {@code tools}, {@code cache_salt}, {@code stream}, {@code max_tokens} /
 * {@code max_completion_tokens}; other fields are skipped. Errors are values naming the field;
 * nothing is thrown and no prompt text appears in a message.
 */
public final class OpenAiRequestParser {

  /** Default body size limit: 16 MiB. */
  public static final int DEFAULT_MAX_BODY_BYTES = 16 << 20;
  /** Default headers that carry the session key, tried in order. */
  public static final List<String> DEFAULT_SESSION_HEADERS = List.of("x-session-id", "x-session-token");
  /** Header carrying the request priority (negative = sheddable). */
  public static final String PRIORITY_HEADER = "x-request-priority";
  /** Header carrying the request id. */
  public static final String REQUEST_ID_HEADER = "x-request-id";

  // sorted keys, compact: the same tools or media part from two clients serialises identically
  private static final ObjectMapper CANONICAL = JsonMapper.builder()
      .configure(SerializationFeature.ORDER_MAP_ENTRIES_BY_KEYS, true)
      .configure(JsonNodeFeature.WRITE_PROPERTIES_SORTED, true)
      .build();

  private final int maxBodyBytes;
  private final List<String> sessionHeaders;
  private final JsonFactory factory;

  private OpenAiRequestParser(int maxBodyBytes, List<String> sessionHeaders) {
    this.maxBodyBytes = maxBodyBytes;
    this.sessionHeaders = sessionHeaders;
    this.factory = JsonFactory.builder()
        .streamReadConstraints(StreamReadConstraints.builder()
            .maxStringLength(Math.max(maxBodyBytes, StreamReadConstraints.DEFAULT_MAX_STRING_LEN))
            .maxNestingDepth(64)
            .build())
        .build();
  }

  /** A parser with the default size limit and session headers. */
  public static OpenAiRequestParser defaults() {
    return new OpenAiRequestParser(DEFAULT_MAX_BODY_BYTES, DEFAULT_SESSION_HEADERS);
  }

  /**
   * A parser with a body size limit and the headers that carry the session key.
   *
   * @param maxBodyBytes   bodies above this many bytes are rejected (must be > 0)
   * @param sessionHeaders header names tried in order for the session key
   */
  public static OpenAiRequestParser of(int maxBodyBytes, List<String> sessionHeaders) {
    if (maxBodyBytes <= 0) {
      throw new IllegalArgumentException("maxBodyBytes must be > 0, got " + maxBodyBytes);
    }
    List<String> lower = new ArrayList<>();
    for (String h : sessionHeaders) {
      lower.add(h.toLowerCase(Locale.ROOT));
    }
    return new OpenAiRequestParser(maxBodyBytes, List.copyOf(lower));
  }

  public int maxBodyBytes() {
    return maxBodyBytes;
  }

  /**
   * Parses a body. {@code path} selects the shape ({@code ...chat/completions} is chat, anything
   * else completions), but a body with {@code messages} is read as chat either way.
   */
  public Result<InferenceRequest> parse(String path, Map<String, String> headers, byte[] body) {
    Objects.requireNonNull(body, "body");
    if (body.length > maxBodyBytes) {
      return Result.error("request body is " + body.length + " bytes, above the limit of "
          + maxBodyBytes);
    }
    if (body.length == 0) {
      return Result.error("request body is empty");
    }
    InferenceRequest.Builder b = InferenceRequest.builder().headers(headers);
    String model = null;
    String prompt = null;
    int[] tokens = null;
    List<ChatMessage> messages = null;
    try (JsonParser p = factory.createParser(body)) {
      if (p.nextToken() != JsonToken.START_OBJECT) {
        return Result.error("request body must be a JSON object");
      }
      while (p.nextToken() == JsonToken.FIELD_NAME) {
        String field = p.currentName();
        JsonToken t = p.nextToken();
        switch (field) {
          case "model" -> {
            if (t != JsonToken.VALUE_STRING) {
              return Result.error("field 'model' must be a string");
            }
            model = p.getText();
          }
          case "prompt" -> {
            if (t == JsonToken.VALUE_STRING) {
              prompt = p.getText();
            } else if (t == JsonToken.START_ARRAY) {
              Object parsed = readPromptArray(p);
              if (parsed instanceof String err) {
                return Result.error(err);
              }
              if (parsed instanceof int[] ids) {
                tokens = ids;
              } else {
                prompt = (String) ((Object[]) parsed)[0];
              }
            } else {
              return Result.error("field 'prompt' must be a string, an array of strings or of token IDs");
            }
          }
          case "messages" -> {
            if (t != JsonToken.START_ARRAY) {
              return Result.error("field 'messages' must be an array");
            }
            messages = new ArrayList<>();
            String err = readMessages(p, messages);
            if (err != null) {
              return Result.error(err);
            }
          }
          case "tools" -> {
            if (t == JsonToken.VALUE_NULL) {
              break;
            }
            if (t != JsonToken.START_ARRAY) {
              return Result.error("field 'tools' must be an array");
            }
            JsonNode node = CANONICAL.readTree(p);
            b.toolsJson(canonical(node));
          }
          case "cache_salt" -> {
            if (t == JsonToken.VALUE_NULL) {
              break;
            }
            if (t != JsonToken.VALUE_STRING) {
              return Result.error("field 'cache_salt' must be a string");
            }
            b.cacheSalt(p.getText());
          }
          case "stream" -> {
            if (t != JsonToken.VALUE_TRUE && t != JsonToken.VALUE_FALSE && t != JsonToken.VALUE_NULL) {
              return Result.error("field 'stream' must be true or false");
            }
            b.stream(t == JsonToken.VALUE_TRUE);
          }
          case "max_tokens", "max_completion_tokens" -> {
            if (t == JsonToken.VALUE_NULL) {
              break;
            }
            if (t != JsonToken.VALUE_NUMBER_INT || p.getLongValue() < 0 || p.getLongValue() > Integer.MAX_VALUE) {
              return Result.error("field '" + field + "' must be a non-negative integer");
            }
            b.maxTokens(p.getIntValue());
          }
          default -> p.skipChildren();
        }
      }
      if (p.currentToken() != JsonToken.END_OBJECT) {
        return Result.error("request body is not a well-formed JSON object");
      }
      if (p.nextToken() != null) {
        return Result.error("request body has content after the JSON object");
      }
    } catch (JsonProcessingException e) {
      return Result.error("request body is not valid JSON: " + e.getOriginalMessage()
          + (e.getLocation() != null ? " at offset " + e.getLocation().getByteOffset() : ""));
    } catch (IOException e) {
      return Result.error("request body could not be read: " + e.getMessage());
    }
    if (model == null || model.isEmpty()) {
      return Result.error("field 'model' is required");
    }
    boolean chatPath = path != null && path.endsWith("chat/completions");
    int forms = (prompt != null ? 1 : 0) + (tokens != null ? 1 : 0) + (messages != null ? 1 : 0);
    if (forms == 0) {
      return Result.error(chatPath ? "field 'messages' is required" : "field 'prompt' is required");
    }
    if (forms > 1) {
      return Result.error("fields 'prompt' and 'messages' must not both be present");
    }
    if (messages != null && messages.isEmpty()) {
      return Result.error("field 'messages' must not be empty");
    }
    b.model(model).prompt(prompt).tokenIds(tokens);
    if (messages != null) {
      b.messages(messages);
    }
    String lowerId = null;
    String sessionKey = null;
    String priority = null;
    for (Map.Entry<String, String> h : headers.entrySet()) {
      String name = h.getKey().toLowerCase(Locale.ROOT);
      if (name.equals(REQUEST_ID_HEADER)) {
        lowerId = h.getValue();
      } else if (name.equals(PRIORITY_HEADER)) {
        priority = h.getValue();
      }
    }
    for (String sh : sessionHeaders) {
      for (Map.Entry<String, String> h : headers.entrySet()) {
        if (sessionKey == null && h.getKey().equalsIgnoreCase(sh) && !h.getValue().isEmpty()) {
          sessionKey = h.getValue();
        }
      }
    }
    if (priority != null) {
      try {
        b.priority(Integer.parseInt(priority.trim()));
      } catch (NumberFormatException e) {
        return Result.error("header '" + PRIORITY_HEADER + "' must be an integer");
      }
    }
    b.requestId(lowerId != null ? lowerId : UUID.randomUUID().toString());
    b.sessionKey(sessionKey);
    return Result.ok(b.build());
  }

  /** Returns int[] for token IDs, Object[]{String} for text, or a String error. */
  private static Object readPromptArray(JsonParser p) throws IOException {
    JsonToken t = p.nextToken();
    if (t == JsonToken.END_ARRAY) {
      return "field 'prompt' must not be an empty array";
    }
    if (t == JsonToken.VALUE_NUMBER_INT) {
      int[] ids = new int[256];
      int n = 0;
      while (t == JsonToken.VALUE_NUMBER_INT) {
        long v = p.getLongValue();
        if (v < 0 || v > Integer.MAX_VALUE) {
          return "field 'prompt' holds a token ID outside [0, 2^31)";
        }
        if (n == ids.length) {
          ids = java.util.Arrays.copyOf(ids, n * 2);
        }
        ids[n++] = (int) v;
        t = p.nextToken();
      }
      if (t != JsonToken.END_ARRAY) {
        return "field 'prompt' mixes token IDs with other values";
      }
      return java.util.Arrays.copyOf(ids, n);
    }
    if (t == JsonToken.VALUE_STRING) {
      String first = p.getText();
      if (p.nextToken() != JsonToken.END_ARRAY) {
        return "field 'prompt' holds several prompts; send one prompt per request";
      }
      return new Object[] {first};
    }
    if (t == JsonToken.START_ARRAY) {
      return "field 'prompt' holds a batch of token arrays; send one prompt per request";
    }
    return "field 'prompt' array must hold strings or token IDs";
  }

  private static @Nullable String readMessages(JsonParser p, List<ChatMessage> out) throws IOException {
    int index = 0;
    for (JsonToken t = p.nextToken(); t != JsonToken.END_ARRAY; t = p.nextToken(), index++) {
      String where = "field 'messages[" + index + "]";
      if (t != JsonToken.START_OBJECT) {
        return where + "' must be an object";
      }
      String role = null;
      StringBuilder content = new StringBuilder();
      String extra = null;
      while (p.nextToken() == JsonToken.FIELD_NAME) {
        String f = p.currentName();
        JsonToken v = p.nextToken();
        switch (f) {
          case "role" -> {
            if (v != JsonToken.VALUE_STRING) {
              return where + ".role' must be a string";
            }
            role = p.getText();
          }
          case "content" -> {
            if (v == JsonToken.VALUE_STRING) {
              content.append(p.getText());
            } else if (v == JsonToken.START_ARRAY) {
              String err = readParts(p, content, where + ".content");
              if (err != null) {
                return err;
              }
            } else if (v != JsonToken.VALUE_NULL) {
              return where + ".content' must be a string or an array of parts";
            }
          }
          case "tool_calls", "name", "tool_call_id" -> {
            JsonNode node = CANONICAL.readTree(p);
            String json = f + "=" + canonical(node);
            extra = extra == null ? json : extra + "\n" + json;
          }
          default -> p.skipChildren();
        }
      }
      if (role == null) {
        return where + ".role' is required";
      }
      if (extra != null) {
        content.append('\n').append(extra);
      }
      out.add(new ChatMessage(role, content.toString()));
    }
    return null;
  }

  private static @Nullable String readParts(JsonParser p, StringBuilder content, String where)
      throws IOException {
    int i = 0;
    for (JsonToken t = p.nextToken(); t != JsonToken.END_ARRAY; t = p.nextToken(), i++) {
      if (t != JsonToken.START_OBJECT) {
        return where + "[" + i + "]' must be an object";
      }
      JsonNode part = CANONICAL.readTree(p);
      JsonNode type = part.get("type");
      if (type == null || !type.isTextual()) {
        return where + "[" + i + "].type' is required";
      }
      if ("text".equals(type.asText())) {
        JsonNode text = part.get("text");
        if (text == null || !text.isTextual()) {
          return where + "[" + i + "].text' must be a string";
        }
        content.append(text.asText());
      } else {
        // images, audio, files: keep their identity so distinct media never look alike
        content.append(canonical(part));
      }
    }
    return null;
  }

  private static String canonical(JsonNode node) throws JsonProcessingException {
    return CANONICAL.writeValueAsString(node);
  }
}
