package io.epp4j.sim;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.net.ConnectException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpConnectTimeoutException;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.net.http.HttpTimeoutException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.CompletionException;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Flow;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.HdrHistogram.Histogram;
import org.jspecify.annotations.Nullable;

/**
 * Replays a simulator {@link Workload} against an OpenAI-compatible base URL over HTTP and
 * measures what a client sees: time to first token, time between tokens, end-to-end latency,
 * the prompt tokens the server reports as cached ({@code usage.prompt_tokens_details
 * .cached_tokens}), and every failure by kind. Requests are {@code POST /v1/completions} with the
 * workload's token IDs as the prompt, streamed with {@code stream_options.include_usage}, the
 * session key in {@code x-session-id}; they are sent on the workload's schedule (Poisson arrivals,
 * a closed loop, think times, trace timestamps) with real concurrency.
 *
 * <p>Every request ends within the per-request timeout: the status line is bounded by the HTTP
 * client's timeout and the streamed body by a timer that cancels it, so a server that stops
 * answering costs errors, never a hang. With a speed factor the workload's clock runs that many
 * times faster than the wall clock and measured times are multiplied by it, so that against
 * {@code serve --speed X} the report is in the emulated replicas' time.
 */
public final class LoadGenerator {
  private static final ObjectMapper JSON = new ObjectMapper();
  /** Latencies are recorded in microseconds up to an hour, three significant digits. */
  private static final long MAX_MICROS = TimeUnit.HOURS.toMicros(1);
  /** The failure kind of a dialog's turns left unsent after a turn too long for the context. */
  static final String GIVEN_UP = "given up";
  /** The failure kind of a 200 whose whole body held no {@code data:} line. */
  static final String NOT_A_STREAM = "not a stream";
  /** The bytes of a 400's body read to tell a context-length refusal from other bad requests. */
  private static final int ERROR_BODY_BYTES = 8192;

  static {
    // vLLM closes a keep-alive connection after 5 s idle; the JDK's client keeps idle connections
    // for 1,200 s on Java 17 (30 s later), so between a workload's bursts a request could go out
    // on a connection the server is closing at that moment and count as an error that the server
    // never saw. Read once, when the JVM's first HTTP client pools a connection; a value the user
    // set wins.
    if (System.getProperty("jdk.httpclient.keepalive.timeout") == null) {
      System.setProperty("jdk.httpclient.keepalive.timeout", "4");
    }
  }

  /**
   * How to run: where to, with which model name, and the bounds.
   *
   * @param target      base URL, e.g. {@code http://127.0.0.1:8080} ({@code /v1/completions} is
   *     appended)
   * @param model       the {@code model} field; null to ask {@code GET /v1/models} and use the
   *     first model (none when that fails)
   * @param timeout     per request, from sending it to the end of its answer
   * @param maxRequests at most this many requests of a run are sent (the workload may want
   *     fewer); the warm-up is not capped
   * @param speed       the target's emulated seconds per wall second (1 for a real server)
   * @param seed        the workload's seed
   * @param progress    where progress lines go, or null
   */
  public record Settings(URI target, @Nullable String model, Duration timeout, int maxRequests,
      double speed, long seed, @Nullable PrintStream progress) {
    public Settings {
      if (!(speed > 0) || Double.isInfinite(speed)) {
        throw new IllegalArgumentException("speed must be a positive number, got " + speed);
      }
      if (maxRequests < 1) {
        throw new IllegalArgumentException("maxRequests must be >= 1, got " + maxRequests);
      }
      if (timeout.isNegative() || timeout.isZero()) {
        throw new IllegalArgumentException("timeout must be positive, got " + timeout);
      }
    }
  }

