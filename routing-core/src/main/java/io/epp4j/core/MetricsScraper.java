package io.epp4j.core;

import io.epp4j.api.Candidate;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.Result;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.net.Socket;
import java.net.URI;
import java.net.URISyntaxException;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.net.http.HttpTimeoutException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.cert.X509Certificate;
import java.time.Duration;
import java.util.HashSet;
import java.util.List;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Flow;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.logging.Level;
import java.util.logging.Logger;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLEngine;
import javax.net.ssl.TrustManager;
import javax.net.ssl.X509ExtendedTrustManager;
import org.jspecify.annotations.Nullable;

/**
 * Polls {@code http://<endpoint>/metrics} of every endpoint in a router's pool and publishes the
 * result with {@link Router#updateMetrics}. Runs on its own daemon thread, off the request path;
 * follows the pool as it changes. A failed scrape leaves the previous metrics in place, so they
 * age and count as stale (see {@code Router.Builder.metricsStaleness}); failures are counted and
 * logged once per endpoint until it recovers. A page that lacks the metric of one of the figures
 * (waiting, running, KV usage) is used, reading 0 for that figure, and the metric is named in a
 * warning, once per endpoint until a page of it carries every figure again. A vLLM server put to sleep ({@code POST /sleep}) is published
 * {@link EndpointMetrics#asleep() asleep}, and the router routes to it only while no endpoint is
 * awake; falling asleep and waking up are logged. A scrape ends within its {@link Builder#timeout}
 * and reads at most {@link Builder#maxResponseBytes} bytes, so a server that never finishes its
 * answer (or sends an endless one) costs one failed scrape, not the endpoint's metrics for good
 * nor unbounded memory. The answer to a scrape begun before its endpoint left the pool is
 * dropped, even when the endpoint came back at the same address meanwhile: it is the page of the
 * server that was there then. Such a scrape still under way is ended by the next round (neither
 * counted nor logged as a failure), so it holds no connection until its timeout. An endpoint
 * that came back is scraped at once: the scrape of its earlier stay still under way is
 * cancelled then (neither counted nor logged as a failure), so each address has at most one
 * scrape under way. An {@code https} scrape checks the server's
 * certificate against the JVM's trust store and the endpoint's address, unless
 * {@link Builder#insecureSkipVerify} (or the configuration's {@code metrics-data-source}) says to
 * take any certificate. A running configuration whose {@code metricsStalenessThreshold} (a
 * utilization-detector's, or its saturationDetector section's) is shorter than the interval is
 * warned about once it is taken up, since its endpoints are then stale between scrapes.
 *
 * <pre>{@code
 * MetricsScraper scraper = MetricsScraper.builder(router).interval(Duration.ofMillis(50)).start();
 * }</pre>
 */
public final class MetricsScraper implements AutoCloseable {
  /** Default limit of a metrics response: 4 MiB. */
  public static final int DEFAULT_MAX_RESPONSE_BYTES = 4 << 20;
  private static final String DEFAULT_PATH = "/metrics";
  private static final String DEFAULT_SCHEME = "http";
  private static final Logger LOG = Logger.getLogger(MetricsScraper.class.getName());
  /**
   * Timeouts from here on (2^62 ns, about 146 years) set no limit. The scheduler orders its tasks
   * by the difference of their due times: a deadline queued further ahead than this overflows it
   * against a round that runs late, sorts first, and no round runs again.
   */
  private static final long NO_LIMIT_NANOS = Long.MAX_VALUE >> 1;

