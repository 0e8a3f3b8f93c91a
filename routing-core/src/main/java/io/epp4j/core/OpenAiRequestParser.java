package io.epp4j.core;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonLocation;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.JsonStreamContext;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.StreamReadConstraints;
import com.fasterxml.jackson.core.exc.InputCoercionException;
import com.fasterxml.jackson.core.exc.StreamConstraintsException;
import com.fasterxml.jackson.core.io.JsonEOFException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import com.fasterxml.jackson.databind.cfg.JsonNodeFeature;
import com.fasterxml.jackson.databind.json.JsonMapper;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
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
 * {@code max_completion_tokens}; other fields are skipped. Errors are values naming the field
 * and, for malformed JSON or UTF-8 or a value of the wrong type, the position; nothing is thrown
 * and no byte of the body is quoted in a message (Jackson's own messages quote the offending
 * token, so they are never passed on). Header entries with a null name or value count as absent.
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

  private static final int TOOLS_CACHE_SLOTS = 16;
  private static final int TOOLS_CACHE_MAX_BYTES = 64 << 10;

  private final int maxBodyBytes;
  private final List<String> sessionHeaders;
  private final JsonFactory factory;
  // Agents send the same tool definitions with every request; canonicalising them (a tree and a
  // sorted write) cost more than the rest of a small body. Entries are immutable, so racy
  // reads and writes of the slots are safe; a lost update only costs a recomputation.
  private final CachedTools[] toolsCache = new CachedTools[TOOLS_CACHE_SLOTS];

  /** The raw bytes of a {@code tools} array and their canonical JSON. */
  private static final class CachedTools {
    final byte[] raw;
    final String canonical;

    CachedTools(byte[] raw, String canonical) {
      this.raw = raw;
      this.canonical = canonical;
    }
  }

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
    String encodingError = encodingError(body);
    if (encodingError != null) {
      return Result.error(encodingError);
    }
    InferenceRequest.Builder b = InferenceRequest.builder();
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
              return Result.error("field 'model' must be a string" + at(p));
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
              return Result.error("field 'prompt' must be a string, an array of strings or of token IDs" + at(p));
            }
          }
          case "messages" -> {
            if (t != JsonToken.START_ARRAY) {
              return Result.error("field 'messages' must be an array" + at(p));
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
              return Result.error("field 'tools' must be an array" + at(p));
            }
            b.toolsJson(toolsJson(p, body));
          }
          case "cache_salt" -> {
            if (t == JsonToken.VALUE_NULL) {
              break;
            }
            if (t != JsonToken.VALUE_STRING) {
              return Result.error("field 'cache_salt' must be a string" + at(p));
            }
            b.cacheSalt(p.getText());
          }
          case "stream" -> {
            if (t != JsonToken.VALUE_TRUE && t != JsonToken.VALUE_FALSE && t != JsonToken.VALUE_NULL) {
              return Result.error("field 'stream' must be true or false" + at(p));
            }
            b.stream(t == JsonToken.VALUE_TRUE);
          }
          case "max_tokens", "max_completion_tokens" -> {
            if (t == JsonToken.VALUE_NULL) {
              break;
            }
            if (!isIntInRange(p, t)) {
              return Result.error("field '" + field + "' must be a non-negative integer" + at(p));
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
      return Result.error(syntaxError(e));
    } catch (IOException e) {
      // not reachable for a byte array that passed the encoding check; never quote the message
      return Result.error("request body could not be read (" + e.getClass().getSimpleName() + ")");
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
    boolean nulls = false;
    for (Map.Entry<String, String> h : headers.entrySet()) {
      if (h.getKey() == null || h.getValue() == null) {
        nulls = true;
        continue;
      }
      String name = h.getKey().toLowerCase(Locale.ROOT);
      if (name.equals(REQUEST_ID_HEADER)) {
        lowerId = h.getValue();
      } else if (name.equals(PRIORITY_HEADER)) {
        priority = h.getValue();
      }
    }
    if (nulls) {
      // some servlet containers and hand-built maps hold null values; they mean "not sent"
      Map<String, String> present = new java.util.HashMap<>();
      headers.forEach((k, v) -> {
        if (k != null && v != null) {
          present.put(k, v);
        }
      });
      headers = present;
    }
    b.headers(headers);
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

  /**
   * {@code " at line L, column C (byte offset B)"} for the current token: type errors say where,
   * as syntax errors do. Built only when an error is reported.
   */
  private static String at(JsonParser p) {
    JsonLocation loc = p.currentTokenLocation();
    return loc.getByteOffset() < 0 ? ""
        : " at " + Utf8Validator.position(loc.getLineNr(), loc.getColumnNr(), loc.getByteOffset());
  }

  /**
   * True for an integer in [0, 2^31). Asks for the number type first: reading a value beyond
   * long as a long throws, and Jackson's message for that quotes the number.
   */
  private static boolean isIntInRange(JsonParser p, JsonToken t) throws IOException {
    if (t != JsonToken.VALUE_NUMBER_INT) {
      return false;
    }
    JsonParser.NumberType type = p.getNumberType();
    if (type == JsonParser.NumberType.INT) {
      return p.getIntValue() >= 0;
    }
    return type == JsonParser.NumberType.LONG && p.getLongValue() >= 0 && p.getLongValue() <= Integer.MAX_VALUE;
  }

  /**
   * Rejects bodies that are not UTF-8: ill-formed sequences anywhere, and NUL bytes among the
   * first four, which Jackson would take as UTF-16 or UTF-32 (RFC 8259 requires UTF-8, and a
   * valid JSON text never starts with a NUL).
   */
  private static @Nullable String encodingError(byte[] body) {
    for (int i = 0; i < 4 && i < body.length; i++) {
      if (body[i] == 0) {
        return "request body is not valid UTF-8 JSON: NUL byte at " + Utf8Validator.position(body, i);
      }
    }
    int bad = Utf8Validator.firstInvalid(body);
    if (bad < 0) {
      return null;
    }
    return "request body is not valid UTF-8: " + Utf8Validator.problem(body, bad) + " at "
        + Utf8Validator.position(body, bad);
  }

  /** Field names the parser reads; any other name in an error's path is shown as {@code *}. */
  private static final java.util.Set<String> KNOWN_FIELDS = java.util.Set.of("model", "prompt",
      "messages", "role", "content", "type", "text", "tools", "cache_salt", "stream", "max_tokens",
      "max_completion_tokens", "tool_calls", "name", "tool_call_id");
  private static final int MAX_PATH_SEGMENTS = 8;

  /**
   * A malformed-JSON message: what went wrong in Jackson's terms mapped to a fixed phrase, the
   * field path, and the position. Jackson's own text is not used because it quotes the body.
   */
  private static String syntaxError(JsonProcessingException e) {
    StringBuilder sb = new StringBuilder("request body is not valid JSON: ").append(describe(e));
    Object processor = e.getProcessor();
    if (processor instanceof JsonParser p) {
      String path = fieldPath(p.getParsingContext());
      if (!path.isEmpty()) {
        sb.append(" near field '").append(path).append('\'');
      }
    }
    JsonLocation loc = e.getLocation();
    if (loc != null && loc.getByteOffset() >= 0) {
      sb.append(" at ").append(Utf8Validator.position(loc.getLineNr(), loc.getColumnNr(), loc.getByteOffset()));
    }
    return sb.toString();
  }

  private static String describe(JsonProcessingException e) {
    if (e instanceof JsonEOFException) {
      return "unexpected end of input";
    }
    if (e instanceof InputCoercionException) {
      return "number out of range";
    }
    String m = String.valueOf(e.getOriginalMessage());
    if (e instanceof StreamConstraintsException) {
      return m.startsWith("Document nesting depth") ? "nested deeper than 64 levels"
          : m.startsWith("Number value length") ? "number too long"
          : m.startsWith("String value length") ? "string too long"
          : m.startsWith("Name length") ? "field name too long"
          : "a parser limit was exceeded";
    }
    if (m.startsWith("Unrecognized token")) {
      return "unrecognized token";
    }
    if (m.startsWith("Unexpected character")) {
      return "unexpected character";
    }
    if (m.startsWith("Unexpected close marker")) {
      return "unexpected closing bracket";
    }
    if (m.startsWith("Illegal unquoted character")) {
      return "control character in a string";
    }
    if (m.startsWith("Unrecognized character escape")) {
      return "invalid escape sequence";
    }
    if (m.startsWith("Invalid numeric value") || m.startsWith("Non-standard token")
        || m.startsWith("Leading zeroes")) {
      return "invalid number";
    }
    if (m.startsWith("Unexpected end-of-input") || m.startsWith("unexpected end of input")) {
      return "unexpected end of input";
    }
    return "malformed JSON";
  }

  /** {@code messages[1].content[0].text}: known names, array indexes, {@code *} for other names. */
  private static String fieldPath(@Nullable JsonStreamContext ctx) {
    java.util.ArrayDeque<String> segments = new java.util.ArrayDeque<>();
    for (JsonStreamContext c = ctx; c != null && !c.inRoot(); c = c.getParent()) {
      if (c.inArray()) {
        segments.addFirst(c.getCurrentIndex() >= 0 ? "[" + c.getCurrentIndex() + "]" : "");
      } else if (c.getCurrentName() != null) {
        String name = c.getCurrentName();
        segments.addFirst(KNOWN_FIELDS.contains(name) ? name : "*");
      }
    }
    StringBuilder sb = new StringBuilder();
    int n = 0;
    for (String s : segments) {
      if (n++ == MAX_PATH_SEGMENTS) {
        sb.append("...");
        break;
      }
      if (sb.length() > 0 && !s.startsWith("[") && !s.isEmpty()) {
        sb.append('.');
      }
      sb.append(s);
    }
    return sb.toString();
  }

  /** Returns int[] for token IDs, Object[]{String} for text, or a String error. */
  private static Object readPromptArray(JsonParser p) throws IOException {
    JsonToken t = p.nextToken();
    if (t == JsonToken.END_ARRAY) {
      return "field 'prompt' must not be an empty array" + at(p);
    }
    if (t == JsonToken.VALUE_NUMBER_INT) {
      int[] ids = new int[256];
      int n = 0;
      while (t == JsonToken.VALUE_NUMBER_INT) {
        if (!isIntInRange(p, t)) {
          return "field 'prompt[" + n + "]' holds a token ID outside [0, 2^31)" + at(p);
        }
        if (n == ids.length) {
          ids = java.util.Arrays.copyOf(ids, n * 2);
        }
        ids[n++] = p.getIntValue();
        t = p.nextToken();
      }
      if (t != JsonToken.END_ARRAY) {
        return "field 'prompt[" + n + "]' mixes token IDs with other values" + at(p);
      }
      return java.util.Arrays.copyOf(ids, n);
    }
    if (t == JsonToken.VALUE_STRING) {
      String first = p.getText();
      if (p.nextToken() != JsonToken.END_ARRAY) {
        return "field 'prompt' holds several prompts; send one prompt per request" + at(p);
      }
      return new Object[] {first};
    }
    if (t == JsonToken.START_ARRAY) {
      return "field 'prompt' holds a batch of token arrays; send one prompt per request" + at(p);
    }
    return "field 'prompt[0]' must be a string or a token ID" + at(p);
  }

  private static @Nullable String readMessages(JsonParser p, List<ChatMessage> out) throws IOException {
    int index = 0;
    for (JsonToken t = p.nextToken(); t != JsonToken.END_ARRAY; t = p.nextToken(), index++) {
      if (t != JsonToken.START_OBJECT) {
        return messageField(index, "") + "' must be an object" + at(p);
      }
      String role = null;
      // the common case, one string content, is kept as parsed; a builder only for parts
      String text = null;
      StringBuilder content = null;
      String extra = null;
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
            if (v == JsonToken.VALUE_STRING) {
              String value = p.getText();
              if (text == null && content == null) {
                text = value;
              } else {
                content = append(content, text).append(value);
                text = null;
              }
            } else if (v == JsonToken.START_ARRAY) {
              content = append(content, text);
              text = null;
              String err = readParts(p, content, index);
              if (err != null) {
                return err;
              }
            } else if (v != JsonToken.VALUE_NULL) {
              return messageField(index, ".content") + "' must be a string or an array of parts" + at(p);
            }
          }
          case "tool_calls", "name", "tool_call_id" -> {
            JsonNode node = readTree(p);
            String json = f + "=" + canonical(node);
            extra = extra == null ? json : extra + "\n" + json;
          }
          default -> p.skipChildren();
        }
      }
      if (role == null) {
        return messageField(index, ".role") + "' is required";
      }
      if (extra != null) {
        content = append(content, text).append('\n').append(extra);
        text = null;
      }
      out.add(new ChatMessage(role, text != null ? text : content != null ? content.toString() : ""));
    }
    return null;
  }

  private static StringBuilder append(@Nullable StringBuilder sb, @Nullable String text) {
    StringBuilder out = sb != null ? sb : new StringBuilder();
    return text != null ? out.append(text) : out;
  }

  /** {@code field 'messages[i]<suffix>}, built only when an error is reported. */
  private static String messageField(int index, String suffix) {
    return "field 'messages[" + index + "]" + suffix;
  }

  /**
   * Reads a content array. Text parts ({@code type} and {@code text} strings only) are read from
   * the stream; any other part is read as a tree and kept as canonical JSON.
   */
  private static @Nullable String readParts(JsonParser p, StringBuilder content, int message)
      throws IOException {
    int i = 0;
    for (JsonToken t = p.nextToken(); t != JsonToken.END_ARRAY; t = p.nextToken(), i++) {
      if (t != JsonToken.START_OBJECT) {
        return partField(message, i, "") + "' must be an object" + at(p);
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
        other.set(f, readTree(p));
      }
      if (other == null) {
        if (type == null) {
          return partField(message, i, ".type") + "' is required";
        }
        if (type.equals("text")) {
          if (text == null) {
            return partField(message, i, ".text") + "' must be a string";
          }
          content.append(text);
          continue;
        }
        other = JsonNodeFactory.instance.objectNode();
        other.put("type", type);
        if (text != null) {
          other.put("text", text);
        }
      }
      String err = appendPart(other, content, message, i);
      if (err != null) {
        return err;
      }
    }
    return null;
  }

  private static @Nullable String appendPart(JsonNode part, StringBuilder content, int message,
      int i) throws JsonProcessingException {
    JsonNode type = part.get("type");
    if (type == null || !type.isTextual()) {
      return partField(message, i, ".type") + "' is required";
    }
    if ("text".equals(type.asText())) {
      JsonNode text = part.get("text");
      if (text == null || !text.isTextual()) {
        return partField(message, i, ".text") + "' must be a string";
      }
      content.append(text.asText());
    } else {
      // images, audio, files: keep their identity so distinct media never look alike
      content.append(canonical(part));
    }
    return null;
  }

  private static String partField(int message, int part, String suffix) {
    return messageField(message, ".content") + "[" + part + "]" + suffix;
  }

  /**
   * The canonical JSON of the {@code tools} array at the parser's current token. Byte-identical
   * arrays (the common case: one client, one tool set) are served from a small cache after one
   * comparison of the raw bytes.
   */
  private String toolsJson(JsonParser p, byte[] body) throws IOException {
    long start = p.currentTokenLocation().getByteOffset();
    if (start < 0) {
      return canonical(readTree(p));
    }
    p.skipChildren();
    long end = p.currentTokenLocation().getByteOffset() + 1;
    int from = (int) start;
    int len = (int) (end - start);
    if (end > body.length || len < 2 || body[from] != '[' || body[from + len - 1] != ']') {
      throw new com.fasterxml.jackson.core.JsonParseException(p, "tools array location is inconsistent");
    }
    int slot = (len * 31 + body[from + len / 2] * 7 + body[from + len - 2]) & (TOOLS_CACHE_SLOTS - 1);
    CachedTools cached = toolsCache[slot];
    if (cached != null && java.util.Arrays.equals(cached.raw, 0, cached.raw.length, body, from, from + len)) {
      return cached.canonical;
    }
    String canonical;
    try (JsonParser sub = factory.createParser(body, from, len)) {
      sub.nextToken();
      canonical = canonical(readTree(sub));
    }
    if (len <= TOOLS_CACHE_MAX_BYTES) {
      toolsCache[slot] = new CachedTools(java.util.Arrays.copyOfRange(body, from, from + len), canonical);
    }
    return canonical;
  }

  /**
   * The value at the parser's current token as a tree, the same tree {@code ObjectMapper.readTree}
   * builds with default settings (ints, longs and big integers by size, other numbers as
   * doubles, a repeated key keeps its last value), without the mapper's per-call lookups.
   */
  static JsonNode readTree(JsonParser p) throws IOException {
    JsonNodeFactory f = JsonNodeFactory.instance;
    JsonToken t = p.currentToken();
    if (t == null) {
      throw new com.fasterxml.jackson.core.JsonParseException(p, "unexpected end of input");
    }
    switch (t) {
      case START_OBJECT: {
        ObjectNode o = f.objectNode();
        while (p.nextToken() == JsonToken.FIELD_NAME) {
          String name = p.currentName();
          p.nextToken();
          o.set(name, readTree(p));
        }
        return o;
      }
      case START_ARRAY: {
        com.fasterxml.jackson.databind.node.ArrayNode a = f.arrayNode();
        while (p.nextToken() != JsonToken.END_ARRAY) {
          a.add(readTree(p));
        }
        return a;
      }
      case VALUE_STRING:
        return f.textNode(p.getText());
      case VALUE_NUMBER_INT:
        switch (p.getNumberType()) {
          case INT:
            return f.numberNode(p.getIntValue());
          case LONG:
            return f.numberNode(p.getLongValue());
          default:
            return f.numberNode(p.getBigIntegerValue());
        }
      case VALUE_NUMBER_FLOAT:
        return f.numberNode(p.getDoubleValue());
      case VALUE_TRUE:
        return f.booleanNode(true);
      case VALUE_FALSE:
        return f.booleanNode(false);
      case VALUE_NULL:
        return f.nullNode();
      default:
        // embedded objects and the like never come out of a JSON text parser
        return CANONICAL.readTree(p);
    }
  }

  /**
   * Compact JSON with object keys sorted, the same text as Jackson writes with sorted keys
   * ({@code CANONICAL.writeValueAsString}) but without a generator and serializer lookup per
   * call, which dominated the parse of small bodies.
   */
  static String canonical(JsonNode node) throws JsonProcessingException {
    StringBuilder sb = new StringBuilder(64);
    if (!writeCanonical(node, sb)) {
      return CANONICAL.writeValueAsString(node);
    }
    return sb.toString();
  }

  /** Appends the canonical form; false for node types it does not handle (binary, POJO). */
  private static boolean writeCanonical(JsonNode node, StringBuilder sb) {
    switch (node.getNodeType()) {
      case OBJECT -> {
        int n = node.size();
        String[] names = new String[n];
        int k = 0;
        for (java.util.Iterator<String> it = node.fieldNames(); it.hasNext(); ) {
          names[k++] = it.next();
        }
        java.util.Arrays.sort(names, 0, k);
        sb.append('{');
        for (int i = 0; i < k; i++) {
          if (i > 0) {
            sb.append(',');
          }
          appendString(names[i], sb);
          sb.append(':');
          if (!writeCanonical(node.get(names[i]), sb)) {
            return false;
          }
        }
        sb.append('}');
        return true;
      }
      case ARRAY -> {
        sb.append('[');
        for (int i = 0, n = node.size(); i < n; i++) {
          if (i > 0) {
            sb.append(',');
          }
          if (!writeCanonical(node.get(i), sb)) {
            return false;
          }
        }
        sb.append(']');
        return true;
      }
      case STRING -> {
        appendString(node.textValue(), sb);
        return true;
      }
      case BOOLEAN -> {
        sb.append(node.booleanValue());
        return true;
      }
      case NULL -> {
        sb.append("null");
        return true;
      }
      case NUMBER -> {
        if (node.isInt() || node.isLong()) {
          sb.append(node.longValue());
          return true;
        }
        return false;
      }
      default -> {
        return false;
      }
    }
  }

  private static final char[] HEX = "0123456789ABCDEF".toCharArray();

  /** A JSON string as Jackson writes it by default: short escapes, other controls in hexadecimal. */
  private static void appendString(String s, StringBuilder sb) {
    sb.append('"');
    int from = 0;
    for (int i = 0, n = s.length(); i < n; i++) {
      char c = s.charAt(i);
      if (c >= 0x20 && c != '"' && c != '\\') {
        continue;
      }
      sb.append(s, from, i);
      from = i + 1;
      switch (c) {
        case '"' -> sb.append("\\\"");
        case '\\' -> sb.append("\\\\");
        case '\n' -> sb.append("\\n");
        case '\r' -> sb.append("\\r");
        case '\t' -> sb.append("\\t");
        case '\b' -> sb.append("\\b");
        case '\f' -> sb.append("\\f");
        default -> sb.append("\\u00").append(HEX[c >> 4]).append(HEX[c & 0xF]);
      }
    }
    sb.append(s, from, s.length()).append('"');
  }
}