  /**
   * One run's outcome: the simulator's result shape plus what only a network client sees.
   *
   * @param result       the table row; latencies in the target's time (wall × speed),
   *     {@code requests} the completed ones, {@code rejectedRequests} the failed ones,
   *     per-replica counts from the {@code x-gateway-destination-endpoint} header (0 without
   *     it), preemptions and evictions 0 and routing times NaN (a client cannot see them)
   * @param sent         requests sent
   * @param errors       failed requests by kind: {@code http <status>}, {@code connect},
   *     {@code timeout}, {@code stream cut} (the connection ended before {@code [DONE]}),
   *     {@code stream error} (an error event in the stream, or a line longer than 1 MiB, which
   *     is not buffered further), {@code not a stream} (a 200 whose body ended without a
   *     {@code data:} line), {@code io} (any other I/O error), {@code given up} (the later
   *     turns of a dialog ended by a 400 for a turn longer than the model's context: not sent)
   * @param itlP95Ms     inter-token latency p95 (target time)
   */
  public record Result(PolicyResult result, int sent, Map<String, Integer> errors,
      double itlP95Ms) {
    public Result {
      errors = java.util.Collections.unmodifiableMap(new TreeMap<>(errors));
    }

    /** Failed requests, all kinds together. */
    public int failed() {
      return errors.values().stream().mapToInt(Integer::intValue).sum();
    }
  }

  private final Settings settings;
  private final HttpClient client;
  private final ExecutorService httpExecutor;
  private final ScheduledThreadPoolExecutor timer;

  public LoadGenerator(Settings settings) {
    this.settings = settings;
    this.httpExecutor = Executors.newCachedThreadPool(daemon("epp4j-load-http"));
    this.timer = new ScheduledThreadPoolExecutor(1, daemon("epp4j-load-timer"));
    // a request that finishes cancels its deadline: out of the queue at once, not when it is due
    timer.setRemoveOnCancelPolicy(true);
    this.client = HttpClient.newBuilder()
        .version(HttpClient.Version.HTTP_1_1)
        .connectTimeout(settings.timeout())
        .executor(httpExecutor)
        .build();
  }

  private static java.util.concurrent.ThreadFactory daemon(String name) {
    return r -> {
      Thread t = new Thread(r, name);
      t.setDaemon(true);
      return t;
    };
  }

  /**
   * Runs {@code workload} to its end (every request answered, failed or timed out) and returns
   * its result, named {@code label} in the report.
   */
  public Result run(Workload workload, String label) throws InterruptedException {
    String model = settings.model() != null ? settings.model() : askModel();
    return new RunState(workload, label, model, settings.seed(), true).execute();
  }

  /**
   * Sends {@code requests} unmeasured requests first, four at a time, so that the JIT of the
   * client and of the server has compiled the request path before the measured run: 1,024-token
   * prompts of their own (no workload prompt gets cached by them), 16 output tokens. Returns the
   * warm-up's failures by kind (empty when all went through).
   */
  public Map<String, Integer> warmUp(int requests) throws InterruptedException {
    if (requests <= 0) {
      return Map.of();
    }
    SharedPrefixWorkload w = new SharedPrefixWorkload(requests, 1, LengthDist.fixed(1024),
        LengthDist.fixed(16), LengthDist.fixed(16), requests, 4, 0);
    String model = settings.model() != null ? settings.model() : askModel();
    // a seed of its own: the warm-up's prompts share no tokens with the workload's
    RunState warm = new RunState(w, "warm-up", model, settings.seed() ^ 0x7761726d75704cL, false);
    return warm.execute().errors();
  }

  /** The first model {@code GET /v1/models} names, or null when the target does not say. */
  @Nullable String askModel() {
    // the request's own timeout ends when the status line arrives: the body is bounded here,
    // so a server that starts the answer and stalls costs the timeout, not a hang
    java.util.concurrent.CompletableFuture<HttpResponse<String>> f = client.sendAsync(
        HttpRequest.newBuilder(resolve("/v1/models")).timeout(settings.timeout()).GET().build(),
        HttpResponse.BodyHandlers.ofString());
    try {
      HttpResponse<String> r = f.get(settings.timeout().toNanos(), TimeUnit.NANOSECONDS);
      if (r.statusCode() == 200) {
        JsonNode id = JSON.readTree(r.body()).path("data").path(0).path("id");
        if (id.isTextual()) {
          return id.asText();
        }
      }
    } catch (IOException | java.util.concurrent.ExecutionException
        | java.util.concurrent.TimeoutException e) {
      // no model name: the request goes without one, which vLLM and the emulator accept
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    } finally {
      f.cancel(true);
    }
    return null;
  }