  private final Router router;
  private final Duration interval;
  private final Duration timeout;
  private final int maxResponseBytes;
  // set in code, or null to follow the running configuration's metrics-data-source
  private final @Nullable String pathInCode;
  private final @Nullable String schemeInCode;
  private final @Nullable Boolean insecureInCode;
  // 0: each endpoint's own port
  private final int port;
  // where the last round scraped, and the configuration it was taken from; only the scheduler
  // thread reads and writes them
  private @Nullable RouterConfig targetFrom;
  private String path = DEFAULT_PATH;
  private String scheme = DEFAULT_SCHEME;
  private boolean insecure;
  // the client that checks certificates, and the one that takes any (made when first needed);
  // the second is only ever read and written by the scheduler thread
  private final HttpClient client;
  private @Nullable HttpClient insecureClient;
  private final ScheduledExecutorService scheduler;
  // the scrape under way per endpoint address, with the stay in the pool it began in
  private final ConcurrentHashMap<String, Scrape> inFlight = new ConcurrentHashMap<>();
  private final ConcurrentHashMap<String, Boolean> failing = new ConcurrentHashMap<>();
  // endpoints already warned about for repeating a series in their exposition
  private final ConcurrentHashMap<String, Boolean> repeating = new ConcurrentHashMap<>();
  // endpoints already warned about for a page without the metric of a figure
  private final ConcurrentHashMap<String, Boolean> lacking = new ConcurrentHashMap<>();
  // endpoints whose last page said their engine sleeps, so that waking up is logged once
  private final ConcurrentHashMap<String, Boolean> sleeping = new ConcurrentHashMap<>();
  private final AtomicLong scrapes = new AtomicLong();
  private final AtomicLong failures = new AtomicLong();
  private final AtomicLong rounds = new AtomicLong();
  // scrapes under way, so that close() can end them
  private final Set<CompletableFuture<?>> responses = ConcurrentHashMap.newKeySet();
  // held while an answer is handled (counted, logged, published) and by close() to set closed,
  // so that nothing is handled once close() returned
  private final Object handling = new Object();
  private volatile boolean closed;

  private MetricsScraper(Builder b) {
    this.router = b.router;
    this.interval = b.interval;
    this.timeout = b.timeout;
    this.maxResponseBytes = b.maxResponseBytes;
    this.pathInCode = b.path;
    this.schemeInCode = b.scheme;
    this.insecureInCode = b.insecureSkipVerify;
    this.port = b.port;
    this.client = newClient(false);
    ScheduledThreadPoolExecutor scheduler = new ScheduledThreadPoolExecutor(1, r -> {
      Thread t = new Thread(r, "epp4j-metrics-scraper");
      t.setDaemon(true);
      return t;
    });
    // every scrape that ends in time cancels its deadline: left queued until it was due, a long
    // timeout would pile up one dead task per scrape
    scheduler.setRemoveOnCancelPolicy(true);
    this.scheduler = scheduler;
  }

