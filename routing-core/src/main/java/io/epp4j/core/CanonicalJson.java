package io.epp4j.core;

import com.fasterxml.jackson.core.JsonParseException;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import com.fasterxml.jackson.databind.cfg.JsonNodeFeature;
import com.fasterxml.jackson.databind.json.JsonMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.util.Arrays;
import java.util.Iterator;

/**
 * Canonical JSON for the parts of a request whose identity matters but whose spelling does not
 * (media parts, Responses items): compact, object keys sorted, so the same value from two
 * clients serialises identically; and compact JSON in the order given, for the parts a chat
 * template prints as the client wrote them ({@code tools}). Written by hand rather than through an {@link ObjectMapper}
 * call, whose per-call lookups dominated the parse of small bodies; the mapper stays as the
 * fallback for node types the hand-written path does not handle.
 */
final class CanonicalJson {

  // sorted keys, compact: the same media part from two clients serialises identically
  private static final ObjectMapper CANONICAL = JsonMapper.builder()
      .configure(SerializationFeature.ORDER_MAP_ENTRIES_BY_KEYS, true)
      .configure(JsonNodeFeature.WRITE_PROPERTIES_SORTED, true)
      .build();

  // compact, keys in the order read: JSON a template prints as the client wrote it
  private static final ObjectMapper AS_GIVEN = new ObjectMapper();

  private CanonicalJson() {}

  /**
   * The value at the parser's current token as a tree, the same tree {@code ObjectMapper.readTree}
   * builds with default settings (ints, longs and big integers by size, other numbers as
   * doubles, a repeated key keeps its last value), without the mapper's per-call lookups.
   */
  static JsonNode readTree(JsonParser p) throws IOException {
    JsonNodeFactory f = JsonNodeFactory.instance;
    JsonToken t = p.currentToken();
    if (t == null) {
      throw new JsonParseException(p, "unexpected end of input");
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
        ArrayNode a = f.arrayNode();
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
    if (!write(node, sb, true)) {
      return CANONICAL.writeValueAsString(node);
    }
    return sb.toString();
  }

  /**
   * Compact JSON with object keys in the order the tree holds them (the order read, a key given
   * twice where it first appeared with its last value, as Python's {@code json.loads} keeps it):
   * the same text as Jackson writes by default, without the per-call lookups.
   */
  static String compact(JsonNode node) throws JsonProcessingException {
    StringBuilder sb = new StringBuilder(64);
    if (!write(node, sb, false)) {
      return AS_GIVEN.writeValueAsString(node);
    }
    return sb.toString();
  }

  /** Appends the compact form; false for node types it does not handle (binary, POJO). */
  private static boolean write(JsonNode node, StringBuilder sb, boolean sortKeys) {
    switch (node.getNodeType()) {
      case OBJECT -> {
        int n = node.size();
        String[] names = new String[n];
        int k = 0;
        for (Iterator<String> it = node.fieldNames(); it.hasNext(); ) {
          names[k++] = it.next();
        }
        if (sortKeys) {
          Arrays.sort(names, 0, k);
        }
        sb.append('{');
        for (int i = 0; i < k; i++) {
          if (i > 0) {
            sb.append(',');
          }
          appendString(names[i], sb);
          sb.append(':');
          if (!write(node.get(names[i]), sb, sortKeys)) {
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
          if (!write(node.get(i), sb, sortKeys)) {
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