  private URI resolve(String path) {
    String base = settings.target().toString();
    while (base.endsWith("/")) {
      base = base.substring(0, base.length() - 1);
    }
    return URI.create(base + path);
  }

  /** Tasks waiting in the timer: arrivals not yet handed over and deadlines not yet due. */
  int timerTasksQueued() {
    return timer.getQueue().size();
  }

  /** Stops the client's threads; the generator cannot run again. */
  public void close() {
    timer.shutdownNow();
    httpExecutor.shutdownNow();
  }

  /** The measurements of one run, shared by the threads that finish requests. */
  private final class RunState implements Workload.Submitter {
    private final Workload workload;
    private final String label;
    private final @Nullable String model;
    private final Workload.Run run;
    private final URI completions = resolve("/v1/completions");
    private final long startNanos = System.nanoTime();
    private final CountDownLatch done = new CountDownLatch(1);
    private final Object lock = new Object();
    // guarded by lock
    private int pending;
    private int sent;
    /** Later turns of dialogs that outgrew the context: counted as failed, never sent. */
    private int givenUp;
    private int finished;
    /** When the first request went out: output tokens/s counts from there, as the simulator's. */
    private long firstSendNanos = Long.MAX_VALUE;
    private long lastFinishNanos;
    private long promptTokens;
    // prompt tokens of the completed requests whose usage named cached_tokens, and those cached
    private long promptTokensWithDetails;
    private int completedWithDetails;
    private long cachedTokens;
    private long outputTokens;
    private int completed;
    private final Map<String, Integer> errors = new HashMap<>();
    private final Histogram ttft = new Histogram(MAX_MICROS, 3);
    private final Histogram itl = new Histogram(MAX_MICROS, 3);
    private final Histogram e2e = new Histogram(MAX_MICROS, 3);
    private final Map<String, Integer> requestsPerDestination = new HashMap<>();
    private final Map<String, Set<String>> sessionsPerDestination = new HashMap<>();
    private long nextProgressNanos;
    private final boolean showProgress;
    /** The most requests sent: {@code maxRequests} for a measured run; a warm-up sends all. */
    private final int cap;

    RunState(Workload workload, String label, @Nullable String model, long seed,
        boolean measured) {
      this.workload = workload;
      this.label = label;
      this.model = model;
      this.run = workload.start(seed);
      this.showProgress = measured;
      this.cap = measured ? settings.maxRequests() : Integer.MAX_VALUE;
    }

    Result execute() throws InterruptedException {
      synchronized (lock) {
        run.begin(this);
        if (pending == 0) {
          done.countDown();
        }
      }
      done.await();
      return result();
    }

    /** Workload time: wall time since the start × speed. */
    private long nowWorkloadNanos() {
      return Math.round((System.nanoTime() - startNanos) * settings.speed());
    }

    /** Called with {@code lock} held (from begin or onFinished). */
    @Override
    public void submit(long atNanos, RequestSpec spec) {
      if (sent + givenUp >= cap) {
        return; // the cap: the workload's later requests are not sent
      }
      sent++;
      pending++;
      long wallDelay = Math.max(0, Math.round(atNanos / settings.speed())
          - (System.nanoTime() - startNanos));
      // the timer only hands over: building a 6,000-token body must not delay the next arrival
      timer.schedule(() -> httpExecutor.execute(() -> send(spec)), wallDelay,
          TimeUnit.NANOSECONDS);
    }

