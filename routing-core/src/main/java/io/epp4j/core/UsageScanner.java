package io.epp4j.core;

import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.epp4j.api.Usage;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import org.jspecify.annotations.Nullable;

/**
 * Finds the token {@code usage} of a model server's answer while the answer streams past, chunk
 * by chunk, holding at most {@value #LIMIT} bytes of it.
 *
 * <ul>
 *   <li>Server-sent events ({@code text/event-stream}): lines are cut as they complete, at a
 *       CRLF, a LF or a CR alone (the SSE format's three line ends; a CRLF split between two
 *       chunks is one line end); every {@code data:} line that mentions {@code "usage"} is parsed and the last usage object wins
 *       (the chunk a stream with {@code stream_options.include_usage} sends before
 *       {@code data: [DONE]}; for the Responses API, {@code response.usage} of the completed
 *       event). Of a {@code data:} line longer than the limit (the Responses API's completed
 *       event repeats the whole output before its usage) the last {@value #LIMIT} bytes are kept
 *       and the object after their last {@code "usage"} key is read, as for a long JSON body;
 *       any other overlong line is skipped.
 *   <li>Anything else is taken as one JSON document: a document up to the limit is parsed whole
 *       and its top-level {@code usage} read; of a longer one the last {@value #LIMIT} bytes are
 *       kept and the object after their last {@code "usage"} key is read (servers write usage
 *       after the choices).
 * </ul>
 *
 * <p>A UTF-8 byte order mark opening the answer (its first three bytes, wherever the chunks
 * cut them) is skipped, as the SSE format ignores one at the start of a stream and JSON parsers
 * may; only that one: a mark anywhere else is the text it stands in. Without a content type the
 * first byte after it tells the format.
 *
 * <p>Chat and completion usage name {@code prompt_tokens} / {@code completion_tokens} and
 * {@code prompt_tokens_details.cached_tokens}; the Responses API names {@code input_tokens} /
 * {@code output_tokens} and {@code input_tokens_details.cached_tokens}; {@code
 * prompt_token_details} (without the s, as some servers spell it) is read too. Not thread-safe:
 * one answer, one thread at a time. Gateways feed it the answer's buffers as they pass (the
 * Spring Cloud Gateway filter, the Envoy ext_proc server) and report {@link #finish()} to the
 * decision's {@code onComplete}. A {@code gzip} or {@code deflate} answer is decoded first (see
 * {@link #UsageScanner(String, String)}).
 */
public final class UsageScanner {
  /** Most bytes of an answer kept at once: one SSE line, or a JSON body (or its tail). */
  public static final int LIMIT = 64 * 1024;
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final byte[] USAGE_KEY = "\"usage\"".getBytes(StandardCharsets.US_ASCII);
  private static final byte[] DATA = "data:".getBytes(StandardCharsets.US_ASCII);
  /** UTF-8's byte order mark, U+FEFF: skipped when it opens the answer. */
  private static final byte[] BOM = {(byte) 0xEF, (byte) 0xBB, (byte) 0xBF};

  private enum Format { UNKNOWN, SSE, JSON }

  private Format format;
  /** SSE: the current line; JSON: the body so far, then a ring of its last bytes. */
  private byte[] buf = new byte[0];
  private int len;
  /** SSE: the current line outgrew the limit and is being skipped. */
  private boolean skipping;
  /**
   * SSE: the current line is a {@code data:} line that outgrew the limit; {@code buf} is a ring
   * of its last bytes at {@code lineSeen % LIMIT}.
   */
  private boolean tailing;
  /** SSE, while {@link #tailing}: bytes of the current line seen in all. */
  private long lineSeen;
  /** JSON: bytes seen in all; past {@link #LIMIT} the buffer is a ring at {@code seen % LIMIT}. */
  private long seen;
  private boolean sawDone;
  /** SSE: the last chunk ended in a CR, so a LF opening the next one ends no further line. */
  private boolean afterCr;
  /** {@link #finish()} was called: the buffer is gone and later chunks are ignored. */
  private boolean finished;
  /** The answer's first bytes have been told from a byte order mark (skipped, or kept). */
  private boolean started;
  /** Bytes of a byte order mark matched at the answer's start so far. */
  private int bomMatched;
  private @Nullable Usage usage;

