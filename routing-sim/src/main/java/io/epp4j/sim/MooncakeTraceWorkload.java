package io.epp4j.sim;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedReader;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import org.jspecify.annotations.Nullable;

/**
 * Replays a Mooncake trace (JSON lines of {@code timestamp} ms, {@code input_length},
 * {@code output_length}, {@code hash_ids}). Every hash id becomes a deterministic block of 512
 * synthetic tokens, so requests that share leading hash ids share that prefix token for token.
 * Arrival times are the timestamps multiplied by {@code timeScale}. A request longer than the
 * model's context is clipped (prompt first) and counted. Traces carry no sessions: each request
 * gets its own session key.
 */
public final class MooncakeTraceWorkload implements Workload {
  public static final String NAME = "trace";
  /** Tokens per Mooncake hash id. */
  public static final int TRACE_BLOCK_TOKENS = 512;

  /** One trace line. */
  record Entry(long timestampMs, int inputLength, int outputLength, long[] hashIds) {}

  private final Path path;
  private final List<Entry> entries;
  private final double timeScale;
  private final int maxModelLen;
  private final int blankLines;
  /** The line of the last request, the latest arrival (a trace is in time order). */
  private final int lastLine;

  private MooncakeTraceWorkload(Path path, List<Entry> entries, double timeScale, int maxModelLen,
      int blankLines, int lastLine) {
    this.path = path;
    this.entries = entries;
    this.timeScale = timeScale;
    this.maxModelLen = maxModelLen;
    this.blankLines = blankLines;
    this.lastLine = lastLine;
  }

  /** Latest arrival, in simulated nanoseconds: {@link Workload#MAX_ARRIVAL_NANOS}. */
  static final long MAX_ARRIVAL_NANOS = Workload.MAX_ARRIVAL_NANOS;

  /** Refuses a timestamp that, at this time scale, arrives past {@link #MAX_ARRIVAL_NANOS}. */
  private static void checkArrival(Path path, int line, long timestampMs, double timeScale) {
    double nanos = timestampMs * timeScale * 1e6;
    if (nanos > MAX_ARRIVAL_NANOS) {
      throw new IllegalArgumentException(String.format(Locale.ROOT,
          "%s:%d: field 'timestamp' is %d ms, which at time scale %s arrives after %.3g years;"
              + " the simulated clock holds arrivals up to %.0f years (timestamps are"
              + " milliseconds from the trace's start)",
          path, line, timestampMs, timeScale, nanos / 1e9 / SECONDS_PER_YEAR,
          MAX_ARRIVAL_NANOS / 1e9 / SECONDS_PER_YEAR));
    }
  }

  private static final double SECONDS_PER_YEAR = 365.25 * 86_400;