    private void send(RequestSpec spec) {
      Exchange x = new Exchange(this, spec);
      try {
        int[] tokens = spec.tokens().get();
        ObjectNode body = JSON.createObjectNode();
        if (model != null) {
          body.put("model", model);
        }
        ArrayNode prompt = body.putArray("prompt");
        for (int i = 0; i < spec.promptLength(); i++) {
          prompt.add(tokens[i]);
        }
        body.put("max_tokens", spec.outputLength());
        body.put("ignore_eos", true); // vLLM: generate max_tokens, as the workload intends
        // vLLM (0.10.2 and later) and the emulator then name the tokens they generate, which
        // a multi-turn dialog's next prompt carries; servers that do not know it ignore it
        body.put("return_token_ids", true);
        body.put("stream", true);
        body.putObject("stream_options").put("include_usage", true);
        HttpRequest req = HttpRequest.newBuilder(completions)
            .timeout(settings.timeout())
            .header("Content-Type", "application/json")
            .header("x-session-id", spec.sessionKey())
            .POST(HttpRequest.BodyPublishers.ofByteArray(JSON.writeValueAsBytes(body)))
            .build();
        x.start();
        client.sendAsync(req, x::bodySubscriber).whenComplete((resp, error) -> {
          if (error != null) {
            x.fail(kindOf(error));
          }
        });
      } catch (IOException | RuntimeException e) {
        x.fail("io");
      }
    }

    /** One request's outcome; called exactly once per sent request. */
    void finish(Exchange x, @Nullable String error) {
      long now = System.nanoTime();
      synchronized (lock) {
        finished++;
        lastFinishNanos = Math.max(lastFinishNanos, now);
        if (x.started) {
          firstSendNanos = Math.min(firstSendNanos, x.sentNanos);
        }
        if (error == null) {
          completed++;
          promptTokens += x.promptTokens;
          if (x.reportedCachedTokens) {
            completedWithDetails++;
            promptTokensWithDetails += x.promptTokens;
            cachedTokens += x.cachedTokens;
          }
          outputTokens += x.outputTokens;
          record(ttft, x.firstTokenNanos - x.sentNanos);
          record(e2e, now - x.sentNanos);
          for (int i = 0; i < x.itlCount; i++) {
            record(itl, x.itl[i]);
          }
        } else {
          errors.merge(error, 1, Integer::sum);
        }
        if (x.destination != null) {
          requestsPerDestination.merge(x.destination, 1, Integer::sum);
          sessionsPerDestination.computeIfAbsent(x.destination, k -> new HashSet<>())
              .add(x.spec.sessionKey());
        }
        // a failed request ends too: closed loops and dialogs go on, as a benchmark client does
        // (a dialog without the failed exchange in its history: no reply came), but a dialog
        // whose turn the server refused as longer than the context ends, as in the simulator:
        // every later turn carries that one and is longer still
        if (error != null) {
          int later = run.onRejected(x.spec, x.tooLong, nowWorkloadNanos(), this);
          // within the cap, as if they had been sent and refused
          int counted = Math.min(later, Math.max(0, cap - sent - givenUp));
          if (counted > 0) {
            givenUp += counted;
            finished += counted;
            errors.merge(GIVEN_UP, counted, Integer::sum);
          }
        } else if (x.generatedCount == x.spec.outputLength()) {
          run.onFinished(x.spec, x.generated, nowWorkloadNanos(), this);
        } else {
          run.onFinished(x.spec, nowWorkloadNanos(), this);
        }
        pending--;
        progress(now);
        if (pending == 0) {
          done.countDown();
        }
      }
    }

    private void record(Histogram h, long wallNanos) {
      long micros = Math.round(Math.max(0, wallNanos) * settings.speed() / 1e3);
      h.recordValue(Math.min(MAX_MICROS, micros));
    }

    private void progress(long now) {
      PrintStream p = settings.progress();
      if (p == null || !showProgress || (now < nextProgressNanos && pending > 0)) {
        return;
      }
      nextProgressNanos = now + TimeUnit.SECONDS.toNanos(2);
      int failed = errors.values().stream().mapToInt(Integer::intValue).sum();
      p.printf(Locale.ROOT, "  %s / %s: %d of %d requests done (%d failed), %.1f wall s%n",
          workload.name(), label, finished, Math.min(run.totalRequests(), cap),
          failed, (now - startNanos) / 1e9);
    }

