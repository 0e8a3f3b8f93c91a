package io.epp4j.core;

import io.epp4j.api.Candidate;
import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.jspecify.annotations.Nullable;

/**
 * Immutable pairing of an endpoint with its latest metrics, plus in-flight counters shared by
 * every snapshot that contains it. The counters live as long as the endpoint stays in the pool,
 * and beyond while requests counted on them run: an endpoint that comes back at the same address
 * meanwhile takes them up again (see {@code Router}'s pool changes).
 */
final class EndpointState implements Candidate {
  final Endpoint endpoint;
  final EndpointMetrics metrics;
  final InFlight inFlight;
  // copies of the metrics' most read fields: a scorer walking the pool reads this object only
  private final int waiting;
  private final int running;
  private final double kvUsage;
  private final long scrapedAt;
  // the server's start time and prompt-token counter as last known, kept across metrics that
  // lack them (SGLang writes its counter only once it has served a request, a failed scrape
  // publishes nothing), so that a restart is told by comparing with the last known values
  private final double knownStartTime;
  private final long knownPromptTokens;
  /**
   * One stay of the endpoint in the pool: made when it joins, kept by its metrics updates and
   * relabelling, new when it leaves and comes back at the same address. A metrics scrape begun
   * during an earlier stay read the server that was there then, so its answer is dropped (see
   * {@link Router#isMember}).
   */
  final Object membership;

  EndpointState(Endpoint endpoint, EndpointMetrics metrics, InFlight inFlight) {
    this(endpoint, metrics, inFlight, metrics.processStartTimeSeconds(),
        metrics.promptTokensTotal(), new Object());
  }

  private EndpointState(Endpoint endpoint, EndpointMetrics metrics, InFlight inFlight,
      double knownStartTime, long knownPromptTokens, Object membership) {
    this.membership = membership;
    this.endpoint = endpoint;
    this.metrics = metrics;
    this.inFlight = inFlight;
    this.waiting = metrics.waitingRequests();
    this.running = metrics.runningRequests();
    this.kvUsage = metrics.kvCacheUsage();
    this.scrapedAt = metrics.scrapedAtNanos();
    this.knownStartTime = knownStartTime;
    this.knownPromptTokens = knownPromptTokens;
  }

  EndpointState withMetrics(EndpointMetrics m) {
    return new EndpointState(endpoint, m, inFlight,
        m.processStartTimeSeconds() > 0 ? m.processStartTimeSeconds() : knownStartTime,
        m.promptTokensTotal() != EndpointMetrics.NO_COUNT ? m.promptTokensTotal()
            : knownPromptTokens, membership);
  }

  /** This member under new labels, with everything else it had. */
  EndpointState relabelled(Endpoint e) {
    return new EndpointState(e, metrics, inFlight, knownStartTime, knownPromptTokens, membership);
  }

  /**
   * Why {@code next}, this member's next state, shows that its server restarted since this one
   * (the start time known on both sides differs; else the prompt-token counter known on both
   * sides went back, a counter reset as Prometheus reads it), or null when it does not. A scrape
   * that failed in between changes nothing here: the server that answers again with the same
   * start time and a counter no lower is the same process, with its cache.
   */
  @Nullable String restartIn(EndpointState next) {
    double start = next.metrics.processStartTimeSeconds();
    if (start > 0 && knownStartTime > 0) {
      return start != knownStartTime ? "its process start time changed" : null;
    }
    long tokens = next.metrics.promptTokensTotal();
    return tokens != EndpointMetrics.NO_COUNT && knownPromptTokens != EndpointMetrics.NO_COUNT
        && tokens < knownPromptTokens ? "its prompt-token counter went back" : null;
  }

  @Override
  public Endpoint endpoint() {
    return endpoint;
  }

  @Override
  public EndpointMetrics metrics() {
    return metrics;
  }

  @Override
  public int waitingRequests() {
    return waiting;
  }

  @Override
  public int runningRequests() {
    return running;
  }

  @Override
  public double kvCacheUsage() {
    return kvUsage;
  }

  @Override
  public long metricsScrapedAtNanos() {
    return scrapedAt;
  }

  @Override
  public int inFlightRequests() {
    return inFlight.requests.get();
  }

  @Override
  public long inFlightTokens() {
    return inFlight.tokens.get();
  }

  @Override
  public String toString() {
    return endpoint.id();
  }

  /** Router-tracked work on one endpoint. */
  static final class InFlight {
    /** The endpoint counted, so that a lease finds its counter by id after the pool changed. */
    final String endpointId;
    final AtomicInteger requests = new AtomicInteger();
    final AtomicLong tokens = new AtomicLong();
    /**
     * The part of {@link #requests} and {@link #tokens} that other routers reported
     * ({@link HintApplier}): kept inside the same counters so routes read one figure, and
     * tracked here so this router can tell the others its own share.
     */
    final AtomicInteger remoteRequests = new AtomicInteger();
    final AtomicLong remoteTokens = new AtomicLong();

    InFlight(String endpointId) {
      this.endpointId = endpointId;
    }

    /** Whether nothing is counted here: no request of this router's nor another's. */
    boolean idle() {
      return requests.get() == 0 && tokens.get() == 0;
    }
  }
}