  /**
   * Reads a trace. Each non-blank line must be one JSON object with {@code timestamp} (whole
   * milliseconds, at least 0 and not before the previous line's), {@code input_length} (at least
   * 1), {@code output_length} (at least 1) and {@code hash_ids} (integers, at most one per
   * {@value #TRACE_BLOCK_TOKENS}-token block of the prompt); other fields are ignored. Blank lines
   * are skipped and counted ({@link #blankLines()}); a UTF-8 byte order mark that begins the file
   * is skipped; bytes that are not UTF-8 are read as U+FFFD (harmless in a field that is ignored,
   * an error naming the line in one that is read).
   *
   * @param limit at most this many requests (0 = all)
   * @throws IOException when the file cannot be read
   * @throws IllegalArgumentException naming the line and the field when a line is malformed, or
   *     when the file holds no request
   */
  public static MooncakeTraceWorkload load(Path path, int limit, double timeScale, int maxModelLen)
      throws IOException {
    if (!(timeScale > 0)) {
      throw new IllegalArgumentException("time scale must be > 0, got " + timeScale);
    }
    // a second value after the object is an error, not ignored; so is a field given twice (the
    // last one would win silently)
    ObjectMapper json = new ObjectMapper()
        .enable(com.fasterxml.jackson.databind.DeserializationFeature.FAIL_ON_TRAILING_TOKENS)
        .enable(com.fasterxml.jackson.core.JsonParser.Feature.STRICT_DUPLICATE_DETECTION);
    List<Entry> list = new ArrayList<>();
    int blank = 0;
    int previousLine = 0; // the last request's line, once all are read
    // bytes that are not UTF-8 decode to U+FFFD instead of failing the whole read ahead of the
    // line that holds them (Files.newBufferedReader reports them with no line): in a field the
    // replay ignores they do no harm, anywhere else the line's JSON is refused with its number
    try (BufferedReader in = new BufferedReader(new java.io.InputStreamReader(
        Files.newInputStream(path), StandardCharsets.UTF_8))) {
      LineReader lines = new LineReader(in, MAX_LINE_CHARS);
      String line;
      int lineNo = 0;
      long previous = 0;
      while ((limit <= 0 || list.size() < limit)) {
        line = lines.next();
        if (line == null) {
          break;
        }
        lineNo++;
        if (lineNo == 1 && line.startsWith(BYTE_ORDER_MARK)) {
          // editors and PowerShell on Windows start UTF-8 files with one; it is not the JSON's
          line = line.substring(1);
        }
        if (lines.overlong()) {
          throw new IllegalArgumentException(path + ":" + lineNo + ": line longer than "
              + MAX_LINE_CHARS + " characters; a trace line is one request's JSON object");
        }
        if (line.isBlank()) {
          blank++;
          continue;
        }
        String where = path + ":" + lineNo + ": ";
        JsonNode n;
        try {
          n = json.readTree(line);
        } catch (IOException | RuntimeException e) {
          throw new IllegalArgumentException(where + "not a JSON object (" + jsonProblem(e)
              + ")", e);
        }
        if (n == null || !n.isObject()) {
          throw new IllegalArgumentException(where + "not a JSON object");
        }
        long timestamp = longField(n, "timestamp", 0, Long.MAX_VALUE, where);
        if (timestamp < previous) {
          throw new IllegalArgumentException(where + "field 'timestamp' is " + timestamp
              + ", before line " + previousLine + "'s " + previous
              + "; a trace must be in time order");
        }
        checkArrival(path, lineNo, timestamp, timeScale);
        int input = (int) longField(n, "input_length", 1, Integer.MAX_VALUE, where);
        int output = (int) longField(n, "output_length", 1, Integer.MAX_VALUE, where);
        JsonNode ids = n.get("hash_ids");
        if (ids == null || ids.isNull()) {
          throw new IllegalArgumentException(where + "field 'hash_ids' is missing");
        }
        if (!ids.isArray()) {
          throw new IllegalArgumentException(where + "field 'hash_ids' must be an array of"
              + " integers");
        }
        long blocks = (input + (long) TRACE_BLOCK_TOKENS - 1) / TRACE_BLOCK_TOKENS;
        if (ids.size() > blocks) {
          // ids past the prompt name blocks no request holds
          throw new IllegalArgumentException(where + "field 'hash_ids' has " + ids.size()
              + " ids, more than the " + blocks + " blocks of " + TRACE_BLOCK_TOKENS
              + " tokens that input_length " + input + " makes");
        }
        long[] h = new long[ids.size()];
        for (int i = 0; i < h.length; i++) {
          JsonNode id = ids.get(i);
          if (!id.isIntegralNumber() || !id.canConvertToLong()) {
            throw new IllegalArgumentException(where + "field 'hash_ids' holds " + id
                + " at index " + i + "; ids are 64-bit integers");
          }
          h[i] = id.asLong();
        }
        list.add(new Entry(timestamp, input, output, h));
        previous = timestamp;
        previousLine = lineNo;
      }
    }
    if (list.isEmpty()) {
      throw new IllegalArgumentException(path + ": no requests (the file is empty or holds only"
          + " blank lines)");
    }
    return new MooncakeTraceWorkload(path, List.copyOf(list), timeScale, maxModelLen, blank,
        previousLine);
  }

  /** U+FEFF, which a UTF-8 file may begin with; skipped there. */
  private static final String BYTE_ORDER_MARK = "\uFEFF";

  /**
   * Longest line read, in characters: a request of the longest context any model serves (a few
   * million tokens) names a few thousand 512-token blocks, some tens of KB of JSON. A longer line
   * (a file that is not a trace, one without line ends) stops the run instead of being held whole.
   */
  static final int MAX_LINE_CHARS = 4 << 20;

  /**
   * Lines of a reader, each held only up to a bound. A longer line ends the reading: it is
   * returned cut at the bound, {@link #overlong()} says so, and nothing after it is read (its rest
   * may never end: /dev/zero, a FIFO, a file without line ends). Lines end at LF, CRLF or CR, as
   * {@link BufferedReader}'s do.
   */
  static final class LineReader {
    private final java.io.Reader in;
    private final int max;
    private final char[] buf = new char[8192];
    private int pos;
    private int lim;
    private boolean overlong;
    private boolean afterCr;

    LineReader(java.io.Reader in, int max) {
      this.in = in;
      this.max = max;
    }

    /**
     * Whether the line {@link #next()} returned last was longer than the bound (and cut); the
     * reading ends there.
     */
    boolean overlong() {
      return overlong;
    }