  /** Decodes a compressed answer before the scan; null for an uncompressed one. */
  private @Nullable ContentDecoder decoder;
  /** The answer's content coding is one this scanner cannot undo: nothing is read. */
  private final boolean unreadable;

  /** {@code contentType}: the answer's {@code content-type}, or null to tell by its first byte. */
  public UsageScanner(@Nullable String contentType) {
    this(contentType, null);
  }

  /**
   * {@code contentType} as above; {@code contentEncoding}: the answer's {@code content-encoding},
   * or null without one. A {@code gzip} (or {@code x-gzip}) or {@code deflate} answer is decoded
   * as it passes and its usage read from the decoded bytes (decoding stops, and the usage seen
   * so far stands, if the data is corrupt or expands more than 100 times beyond its first MiB);
   * an answer in any other coding, or in several, is not read: its usage is {@link Usage#NONE}
   * and {@link #sawDone()} stays false.
   */
  public UsageScanner(@Nullable String contentType, @Nullable String contentEncoding) {
    if (contentType == null || contentType.isBlank()) {
      format = Format.UNKNOWN;
    } else {
      format = contentType.toLowerCase(java.util.Locale.ROOT).contains("text/event-stream")
          ? Format.SSE : Format.JSON;
    }
    ContentDecoder.Encoding encoding = ContentDecoder.encoding(contentEncoding);
    unreadable = encoding == ContentDecoder.Encoding.UNSUPPORTED;
    decoder = encoding == ContentDecoder.Encoding.GZIP
        || encoding == ContentDecoder.Encoding.DEFLATE
        ? ContentDecoder.of(encoding, this::feedDecoded) : null;
  }

  /**
   * Takes the next chunk of the answer: the bytes from {@code chunk}'s position to its limit. The
   * buffer's position is left where it was.
   */
  public void feed(ByteBuffer chunk) {
    if (finished || unreadable || !chunk.hasRemaining()) {
      return;
    }
    ContentDecoder d = decoder;
    if (d != null) {
      d.feed(chunk);
    } else {
      feedDecoded(chunk);
    }
  }

  /** The answer's next bytes as the server wrote them before any content coding. */
  private void feedDecoded(ByteBuffer chunk) {
    int n = chunk.remaining();
    if (n == 0 || finished) {
      return;
    }
    if (!started) {
      int before = bomMatched;
      int i = 0;
      int p = chunk.position();
      while (bomMatched < BOM.length && i < n && chunk.get(p + i) == BOM[bomMatched]) {
        bomMatched++;
        i++;
      }
      if (bomMatched == BOM.length) {
        started = true;
        if (i == n) {
          return;
        }
        chunk = chunk.duplicate().position(chunk.position() + i); // the mark is not the answer's
      } else if (i == n) {
        return; // so far all a mark's first bytes: held until the next chunk tells
      } else {
        started = true;
        if (before > 0) {
          feedBody(ByteBuffer.wrap(BOM, 0, before)); // held bytes that were no mark after all
        }
      }
    }
    feedBody(chunk);
  }

  private void feedBody(ByteBuffer chunk) {
    if (format == Format.UNKNOWN) {
      format = firstNonBlank(chunk) == '{' ? Format.JSON : firstNonBlank(chunk) < 0
          ? Format.UNKNOWN : Format.SSE;
      if (format == Format.UNKNOWN) {
        return; // only blanks so far: nothing to keep
      }
    }
    if (format == Format.SSE) {
      feedSse(chunk);
    } else {
      feedJson(chunk);
    }
  }

