package io.epp4j.core;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParseException;
import com.fasterxml.jackson.core.JsonParser;
import java.io.IOException;
import java.util.Arrays;

/**
 * The compact JSON of a request's {@code tools} array, object keys in the order the client wrote
 * them, with a small cache of recent arrays. The order is kept because it is what the model
 * sees: the engine hands the template each tool's schema as parsed (Python dicts keep the order
 * of the JSON), and templates print it with {@code tojson}, which does not sort keys, so two
 * orders are two prompts. Agents send the same tool definitions with every request, and reading
 * them (a tree and a write) cost more than the rest of a small body; a byte-identical array is
 * served after one comparison of the raw bytes. One instance per parser, shared by its threads.
 */
final class ToolsReader {

  private static final int TOOLS_CACHE_SLOTS = 16;
  private static final int TOOLS_CACHE_MAX_BYTES = 64 << 10;

  private final JsonFactory factory;
  // Entries are immutable, so racy reads and writes of the slots are safe; a lost update only
  // costs a recomputation.
  private final CachedTools[] toolsCache = new CachedTools[TOOLS_CACHE_SLOTS];

  /** The raw bytes of a {@code tools} array and their compact JSON. */
  private static final class CachedTools {
    final byte[] raw;
    final String compact;

    CachedTools(byte[] raw, String compact) {
      this.raw = raw;
      this.compact = compact;
    }
  }

  /** {@code factory} re-reads a cache miss from the body with the parser's own limits. */
  ToolsReader(JsonFactory factory) {
    this.factory = factory;
  }

  /**
   * The compact JSON of the {@code tools} array at the parser's current token, keys in the
   * order given (a key given twice where it first appeared, with its last value, as the engine's
   * JSON reader keeps it). Byte-identical arrays (the common case: one client, one tool set)
   * are served from a small cache after one comparison of the raw bytes.
   */
  String toolsJson(JsonParser p, byte[] body) throws IOException {
    long start = p.currentTokenLocation().getByteOffset();
    if (start < 0) {
      return CanonicalJson.compact(CanonicalJson.readTree(p));
    }
    p.skipChildren();
    long end = p.currentTokenLocation().getByteOffset() + 1;
    int from = (int) start;
    int len = (int) (end - start);
    if (end > body.length || len < 2 || body[from] != '[' || body[from + len - 1] != ']') {
      throw new JsonParseException(p, "tools array location is inconsistent");
    }
    int slot = (len * 31 + body[from + len / 2] * 7 + body[from + len - 2]) & (TOOLS_CACHE_SLOTS - 1);
    CachedTools cached = toolsCache[slot];
    if (cached != null && Arrays.equals(cached.raw, 0, cached.raw.length, body, from, from + len)) {
      return cached.compact;
    }
    String compact;
    try (JsonParser sub = factory.createParser(body, from, len)) {
      sub.nextToken();
      compact = CanonicalJson.compact(CanonicalJson.readTree(sub));
    }
    if (len <= TOOLS_CACHE_MAX_BYTES) {
      toolsCache[slot] = new CachedTools(Arrays.copyOfRange(body, from, from + len), compact);
    }
    return compact;
  }
}