  private HttpClient newClient(boolean acceptAnyCertificate) {
    // HTTP/1.1: the JDK's default (HTTP/2) asks a plain-http server to upgrade with h2c on
    // every new connection, which some engine servers refuse, failing every scrape
    HttpClient.Builder b = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1);
    if (acceptAnyCertificate) {
      b.sslContext(acceptingAnyCertificate());
    }
    if (limited()) {
      b.connectTimeout(timeout);
    }
    return b.build();
  }

  /** Whether scrapes have a time limit: see {@link #NO_LIMIT_NANOS}. */
  private boolean limited() {
    return RouterSettings.nanos(timeout) < NO_LIMIT_NANOS;
  }

  // scheduler thread only
  private HttpClient client() {
    if (!insecure) {
      return client;
    }
    HttpClient c = insecureClient;
    if (c == null) {
      c = newClient(true);
      insecureClient = c;
    }
    return c;
  }

  public static Builder builder(Router router) {
    return new Builder(router);
  }

  /**
   * A TLS context whose trust manager takes any certificate chain for any address, for
   * {@link Builder#insecureSkipVerify}. The trust manager is an {@link X509ExtendedTrustManager}
   * on purpose: the JDK compares a server's certificate with the address it was reached at inside
   * the trust manager, and wraps a plain {@code X509TrustManager} in one that still does so.
   */
  private static SSLContext acceptingAnyCertificate() {
    try {
      SSLContext context = SSLContext.getInstance("TLS");
      context.init(null, new TrustManager[] {new AcceptAnyCertificate()}, null);
      return context;
    } catch (GeneralSecurityException e) {
      throw new IllegalStateException("no TLS context for insecureSkipVerify: " + e, e);
    }
  }

  /** Checks nothing: every chain is trusted, whatever address it was presented at. */
  private static final class AcceptAnyCertificate extends X509ExtendedTrustManager {
    @Override
    public void checkClientTrusted(X509Certificate[] chain, String authType) {}

    @Override
    public void checkClientTrusted(X509Certificate[] chain, String authType, Socket socket) {}

    @Override
    public void checkClientTrusted(X509Certificate[] chain, String authType, SSLEngine engine) {}

    @Override
    public void checkServerTrusted(X509Certificate[] chain, String authType) {}

    @Override
    public void checkServerTrusted(X509Certificate[] chain, String authType, Socket socket) {}

    @Override
    public void checkServerTrusted(X509Certificate[] chain, String authType, SSLEngine engine) {}

    @Override
    public X509Certificate[] getAcceptedIssuers() {
      return new X509Certificate[0];
    }
  }

  private MetricsScraper start() {
    scheduler.scheduleAtFixedRate(this::scrapeAll, 0, RouterSettings.nanos(interval),
        TimeUnit.NANOSECONDS);
    return this;
  }

  private void scrapeAll() {
    // an exception escaping a periodic task cancels it for good, and with it the scraping of
    // every endpoint: whatever one endpoint does, the next round must still come
    try {
      followConfig();
      List<Candidate> pool = router.endpoints();
      for (Candidate c : pool) {
        if (closed) {
          return;
        }
        // the pool's own candidates: each knows its stay in the pool
        scrape(c.id(), authority(c), c instanceof EndpointState s ? s.membership : null);
      }
      if (!inFlight.isEmpty()) {
        endDeparted();
      }
      if (!failing.isEmpty() || !repeating.isEmpty() || !lacking.isEmpty()
          || !sleeping.isEmpty()) {
        forgetDeparted(pool);
      }
    } catch (RuntimeException e) {
      synchronized (handling) {
        if (!closed) {
          LOG.log(Level.WARNING, "a round of metrics scrapes failed", e);
        }
      }
    } finally {
      rounds.incrementAndGet();
    }
  }

  /**
   * Ends the scrapes of endpoints that left the pool: their answers would be dropped (see
   * publish), and left to their timeout each would hold its connection and entry all that
   * while, without end under a timeout too long to count, one more for every replica that left
   * with its scrape hanging.
   */
  private void endDeparted() {
    for (var e : inFlight.entrySet()) {
      Scrape s = e.getValue();
      if (s.membership != null && !router.isMember(e.getKey(), s.membership)) {
        s.supersede("the endpoint left the pool");
        inFlight.remove(e.getKey(), s);
      }
    }
  }

  /**
   * Why {@code path} cannot be a metrics path, or null: it must start with '/' and be valid in a
   * URI as written (a space or a stray '%' must be percent-encoded), since it is appended to
   * {@code scheme://ip:port} for every scrape, which would otherwise fail every time.
   */
  static @Nullable String pathError(@Nullable String path) {
    if (path == null || !path.startsWith("/")) {
      return "must start with '/', got '" + path + "'";
    }
    try {
      URI uri = new URI("http://127.0.0.1:1" + path);
      if (uri.getRawFragment() != null) {
        return "must not have a fragment ('#'), which is never sent, got '" + path + "'";
      }
    } catch (URISyntaxException e) {
      return "is not valid in a URI (" + e.getReason() + " at index "
          + (e.getIndex() - "http://127.0.0.1:1".length())
          + "; percent-encode such characters), got '" + path + "'";
    }
    return null;
  }

  /**
   * One scrape under way: the stay it began in, and how to end it early. {@code response} is
   * set once the request is sent; {@code superseded} once a scrape of a later stay replaced it.
   */
  private static final class Scrape {
    final @Nullable Object membership;
    final BoundedBody body;
    volatile @Nullable CompletableFuture<?> response;
    volatile boolean superseded;

    Scrape(@Nullable Object membership, BoundedBody body) {
      this.membership = membership;
      this.body = body;
    }

    /** Ends this scrape at once: its answer is of no use to anyone any more. */
    void supersede(String why) {
      superseded = true;
      body.abort(new java.util.concurrent.CancellationException(why));
      CompletableFuture<?> r = response;
      if (r != null) {
        r.cancel(true);
      }
    }
  }

  /** Where an endpoint's metrics are read: its own address, or its host at {@link Builder#port}. */
  private String authority(Candidate c) {
    if (port == 0) {
      return c.id();
    }
    String host = c.endpoint().host();
    return (host.indexOf(':') >= 0 ? "[" + host + "]" : host) + ":" + port;
  }

  // runs on the scheduler thread only, so no two calls race to start a scrape of one address
  private void scrape(String id, String authority, @Nullable Object membership) {
    Scrape running = inFlight.get(id);
    if (running != null) {
      if (running.membership == membership) {
        return; // the previous scrape of this stay is still running
      }
      // begun during an earlier stay at this address, its answer would be dropped anyway (see
      // publish): waiting for it left the returning endpoint without figures for up to a timeout.
      // Ended here, it leaves one scrape per address under way, as before
      running.supersede("the endpoint left the pool and came back");
    }
    BoundedBody body = new BoundedBody(maxResponseBytes);
    Scrape current = new Scrape(membership, body);
    inFlight.put(id, current);
    CompletableFuture<HttpResponse<String>> response;
    try {
      HttpRequest.Builder req =
          HttpRequest.newBuilder(URI.create(scheme + "://" + authority + path)).GET();
      if (limited()) {
        req.timeout(timeout);
      }
      response = client().sendAsync(req.build(), info -> body);
    } catch (RuntimeException e) {
      // an id that makes no URL the client accepts (a host name with '_', an IPv6 zone): this
      // endpoint cannot be scraped, the others still are
      inFlight.remove(id, current);
      synchronized (handling) {
        if (!closed) {
          scrapes.incrementAndGet();
          fail(id, "no metrics request can be made for it: " + e);
        }
      }
      return;
    }
    current.response = response;
    // the request timeout ends at the response headers; this one covers the body too (none
    // without a limit: see NO_LIMIT_NANOS)
    final @Nullable ScheduledFuture<?> deadline;
    try {
      deadline = !limited() ? null : scheduler.schedule(() -> {
        body.abort(new HttpTimeoutException("no complete response within " + timeout));
        response.cancel(true);
      }, RouterSettings.nanos(timeout), TimeUnit.NANOSECONDS);
    } catch (RejectedExecutionException e) {
      response.cancel(true); // closed meanwhile
      inFlight.remove(id, current);
      return;
    }
    responses.add(response);
    if (closed) {
      response.cancel(true); // close() may have ended the others before this one was added
    }
    response.whenComplete((resp, err) -> {
      if (deadline != null) {
        deadline.cancel(false);
      }
      responses.remove(response);
      try {
        if (!current.superseded) {
          // a superseded scrape was ended on purpose: neither a result nor a failure
          publish(id, membership, resp, err);
        }
      } finally {
        // only now: cleared before the body was parsed, a slow parse (a huge exposition) was
        // started again at every interval while the earlier ones still ran. Only this scrape's
        // entry: a scrape of the endpoint's later stay may have taken its place
        inFlight.remove(id, current);
      }
    });
  }

  /** Handles one finished scrape of {@code id}: publishes its figures or counts a failure. */
  private void publish(String id, @Nullable Object membership,
      @Nullable HttpResponse<String> resp, @Nullable Throwable err) {
    if (closed) {
      // an answer that ends after close() is neither published (the router may be closed or
      // reconfigured meanwhile) nor a failure: a replica that stops with the gateway answers
      // its last scrape with a 503
      return;
    }
    // parsed before taking the lock: a large page takes a while, and close() waits for the lock
    AtomicReference<@Nullable String> repeated = new AtomicReference<>();
    AtomicReference<@Nullable String> missing = new AtomicReference<>();
    Result<EndpointMetrics> m = null;
    RuntimeException unreadable = null;
    if (err == null && resp != null && resp.statusCode() == 200) {
      try {
        m = PrometheusMetrics.parse(resp.body(), repeated::set, missing::set);
      } catch (RuntimeException e) {
        unreadable = e;
      }
    }
    synchronized (handling) {
      // checked again, under the lock close() takes: once close() returned, no answer is
      // published, counted or logged (a successor scraper's figures are not overwritten by
      // this one's, nor a closed router's plugins told of them)
      if (!closed) {
        handle(id, membership, resp, err, m, unreadable, repeated.get(), missing.get());
      }
    }
  }

  private void handle(String id, @Nullable Object membership,
      @Nullable HttpResponse<String> resp, @Nullable Throwable err,
      @Nullable Result<EndpointMetrics> m, @Nullable RuntimeException unreadable,
      @Nullable String series, @Nullable String absent) {
    scrapes.incrementAndGet();
    if (membership != null && !router.isMember(id, membership)) {
      // the endpoint left the pool while this scrape ran: an answer from the server that was
      // at the address then (a replaced pod, a restarted one) is not the figures, the failure
      // to mark, the sleep or the missing metrics of an endpoint back at the same address since;
      // a failed attempt is still counted
      if (err != null || resp == null || resp.statusCode() != 200) {
        failures.incrementAndGet();
      }
      return;
    }
    if (err != null || resp == null || resp.statusCode() != 200) {
      fail(id, err != null ? err.toString() : resp == null ? "no response" : "HTTP " + resp.statusCode());
      return;
    }
    if (m == null) {
      // the future would keep the exception to itself: count and log it as any failure
      fail(id, unreadable != null ? unreadable.toString() : "no metrics read");
      return;
    }
    try {
      if (!m.isOk()) {
        fail(id, m.errors().get(0));
        return;
      }
      if (series != null && mark(repeating, id)) {
        LOG.log(Level.WARNING, "metrics of " + id + " repeat series " + series
            + " (and maybe others); the last sample of each counts");
      }
      if (absent == null) {
        // a page with every figure ends the warning: a server that restarts writes an empty or
        // partial page for a moment, and that must not use up the one warning for a metric
        // this endpoint goes without later (a version that renamed it)
        lacking.remove(id);
      } else if (mark(lacking, id)) {
        LOG.log(Level.WARNING, "metrics of " + id + " have no sample of " + absent
            + ": the router reads 0 for each such figure while it is missing (a server version"
            + " that renamed or hid the metric?)");
      }
      if (failing.remove(id) != null) {
        LOG.info("metrics of " + id + " are back");
      }
      if (m.value().asleep()) {
        if (mark(sleeping, id)) {
          LOG.info("metrics of " + id + " say its engine is asleep or not fully awake (vLLM's"
              + " engine_sleep_state, engine_fully_awake or engine_sleep_resource_state):"
              + " requests go to it only while no endpoint of the pool is awake");
        }
      } else if (sleeping.remove(id) != null) {
        LOG.info("metrics of " + id + " say its engine is awake again");
      }
      router.updateMetrics(id, m.value(), membership);
    } catch (RuntimeException e) {
      // the future would keep the exception to itself: count and log it as any failure
      fail(id, e.toString());
    }
  }

  /**
   * Takes the path, scheme and insecureSkipVerify of the running configuration's
   * {@code metrics-data-source} (or the defaults when it declares none) for what was not set in
   * code, so that a reload that changes them moves the scraping there, as it changes everything
   * else the file says.
   */
  private void followConfig() {
    RouterConfig config = router.config();
    if (config == targetFrom) {
      return;
    }
    targetFrom = config;
    MetricsDataSource source = dataSource(config);
    path = pathInCode != null ? pathInCode : source != null ? source.path : DEFAULT_PATH;
    scheme = schemeInCode != null ? schemeInCode : source != null ? source.scheme : DEFAULT_SCHEME;
    insecure = insecureInCode != null ? insecureInCode
        : source != null && source.insecureSkipVerify;
    String stale = stalenessBelowInterval(config, interval);
    if (stale != null) {
      synchronized (handling) {
        if (!closed) {
          LOG.warning(stale);
        }
      }
    }
  }

  /**
   * Why metrics scraped every {@code interval} are stale most of the time under {@code config},
   * or null: a utilization-detector's or the saturationDetector section's
   * {@code metricsStalenessThreshold} shorter than the interval. The detector can only compare
   * its threshold with the default interval when the file loads, before any scraper exists.
   */
  static @Nullable String stalenessBelowInterval(RouterConfig config, Duration interval) {
    Duration shortest = null;
    String where = null;
    for (var e : config.plugins().entrySet()) {
      if (e.getValue() instanceof UtilizationDetector d
          && d.saturation.metricsStaleness().compareTo(interval) < 0
          && (shortest == null || d.saturation.metricsStaleness().compareTo(shortest) < 0)) {
        shortest = d.saturation.metricsStaleness();
        where = "utilization-detector " + ConfigLoader.quote(e.getKey());
      }
    }
    RouterConfig.Saturation section = config.saturation().orElse(null);
    if (section != null && section.metricsStaleness().compareTo(interval) < 0
        && (shortest == null || section.metricsStaleness().compareTo(shortest) < 0)) {
      shortest = section.metricsStaleness();
      where = "the saturationDetector section";
    }
    if (shortest == null) {
      return null;
    }
    return "metricsStalenessThreshold of " + where + " is " + millis(shortest)
        + " ms, shorter than this scraper's interval of " + millis(interval) + " ms: between"
        + " scrapes every endpoint's metrics are stale and count as saturated, so the pool reads"
        + " as saturated most of the time; scrape more often or raise the threshold";
  }

  private static String millis(Duration d) {
    return UtilizationDetector.figure(RouterSettings.nanos(d) / 1e6);
  }

  private static @Nullable MetricsDataSource dataSource(RouterConfig config) {
    for (io.epp4j.api.Plugin plugin : config.plugins().values()) {
      if (plugin instanceof MetricsDataSource source) {
        return source;
      }
    }
    return null;
  }

  /**
   * The scheme the scrapes use ({@code http} or {@code https}): the one set with
   * {@link Builder#scheme}, else the {@code scheme} of the router's running configuration's
   * {@code metrics-data-source}, else {@code http}. Read now, from the running configuration, as
   * {@link #insecureSkipVerify()} is.
   */
  public String scheme() {
    if (schemeInCode != null) {
      return schemeInCode;
    }
    MetricsDataSource source = dataSource(router.config());
    return source != null ? source.scheme : DEFAULT_SCHEME;
  }

  /**
   * Whether https scrapes take any certificate the endpoints present: the value set with
   * {@link Builder#insecureSkipVerify}, else the {@code insecureSkipVerify} of the router's
   * running configuration's {@code metrics-data-source}, else false. Read now, from the running
   * configuration, so that a server can say so as it starts, before the first round of scrapes.
   */
  public boolean insecureSkipVerify() {
    if (insecureInCode != null) {
      return insecureInCode;
    }
    MetricsDataSource source = dataSource(router.config());
    return source != null && source.insecureSkipVerify;
  }

  /**
   * Drops the failure, repeated-series, missing-metric and sleep marks of endpoints that left the pool: the marks stay
   * bounded by the pool with pods coming and going, and an endpoint that comes back and fails
   * again is logged again.
   */
  private void forgetDeparted(List<Candidate> pool) {
    Set<String> ids = new HashSet<>(pool.size() * 2);
    for (Candidate c : pool) {
      ids.add(c.id());
    }
    failing.keySet().retainAll(ids);
    repeating.keySet().retainAll(ids);
    lacking.keySet().retainAll(ids);
    sleeping.keySet().retainAll(ids);
  }

  private void fail(String id, String why) {
    failures.incrementAndGet();
    if (mark(failing, id)) {
      LOG.log(Level.WARNING, "scraping metrics of " + id + " failed: " + why);
    }
  }

  /**
   * Marks {@code id} in {@code marks}; true when it was not marked and is still in the pool. A
   * scrape that was under way when its endpoint left can end after the round that dropped the
   * endpoint's marks: marked then, the endpoint would carry the mark back into the pool, and its
   * failures there would go unreported. So the pool is checked after marking (a removal after the
   * check is seen by the next round), and the mark of an endpoint that left is taken back.
   */
  private boolean mark(ConcurrentHashMap<String, Boolean> marks, String id) {
    if (marks.putIfAbsent(id, Boolean.TRUE) != null) {
      return false;
    }
    for (Candidate c : router.endpoints()) {
      if (c.id().equals(id)) {
        return true;
      }
    }
    marks.remove(id);
    return false;
  }

  /** Completed rounds of scrapes (each started, not necessarily answered); tests wait on it. */
  long rounds() {
    return rounds.get();
  }

  /** Scrapes started and not yet handled in full; tests wait on it. */
  int scrapesUnderWay() {
    return inFlight.size();
  }

  /** Completed scrape attempts. */
  public long scrapes() {
    return scrapes.get();
  }

  /** Failed scrape attempts (connection errors, non-200, unparseable bodies). */
  public long failures() {
    return failures.get();
  }

  /**
   * Stops scraping: no new scrape starts, the ones under way are cancelled, and an answer that
   * still arrives is dropped, neither published to the router nor counted or logged as a failure.
   * An answer whose handling has begun is handled in full before this returns (a parsed page's
   * figures published, its warnings logged), so that once it returned the scraper changes
   * nothing: a scraper started in its place for the same router is not overwritten by a late
   * answer of this one, nor a router closed next told of one.
   */
  @Override
  public void close() {
    synchronized (handling) {
      closed = true;
    }
    scheduler.shutdownNow();
    for (CompletableFuture<?> response : responses) {
      response.cancel(true);
    }
  }

  /**
   * A response body as text, read up to a size limit: an endless or oversized answer cancels
   * the exchange (closing its connection) instead of filling the heap. Also cancellable from
   * outside, for the scrape deadline.
   */
  private static final class BoundedBody implements HttpResponse.BodySubscriber<String> {
    private final int maxBytes;
    private final CompletableFuture<String> result = new CompletableFuture<>();
    // written only by the client's serialized onNext calls
    private final ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    private volatile Flow.@Nullable Subscription subscription;

    BoundedBody(int maxBytes) {
      this.maxBytes = maxBytes;
    }

    @Override
    public void onSubscribe(Flow.Subscription s) {
      subscription = s;
      if (result.isDone()) {
        s.cancel(); // aborted before the headers came
      } else {
        s.request(Long.MAX_VALUE);
      }
    }

    @Override
    public void onNext(List<ByteBuffer> items) {
      if (result.isDone()) {
        return;
      }
      for (ByteBuffer b : items) {
        if (b.remaining() > maxBytes - bytes.size()) {
          abort(new IOException("metrics response is above " + maxBytes + " bytes"));
          return;
        }
        byte[] chunk = new byte[b.remaining()];
        b.get(chunk);
        bytes.write(chunk, 0, chunk.length);
      }
    }

    @Override
    public void onError(Throwable t) {
      result.completeExceptionally(t);
    }

    @Override
    public void onComplete() {
      result.complete(bytes.toString(StandardCharsets.UTF_8));
    }

    @Override
    public CompletionStage<String> getBody() {
      return result;
    }

    void abort(Throwable why) {
      if (result.completeExceptionally(why)) {
        Flow.Subscription s = subscription;
        if (s != null) {
          s.cancel();
        }
      }
    }
  }

  /** Configures a {@link MetricsScraper}. */
  public static final class Builder {
    private final Router router;
    private Duration interval = Duration.ofMillis(50);
    private Duration timeout = Duration.ofSeconds(1);
    private int maxResponseBytes = DEFAULT_MAX_RESPONSE_BYTES;
    // null: the running configuration's metrics-data-source says, else the default
    private @Nullable String path;
    private @Nullable String scheme;
    private @Nullable Boolean insecureSkipVerify;
    private int port;

    private Builder(Router router) {
      this.router = Objects.requireNonNull(router, "router");
    }

    /**
     * Time between scrapes of each endpoint; default 50 ms. A duration too long to count in
     * nanoseconds (about 292 years) scrapes once, at start.
     */
    public Builder interval(Duration d) {
      Objects.requireNonNull(d, "interval");
      if (d.isNegative() || d.isZero()) {
        throw new IllegalArgumentException("interval must be positive, got " + d);
      }
      this.interval = d;
      return this;
    }

    /**
     * How long one scrape may take, from connecting to the last byte of the response; default
     * 1 s. A scrape that takes longer is a failure, and the next one starts afresh. A duration
     * of 2^62 ns (about 146 years) or more, {@code ChronoUnit.FOREVER} included, sets no limit:
     * the endpoint is scraped again only after its scrape ends (or its endpoint left the pool).
     */
    public Builder timeout(Duration d) {
      Objects.requireNonNull(d, "timeout");
      if (d.isNegative() || d.isZero()) {
        throw new IllegalArgumentException("timeout must be positive, got " + d);
      }
      this.timeout = d;
      return this;
    }

    /**
     * The largest response read; default 4 MiB (a vLLM exposition is tens to hundreds of KiB).
     * A longer one is a failure, so an endpoint whose path streams without end cannot exhaust
     * the heap.
     */
    public Builder maxResponseBytes(int bytes) {
      if (bytes <= 0) {
        throw new IllegalArgumentException("maxResponseBytes must be > 0, got " + bytes);
      }
      this.maxResponseBytes = bytes;
      return this;
    }

    /**
     * Metrics path; default {@code /metrics}, or the {@code path} of the
     * {@code metrics-data-source} plugin of the router's running configuration when it declares
     * one (followed across {@link Router#reconfigure reloads}). A path set here stays, whatever
     * the configuration says.
     *
     * @throws IllegalArgumentException naming {@code path} when it does not start with '/', is
     *     not valid in a URI as written (a space must be {@code %20}) or has a fragment
     */
    public Builder path(String p) {
      Objects.requireNonNull(p, "path");
      String error = pathError(p);
      if (error != null) {
        throw new IllegalArgumentException("path " + error);
      }
      this.path = p;
      return this;
    }

    /**
     * {@code http} (default) or {@code https}; the {@code scheme} of the
     * {@code metrics-data-source} plugin of the router's running configuration is the default when
     * it declares one (followed across {@link Router#reconfigure reloads}). A scheme set here
     * stays, whatever the configuration says.
     */
    public Builder scheme(String s) {
      Objects.requireNonNull(s, "scheme");
      if (!"http".equals(s) && !"https".equals(s)) {
        throw new IllegalArgumentException("scheme must be http or https, got '" + s + "'");
      }
      this.scheme = s;
      return this;
    }

    /**
     * Whether an {@code https} scrape takes the model server's certificate without checking it;
     * default false: the certificate must chain to a certificate the JVM trusts and name the
     * endpoint's address, or the scrape fails. With true any certificate is taken, self-signed,
     * expired or issued for another address, as the upstream endpoint picker does by default
     * ({@code --model-server-metrics-https-insecure-skip-verify}, default true). The scrape is
     * still encrypted, but no longer authenticated: whoever can intercept the connection to an
     * endpoint can answer in its place and hand the router made-up load figures, steering
     * requests towards or away from that endpoint. Use it only where the network between the
     * gateway and the model servers is trusted (a cluster network with policies), and prefer
     * adding the servers' certificate authority to the JVM's trust store. No effect on
     * {@code http} scrapes. Unless set here, the {@code insecureSkipVerify} of the
     * {@code metrics-data-source} plugin of the router's running configuration says (followed
     * across {@link Router#reconfigure reloads}), else false; a value set here, true or false,
     * stays whatever the configuration says.
     */
    public Builder insecureSkipVerify(boolean skip) {
      this.insecureSkipVerify = skip;
      return this;
    }

    /**
     * The port the metrics are read from on every endpoint's host, for model servers that
     * publish them on a port other than the one requests go to; default 0: each endpoint's own
     * port. Failures are still logged and counted under the endpoint's address.
     *
     * @throws IllegalArgumentException naming {@code port} when it is not in 0..65535
     */
    public Builder port(int p) {
      if (p < 0 || p > 65535) {
        throw new IllegalArgumentException("port must be in 0..65535, got " + p);
      }
      this.port = p;
      return this;
    }

    /** Starts scraping at once. */
    public MetricsScraper start() {
      return new MetricsScraper(this).start();
    }
  }
}