    /**
     * The next line without its line end (cut at the bound), or null at the end.
     *
     * @throws IllegalStateException after a line longer than the bound (its end was not looked
     *     for)
     */
    @Nullable String next() throws IOException {
      if (overlong) {
        throw new IllegalStateException("a line longer than " + max + " characters ended the"
            + " reading");
      }
      StringBuilder line = new StringBuilder();
      boolean any = false;
      while (true) {
        if (pos == lim) {
          lim = in.read(buf, 0, buf.length);
          pos = 0;
          if (lim <= 0) {
            lim = 0;
            return any ? line.toString() : null;
          }
        }
        if (afterCr) {
          afterCr = false;
          if (buf[pos] == '\n') {
            pos++; // the LF of a CRLF
            continue;
          }
        }
        any = true;
        int start = pos;
        while (pos < lim && buf[pos] != '\n' && buf[pos] != '\r') {
          pos++;
        }
        int room = max - line.length();
        if (pos - start > room) {
          // no reading on to find the line's end: there may be none
          overlong = true;
          return line.append(buf, start, room).toString();
        }
        line.append(buf, start, pos - start);
        if (pos < lim) {
          afterCr = buf[pos] == '\r';
          pos++;
          return line.toString();
        }
      }
    }
  }

  /** A required whole-number field in {@code [min, max]}. */
  private static long longField(JsonNode n, String field, long min, long max, String where) {
    JsonNode v = n.get(field);
    if (v == null || v.isNull()) {
      throw new IllegalArgumentException(where + "field '" + field + "' is missing");
    }
    if (!v.isIntegralNumber() || !v.canConvertToLong()) {
      throw new IllegalArgumentException(where + "field '" + field + "' must be a whole number"
          + (field.equals("timestamp") ? " of milliseconds" : "") + ", got " + abbreviate(v));
    }
    long x = v.asLong();
    if (x < min || x > max) {
      throw new IllegalArgumentException(where + "field '" + field + "' must be in [" + min
          + ", " + max + "], got " + x);
    }
    return x;
  }

  private static String abbreviate(JsonNode v) {
    String t = v.toString();
    return t.length() > 40 ? t.substring(0, 40) + "..." : t;
  }

  /**
   * What is wrong with a line's JSON, in the trace's terms: the column, and the parser's words
   * without its own internals (the class a value was bound to, the feature that would allow it,
   * a source that says it is redacted).
   */
  static String jsonProblem(Exception e) {
    if (!(e instanceof com.fasterxml.jackson.core.JsonProcessingException j)) {
      return firstLine(e.getMessage());
    }
    String column = j.getLocation() == null || j.getLocation().getColumnNr() < 1 ? ""
        : "column " + j.getLocation().getColumnNr() + ": ";
    String m = firstLine(j.getOriginalMessage());
    if (m.startsWith("Trailing token")) {
      return column + "more JSON after the object; a line holds one request";
    }
    m = m.replaceAll("\\[Source: .*?line: \\d+, column: (\\d+)\\]", "column $1")
        .replaceAll(" \\(bound as `[^`]*`\\)", "")
        .replaceAll(": enable `[^`]*` to allow", "")
        .replaceAll(": not allowed as per `[^`]*`", "");
    return column + m;
  }

  private static String firstLine(@Nullable String message) {
    if (message == null) {
      return "unreadable";
    }
    int nl = message.indexOf('\n');
    return nl < 0 ? message : message.substring(0, nl);
  }

  /** Blank lines the file held (skipped), up to the last request read. */
  int blankLines() {
    return blankLines;
  }

  @Override
  public String name() {
    return NAME;
  }

  @Override
  public java.util.Map<String, Object> parameters() {
    java.util.Map<String, Object> m = new java.util.LinkedHashMap<>();
    m.put("trace", "mooncake:" + path);
    m.put("requests", entries.size());
    m.put("timeScale", timeScale);
    m.put("maxModelLen", maxModelLen);
    return m;
  }

  /**
   * The same requests arriving {@code level} times as fast: timestamps divided by
   * {@code level}.
   *
   * @throws IllegalArgumentException naming the last line when, that much slower, it would arrive
   *     past the simulated clock's range ({@link #MAX_ARRIVAL_NANOS})
   */
  @Override
  public MooncakeTraceWorkload atLoad(double level) {
    checkArrival(path, lastLine, entries.get(entries.size() - 1).timestampMs(),
        timeScale / level);
    return new MooncakeTraceWorkload(path, entries, timeScale / level, maxModelLen, blankLines,
        lastLine);
  }