    private Result result() {
      synchronized (lock) {
        double wallSeconds = Math.max(1e-9, (lastFinishNanos - startNanos) / 1e9);
        double targetSeconds = wallSeconds * settings.speed();
        // the simulator's output rate runs from the first arrival, not from the start: a first
        // request due late (a trace's first timestamp, a Poisson arrival) adds no idle time
        double sendingSeconds = firstSendNanos == Long.MAX_VALUE ? targetSeconds
            : Math.max(1e-9, (lastFinishNanos - firstSendNanos) / 1e9) * settings.speed();
        int maxReq = 0;
        double meanReq = 0;
        int maxSess = 0;
        double meanSess = 0;
        if (!requestsPerDestination.isEmpty()) {
          for (int n : requestsPerDestination.values()) {
            maxReq = Math.max(maxReq, n);
            meanReq += n;
          }
          meanReq /= requestsPerDestination.size();
          for (Set<String> s : sessionsPerDestination.values()) {
            maxSess = Math.max(maxSess, s.size());
            meanSess += s.size();
          }
          meanSess /= sessionsPerDestination.size();
        }
        int failed = errors.values().stream().mapToInt(Integer::intValue).sum();
        PolicyResult r = new PolicyResult(label,
            hitRate(completedWithDetails, cachedTokens, promptTokensWithDetails),
            ms(ttft, 50), ms(ttft, 95), ms(ttft, 99), ms(itl, 50), ms(e2e, 50), ms(e2e, 95),
            outputTokens / sendingSeconds, completed, 0, 0, maxReq, meanReq, maxSess, meanSess,
            // no routing decision is timed here: no figure (null in the JSON), not 0 µs
            Double.NaN, Double.NaN, run.clippedRequests(), failed, 0, "", targetSeconds,
            wallSeconds,
            completed / wallSeconds, cdf(ttft));
        return new Result(r, sent, errors, ms(itl, 95));
      }
    }
  }

  /**
   * Cached ÷ prompt tokens of the completed requests whose usage named {@code cached_tokens};
   * NaN when none did (a vLLM started without {@code --enable-prompt-tokens-details}), so the
   * report shows no figure rather than 0% hits; 0 when those requests had no prompt tokens.
   */
  static double hitRate(int requests, long cachedTokens, long promptTokens) {
    return requests == 0 ? Double.NaN
        : promptTokens == 0 ? 0 : (double) cachedTokens / promptTokens;
  }

  /** NaN without samples, as {@link Samples#percentile}. */
  private static double ms(Histogram h, double percentile) {
    return h.getTotalCount() == 0 ? Double.NaN : h.getValueAtPercentile(percentile) / 1e3;
  }

  /** The recorded TTFTs as sorted milliseconds, for the chart (HdrHistogram's precision). */
  private static double[] cdf(Histogram h) {
    double[] out = new double[(int) Math.min(Integer.MAX_VALUE - 8, h.getTotalCount())];
    int i = 0;
    for (var v : h.recordedValues()) {
      double ms = h.medianEquivalentValue(v.getValueIteratedTo()) / 1e3;
      for (long k = 0; k < v.getCountAtValueIteratedTo() && i < out.length; k++) {
        out[i++] = ms;
      }
    }
    return out;
  }

  /** A failure's kind, as the report counts it. */
  static String kindOf(Throwable error) {
    Throwable e = error;
    while (e instanceof CompletionException && e.getCause() != null) {
      e = e.getCause();
    }
    if (e instanceof HttpConnectTimeoutException || e instanceof ConnectException) {
      return "connect";
    }
    if (e instanceof HttpTimeoutException) {
      return "timeout";
    }
    return "io";
  }

  /**
   * Whether a 400's body says that the request is longer than the model's context: vLLM's
   * "This model's maximum context length is ..." (prompt, or prompt and {@code max_tokens},
   * too long), its V1 engine's "... longer than the maximum model length of ...", or the
   * {@code context_length_exceeded} code of OpenAI's API.
   */
  static boolean contextLengthExceeded(String body) {
    String b = body.toLowerCase(Locale.ROOT);
    return b.contains("maximum context length") || b.contains("maximum model length")
        || b.contains("context_length_exceeded");
  }

