package io.epp4j.core;

import com.fasterxml.jackson.core.JsonLocation;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.JsonStreamContext;
import com.fasterxml.jackson.core.exc.InputCoercionException;
import com.fasterxml.jackson.core.exc.StreamConstraintsException;
import com.fasterxml.jackson.core.io.JsonEOFException;
import java.util.ArrayDeque;
import java.util.Set;
import org.jspecify.annotations.Nullable;

/**
 * The request parser's error wording: where in the body a problem is (line, column, byte offset,
 * field path) and what it is, in fixed phrases. Kept apart from the parser because none of it
 * runs for a well-formed body, and because it is the one place that must never quote the body:
 * Jackson's own messages quote the offending token, so they are mapped here, never passed on.
 */
final class RequestBodyErrors {

  private RequestBodyErrors() {}

  /**
   * {@code " at line L, column C (byte offset B)"} for the current token: type errors say where,
   * as syntax errors do. Built only when an error is reported.
   */
  static String at(JsonParser p) {
    JsonLocation loc = p.currentTokenLocation();
    return loc.getByteOffset() < 0 ? ""
        : " at " + Utf8Validator.position(loc.getLineNr(), loc.getColumnNr(), loc.getByteOffset());
  }

  /**
   * Rejects bodies that are not UTF-8: ill-formed sequences anywhere, and NUL bytes among the
   * first four, which Jackson would take as UTF-16 or UTF-32 (RFC 8259 requires UTF-8, and a
   * valid JSON text never starts with a NUL).
   */
  static @Nullable String encodingError(byte[] body) {
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
  private static final Set<String> KNOWN_FIELDS = Set.of("model", "prompt",
      "messages", "role", "content", "type", "text", "tools", "cache_salt", "stream", "max_tokens",
      "max_completion_tokens", "tool_calls", "name", "tool_call_id", "reasoning",
      "reasoning_content", "input", "instructions",
      "max_output_tokens", "add_generation_prompt", "continue_final_message",
      "chat_template_kwargs");
  private static final int MAX_PATH_SEGMENTS = 8;

  /**
   * A malformed-JSON message: what went wrong in Jackson's terms mapped to a fixed phrase, the
   * field path, and the position. Jackson's own text is not used because it quotes the body.
   */
  static String syntaxError(JsonProcessingException e) {
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
    ArrayDeque<String> segments = new ArrayDeque<>();
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
}