  /**
   * From the hash ids, not the tokens: a request's leading blocks whose id appeared in an earlier
   * request hit (each covers {@value #TRACE_BLOCK_TOKENS} tokens, the last one what is left of
   * the prompt). vLLM's rules are approximated on the sum: rounded down to whole
   * {@code blockSize}-token blocks and at most {@code prompt - 1} tokens, with prompts clipped to
   * the context as the replay clips them. Output blocks are not counted (Mooncake ids cover the
   * input only). The context is the one the trace was loaded with ({@code contextTokens} is not
   * read): the replay clips to it.
   */
  @Override
  public double hitRateCeiling(long seed, int blockSize, int contextTokens) {
    java.util.Set<Long> seen = new java.util.HashSet<>();
    long queried = 0;
    long hit = 0;
    for (Entry e : entries) {
      int output = Math.min(e.outputLength(), maxModelLen - 1);
      int prompt = Math.min(e.inputLength(), maxModelLen - output);
      long tokens = 0;
      boolean prefix = true;
      for (int b = 0; b < e.hashIds().length; b++) {
        boolean before = !seen.add(e.hashIds()[b]);
        long pos = (long) b * TRACE_BLOCK_TOKENS;
        if (prefix && before && pos < prompt) {
          tokens += Math.min(TRACE_BLOCK_TOKENS, prompt - pos);
        } else {
          prefix = false;
        }
      }
      long capped = Math.min(tokens, prompt - 1);
      hit += capped / blockSize * blockSize;
      queried += prompt;
    }
    return queried == 0 ? 0 : hit / (double) queried;
  }

  /**
   * How far apart two uses of a block are counts requests, not seconds, and a prefix cache
   * evicts by allocation, not by age: the arrival rate does not move a trace's working set past
   * the cache, so there is no crossover ({@code NaN}).
   */
  @Override
  public double capacityCrossover(HardwareProfile profile, int replicas) {
    return Double.NaN;
  }

  @Override
  public String crossoverNote(HardwareProfile profile, int replicas) {
    return "KV capacity crossover: none (reuse distance counts requests, not seconds; the"
        + " arrival rate does not change it)";
  }

  int size() {
    return entries.size();
  }

  @Override
  public String describe(HardwareProfile profile, int replicas) {
    long input = 0;
    long output = 0;
    java.util.Set<Long> unique = new java.util.HashSet<>();
    long blocks = 0;
    for (Entry e : entries) {
      input += e.inputLength();
      output += e.outputLength();
      blocks += e.hashIds().length;
      for (long h : e.hashIds()) {
        unique.add(h);
      }
    }
    double span = entries.get(entries.size() - 1).timestampMs() / 1000.0 * timeScale;
    return String.format(Locale.ROOT,
        "Mooncake trace %s: %d requests over %.0f s (time scale %.2f), mean input %.0f tokens,"
            + " mean output %.0f; %d of %d 512-token blocks are distinct.%n"
            + "KV cache: %,d tokens per replica, %,d in the cluster; context %,d tokens.",
        path.getFileName(), entries.size(), span, timeScale, input / (double) entries.size(),
        output / (double) entries.size(), unique.size(), blocks, profile.kvTokensPerReplica(),
        profile.kvTokensPerReplica() * replicas, maxModelLen);
  }

  @Override
  public Run start(long seed) {
    return new TraceRun(seed);
  }

  private final class TraceRun implements Run {
    private final long seed;
    private int clipped;

    TraceRun(long seed) {
      this.seed = seed;
    }

    @Override
    public int totalRequests() {
      return entries.size();
    }

    @Override
    public void begin(Submitter submitter) {
      for (int i = 0; i < entries.size(); i++) {
        Entry e = entries.get(i);
        int output = Math.min(e.outputLength(), maxModelLen - 1);
        int prompt = Math.min(e.inputLength(), maxModelLen - output);
        boolean cut = prompt < e.inputLength() || output < e.outputLength();
        if (cut) {
          clipped++;
        }
        long key = SyntheticTokens.key(seed, 5, i);
        long[] ids = e.hashIds();
        submitter.submit(Math.round(e.timestampMs() * timeScale * 1e6),
            new RequestSpec("trace-" + i, "trace-" + i, prompt, output,
                () -> tokens(ids, prompt, output, key), cut, i));
      }
    }

    @Override
    public void onFinished(RequestSpec spec, long nowNanos, Submitter submitter) {}

    @Override
    public int clippedRequests() {
      return clipped;
    }
  }

  /** Prompt tokens from the hash-id blocks (request-unique tokens past the last one), then output. */
  static int[] tokens(long[] hashIds, int prompt, int output, long requestKey) {
    int[] t = new int[prompt + output];
    int pos = 0;
    for (int b = 0; b < hashIds.length && pos < prompt; b++) {
      int len = Math.min(TRACE_BLOCK_TOKENS, prompt - pos);
      SyntheticTokens.fill(SyntheticTokens.key(0x7ace, hashIds[b]), t, pos, len);
      pos += len;
    }
    SyntheticTokens.fill(requestKey, t, pos, prompt + output - pos);
    return t;
  }
}