  /** The body of an answer already counted: cancelled unread, which closes its connection. */
  private static final class UnreadBody implements Flow.Subscriber<List<ByteBuffer>> {
    @Override
    public void onSubscribe(Flow.Subscription s) {
      s.cancel();
    }

    @Override
    public void onNext(List<ByteBuffer> buffers) {}

    @Override
    public void onError(Throwable t) {}

    @Override
    public void onComplete() {}
  }

  /**
   * The body of a 400: keeps its first {@link #ERROR_BODY_BYTES} bytes and fails the request
   * as {@code http 400} when it ends, marked {@link Exchange#tooLong} when it says so.
   */
  private static final class ErrorBody implements Flow.Subscriber<List<ByteBuffer>> {
    private final Exchange x;
    private final ByteArrayOutputStream kept = new ByteArrayOutputStream();

    ErrorBody(Exchange x) {
      this.x = x;
    }

    @Override
    public void onSubscribe(Flow.Subscription s) {
      // the deadline cancels it: a 400 whose body never ends is counted and its connection closed
      x.subscribed(s);
    }

    @Override
    public void onNext(List<ByteBuffer> buffers) {
      for (ByteBuffer b : buffers) {
        int n = Math.min(b.remaining(), ERROR_BODY_BYTES - kept.size());
        if (n > 0) {
          byte[] bytes = new byte[n];
          b.get(bytes);
          kept.write(bytes, 0, n);
        }
      }
    }

    @Override
    public void onError(Throwable t) {
      x.fail("http 400");
    }

    @Override
    public void onComplete() {
      x.tooLong = contextLengthExceeded(kept.toString(StandardCharsets.UTF_8));
      x.fail("http 400");
    }
  }

  /**
   * One request on the wire: reads the SSE lines as they arrive and finishes exactly once, on
   * the end of the stream, an error, or the timer.
   */
  private final class Exchange implements Flow.Subscriber<String> {
    final RunState state;
    final RequestSpec spec;
    private final AtomicBoolean over = new AtomicBoolean();
    long sentNanos;
    /** Whether it went out ({@link #sentNanos} set): a body that could not be built never did. */
    boolean started;
    long firstTokenNanos = -1;
    long lastTokenNanos;
    long[] itl = new long[16];
    int itlCount;
    /** The generated token IDs, when the server names them ({@code token_ids}). */
    final int[] generated;
    int generatedCount;
    int promptTokens;
    int cachedTokens;
    /** Whether the usage named {@code prompt_tokens_details.cached_tokens}. */
    boolean reportedCachedTokens;
    int outputTokens;
    boolean sawUsage;
    boolean sawDone;
    /** Whether any {@code data:} line came: a body without one is no event stream. */
    boolean sawData;
    @Nullable String streamError;
    @Nullable String destination;
    /** A 400 that says the request is longer than the model's context. */
    volatile boolean tooLong;
    private volatile Flow.@Nullable Subscription subscription;
    private volatile java.util.concurrent.@Nullable ScheduledFuture<?> deadline;

    Exchange(RunState state, RequestSpec spec) {
      this.state = state;
      this.spec = spec;
      this.generated = new int[spec.outputLength()];
    }

    void start() {
      sentNanos = System.nanoTime();
      started = true;
      // bounds the body too: the client's own timeout ends when the status line arrives
      deadline = timer.schedule(() -> {
        // finish first: on Java 25 cancelling calls onError at once, which would otherwise
        // count the timeout as a cut stream
        fail("timeout");
        Flow.Subscription s = subscription;
        if (s != null) {
          s.cancel();
        }
      }, settings.timeout().toNanos(), TimeUnit.NANOSECONDS);
    }

    HttpResponse.BodySubscriber<Void> bodySubscriber(HttpResponse.ResponseInfo info) {
      destination = info.headers().firstValue("x-gateway-destination-endpoint").orElse(null);
      if (info.statusCode() == 400) {
        // a 400 says why in its body: read its start to know whether the turn was too long
        return HttpResponse.BodySubscribers.fromSubscriber(new ErrorBody(this));
      }
      if (info.statusCode() != 200) {
        fail("http " + info.statusCode());
        // counted already: the body is not read, and cancelling it closes the connection, so a
        // body that never ends does not hold it open after the request is over
        return HttpResponse.BodySubscribers.fromSubscriber(new UnreadBody());
      }
      // bounded lines: a body without line ends must not be buffered whole
      return HttpResponse.BodySubscribers.fromSubscriber(new SseLines(this));
    }