  /**
   * Whether an SSE answer has sent {@code data: [DONE]}, the marker after which clients stop
   * reading: a line that says so and has ended. A last line without its line end ends with the
   * stream, so it counts once {@link #finish()} has been called; a gateway asking whether an
   * answer that broke off was whole calls {@code finish()} first. (An {@code EventSource} would
   * discard that last line, and even a terminated marker line without the blank line after it,
   * as an event never dispatched; this answers a different question, whether the server sent
   * all it meant to: the marker carries no content and its bytes are all there.)
   */
  public boolean sawDone() {
    return sawDone;
  }

  /**
   * The usage of the answer as far as it went; {@link Usage#NONE} when it carried none. Ends the
   * scan: later calls return the same usage and chunks fed afterwards are ignored.
   */
  public Usage finish() {
    if (finished) {
      Usage u = usage;
      return u == null ? Usage.NONE : u;
    }
    ContentDecoder d = decoder;
    if (d != null) {
      d.end(); // frees the inflater's native memory now rather than at collection
      decoder = null;
    }
    if (!started && bomMatched > 0) {
      started = true;
      feedBody(ByteBuffer.wrap(BOM, 0, bomMatched)); // the answer ended within what began a mark
    }
    finished = true;
    if (format == Format.SSE && tailing) {
      overlongLineEnded(); // a last line without its newline
    } else if (format == Format.SSE && len > 0 && !skipping) {
      line(buf, len); // a last line without its newline
      len = 0;
    } else if (format == Format.JSON) {
      parseJson();
    }
    buf = new byte[0];
    Usage u = usage;
    return u == null ? Usage.NONE : u;
  }

  // ------------------------------------------------------------------------------------- SSE

  private void feedSse(ByteBuffer chunk) {
    int n = chunk.remaining();
    int from = 0;
    if (afterCr) {
      afterCr = false;
      if (chunk.get(chunk.position()) == '\n') {
        from = 1; // the LF of a CRLF whose CR ended the previous chunk: that line has ended
      }
    }
    while (from < n) {
      int nl = indexOfLineEnd(chunk, from);
      int end = nl < 0 ? n : nl;
      if (tailing) {
        appendToRing(chunk, from, end - from);
      } else if (!skipping) {
        append(chunk, from, end - from);
      }
      if (nl < 0) {
        return;
      }
      if (tailing) {
        overlongLineEnded();
      } else if (!skipping) {
        line(buf, len);
      }
      len = 0;
      skipping = false;
      from = nl + 1;
      if (chunk.get(chunk.position() + nl) == '\r') {
        if (from == n) {
          afterCr = true; // a LF starting the next chunk belongs to this line end
        } else if (chunk.get(chunk.position() + from) == '\n') {
          from++;
        }
      }
    }
  }

  private void append(ByteBuffer chunk, int from, int count) {
    if (len + count > LIMIT) {
      // fill the buffer with the line's first bytes, which say whether it is data
      int fits = LIMIT - len;
      ensure(LIMIT);
      copy(chunk, from, buf, len, fits);
      if (startsWith(buf, LIMIT, DATA)) {
        tailing = true;
        lineSeen = LIMIT;
        appendToRing(chunk, from + fits, count - fits);
      } else {
        skipping = true;
      }
      len = 0;
      return;
    }
    ensure(len + count);
    copy(chunk, from, buf, len, count);
    len += count;
  }

  /** Adds bytes of an overlong data line to the ring of its last {@value #LIMIT} bytes. */
  private void appendToRing(ByteBuffer chunk, int from, int count) {
    writeRing(chunk, from, count, buf, lineSeen);
    lineSeen += count;
  }

  /**
   * Writes {@code count} bytes of the chunk from {@code from} to a ring of {@value #LIMIT} bytes
   * that has taken {@code seen} bytes so far.
   */
  private static void writeRing(ByteBuffer chunk, int from, int count, byte[] ring, long seen) {
    int skip = Math.max(0, count - LIMIT); // of more than the ring holds, only the end matters
    from += skip;
    long at = seen + skip;
    int end = from + count - skip;
    while (from < end) {
      int pos = (int) (at % LIMIT);
      int n = Math.min(end - from, LIMIT - pos);
      copy(chunk, from, ring, pos, n);
      from += n;
      at += n;
    }
  }

  private void overlongLineEnded() {
    Usage u = usageAfterLastKey(buf, lineSeen);
    if (u != null) {
      usage = u;
    }
    tailing = false;
    lineSeen = 0;
  }

  private void line(byte[] b, int n) {
    if (!startsWith(b, n, DATA)) {
      return;
    }
    int i = DATA.length;
    while (i < n && (b[i] == ' ' || b[i] == '\t')) {
      i++;
    }
    int end = n;
    while (end > i && (b[end - 1] == ' ' || b[end - 1] == '\t')) {
      end--;
    }
    if (end - i == 6 && new String(b, i, 6, StandardCharsets.US_ASCII).equals("[DONE]")) {
      sawDone = true;
      return;
    }
    if (indexOf(b, i, end, USAGE_KEY) < 0) {
      return; // most chunks: one token of text, no usage to parse
    }
    JsonNode root = parse(b, i, end - i);
    if (root != null) {
      Usage u = usageIn(root);
      if (u != null) {
        usage = u;
      }
    }
  }

  // ------------------------------------------------------------------------------------ JSON

  private void feedJson(ByteBuffer chunk) {
    int n = chunk.remaining();
    if (seen + n <= LIMIT) {
      ensure((int) (seen + n));
      copy(chunk, 0, buf, (int) seen, n);
      seen += n;
      return;
    }
    ensure(LIMIT);
    writeRing(chunk, 0, n, buf, seen);
    seen += n;
  }

  private void parseJson() {
    if (seen == 0) {
      return;
    }
    if (seen <= LIMIT) {
      JsonNode root = parse(buf, 0, (int) seen);
      Usage u = root == null ? null : usageIn(root);
      if (u != null) {
        usage = u;
      }
      return;
    }
    Usage parsed = usageAfterLastKey(buf, seen);
    if (parsed != null) {
      usage = parsed;
    }
  }

  /**
   * The usage object after the last {@code "usage"} key of a ring of the last {@value #LIMIT}
   * bytes of {@code seen} (more than {@value #LIMIT}); null when there is none. Servers write
   * usage after the output, so the last key is the document's own, not one quoted in its text
   * (where the quotes are escaped, and such an occurrence is passed over).
   */
  private static @Nullable Usage usageAfterLastKey(byte[] ring, long seen) {
    byte[] tail = new byte[LIMIT]; // the ring, oldest byte first
    int pos = (int) (seen % LIMIT);
    System.arraycopy(ring, pos, tail, 0, LIMIT - pos);
    System.arraycopy(ring, 0, tail, LIMIT - pos, pos);
    int at = lastIndexOf(tail, USAGE_KEY);
    while (at > 0 && tail[at - 1] == '\\') {
      at = lastIndexOf(tail, USAGE_KEY, at - 1);
    }
    if (at < 0) {
      return null;
    }
    int i = at + USAGE_KEY.length;
    while (i < tail.length && (tail[i] == ' ' || tail[i] == '\t' || tail[i] == '\n'
        || tail[i] == '\r' || tail[i] == ':')) {
      i++;
    }
    JsonNode u = parse(tail, i, tail.length - i);
    return u == null ? null : usageOf(u);
  }

  // ---------------------------------------------------------------------------------- shared

  /** The first JSON value in the range, or null when it is not JSON (trailing bytes ignored). */
  private static @Nullable JsonNode parse(byte[] b, int off, int n) {
    try (JsonParser p = JSON.getFactory().createParser(b, off, n)) {
      return JSON.readTree(p);
    } catch (IOException | RuntimeException e) {
      return null;
    }
  }

  /** The usage of a chunk or body: its {@code usage}, or {@code response.usage}. */
  private static @Nullable Usage usageIn(JsonNode root) {
    Usage u = usageOf(root.path("usage"));
    return u != null ? u : usageOf(root.path("response").path("usage"));
  }