    void fail(String kind) {
      if (over.compareAndSet(false, true)) {
        cancelDeadline();
        state.finish(this, kind);
      }
    }

    private void succeed() {
      if (over.compareAndSet(false, true)) {
        cancelDeadline();
        state.finish(this, null);
      }
    }

    private void cancelDeadline() {
      var d = deadline;
      if (d != null) {
        d.cancel(false);
      }
    }

    @Override
    public void onSubscribe(Flow.Subscription s) {
      subscribed(s);
    }

    /**
     * Reads the body of {@code s}, and keeps it for the deadline to cancel; cancels it at once
     * when the request is already over (the deadline came first).
     */
    void subscribed(Flow.Subscription s) {
      subscription = s;
      if (over.get()) {
        s.cancel();
      } else {
        s.request(Long.MAX_VALUE);
      }
    }

    @Override
    public void onNext(String line) {
      if (over.get() || !line.startsWith("data:")) {
        return;
      }
      sawData = true;
      String data = line.substring(5).strip();
      if (data.equals("[DONE]")) {
        // the answer is over: a server that keeps the connection open after it (a proxy that
        // holds it for reuse, or a slow close) must not turn a finished request into a timeout
        sawDone = true;
        Flow.Subscription s = subscription;
        if (s != null) {
          s.cancel();
        }
        onComplete();
        return;
      }
      long now = System.nanoTime();
      JsonNode n;
      try {
        n = JSON.readTree(data);
      } catch (IOException e) {
        streamError = "stream error";
        return;
      }
      if (n.has("error")) {
        streamError = "stream error";
        return;
      }
      JsonNode choices = n.path("choices");
      if (choices.isArray() && !choices.isEmpty()) {
        JsonNode c = choices.get(0);
        for (JsonNode t : c.path("token_ids")) {
          if (generatedCount < generated.length) {
            generated[generatedCount++] = t.asInt();
          }
        }
        String text = c.path("text").isTextual() ? c.get("text").asText()
            : c.path("delta").path("content").asText("");
        if (!text.isEmpty()) {
          if (firstTokenNanos < 0) {
            firstTokenNanos = now;
          } else {
            if (itlCount == itl.length) {
              itl = java.util.Arrays.copyOf(itl, itl.length * 2);
            }
            itl[itlCount++] = now - lastTokenNanos;
          }
          lastTokenNanos = now;
        }
      }
      JsonNode u = n.path("usage");
      if (u.isObject()) {
        sawUsage = true;
        promptTokens = u.path("prompt_tokens").asInt(0);
        JsonNode cached = u.path("prompt_tokens_details").path("cached_tokens");
        // vLLM writes prompt_tokens_details only with --enable-prompt-tokens-details
        reportedCachedTokens = cached.isNumber();
        cachedTokens = cached.asInt(0);
        outputTokens = u.path("completion_tokens").asInt(0);
      }
    }

    @Override
    public void onError(Throwable t) {
      fail(t instanceof SseLines.LineTooLong ? "stream error" : "stream cut");
    }

    @Override
    public void onComplete() {
      if (streamError != null) {
        fail(streamError);
      } else if (!sawData) {
        // a whole JSON answer to a streamed request (a server or proxy that ignores stream),
        // or an empty body: the server never streamed, which a cut connection does not say
        fail(NOT_A_STREAM);
      } else if (!sawDone || firstTokenNanos < 0) {
        fail("stream cut");
      } else {
        if (!sawUsage) {
          // a server that ignores include_usage: count what arrived, no cache figures
          promptTokens = 0;
          cachedTokens = 0;
          reportedCachedTokens = false;
          outputTokens = itlCount + 1;
        }
        succeed();
      }
    }
  }
}