  /** A usage object's counts, or null when {@code u} is not an object. */
  static @Nullable Usage usageOf(JsonNode u) {
    if (!u.isObject()) {
      return null;
    }
    int prompt = count(u, "prompt_tokens", "input_tokens");
    int completion = count(u, "completion_tokens", "output_tokens");
    JsonNode details = u.path("prompt_tokens_details");
    if (!details.isObject()) {
      details = u.path("input_tokens_details");
    }
    if (!details.isObject()) {
      details = u.path("prompt_token_details");
    }
    int cached = count(details.path("cached_tokens"));
    return new Usage(prompt, prompt > 0 ? Math.min(cached, prompt) : cached, completion);
  }

  private static int count(JsonNode u, String name, String otherName) {
    JsonNode v = u.get(name);
    if (v == null || !v.isNumber()) {
      v = u.get(otherName);
    }
    return v == null ? 0 : count(v);
  }

  /**
   * A token count: 0 for a negative number or anything but a number, fractions cut off, and a
   * count beyond {@code int} held at {@link Integer#MAX_VALUE} rather than wrapped (Jackson's
   * {@code asInt} keeps a long's low 32 bits, which turned 2^32 + 5 into 5 and 3e9 into 0).
   */
  private static int count(JsonNode v) {
    if (!v.isNumber()) {
      return 0;
    }
    if (v.canConvertToInt()) {
      return Math.max(0, v.intValue());
    }
    return v.doubleValue() > 0 ? Integer.MAX_VALUE : 0;
  }

  private void ensure(int size) {
    if (buf.length >= size) {
      return;
    }
    int grown = Math.min(LIMIT, Math.max(size, Math.max(1024, buf.length * 2)));
    byte[] bigger = new byte[grown];
    // only grows before the JSON ring wraps, so the kept bytes are the first len (SSE) or seen
    int kept = format == Format.SSE ? len : (int) seen;
    System.arraycopy(buf, 0, bigger, 0, kept);
    buf = bigger;
  }

  /** Copies {@code count} bytes from {@code from} past the chunk's position, leaving it there. */
  private static void copy(ByteBuffer chunk, int from, byte[] dst, int at, int count) {
    chunk.duplicate().position(chunk.position() + from).get(dst, at, count);
  }

  private static int firstNonBlank(ByteBuffer chunk) {
    for (int i = 0, p = chunk.position(); i < chunk.remaining(); i++) {
      byte c = chunk.get(p + i);
      if (c != ' ' && c != '\t' && c != '\r' && c != '\n') {
        return c;
      }
    }
    return -1;
  }

  /** The index of the first CR or LF at or after {@code from}, or -1. */
  private static int indexOfLineEnd(ByteBuffer s, int from) {
    for (int i = from, p = s.position(); i < s.remaining(); i++) {
      byte c = s.get(p + i);
      if (c == '\n' || c == '\r') {
        return i;
      }
    }
    return -1;
  }

  private static boolean startsWith(byte[] b, int n, byte[] prefix) {
    if (n < prefix.length) {
      return false;
    }
    for (int i = 0; i < prefix.length; i++) {
      if (b[i] != prefix[i]) {
        return false;
      }
    }
    return true;
  }

  private static int indexOf(byte[] hay, int from, int to, byte[] needle) {
    outer:
    for (int i = from; i <= to - needle.length; i++) {
      for (int j = 0; j < needle.length; j++) {
        if (hay[i + j] != needle[j]) {
          continue outer;
        }
      }
      return i;
    }
    return -1;
  }

  private static int lastIndexOf(byte[] hay, byte[] needle) {
    return lastIndexOf(hay, needle, hay.length - needle.length);
  }

  /** The last occurrence of {@code needle} in {@code hay} starting at or before {@code from}. */
  private static int lastIndexOf(byte[] hay, byte[] needle, int from) {
    outer:
    for (int i = Math.min(from, hay.length - needle.length); i >= 0; i--) {
      for (int j = 0; j < needle.length; j++) {
        if (hay[i + j] != needle[j]) {
          continue outer;
        }
      }
      return i;
    }
    return -1;
  }
}
