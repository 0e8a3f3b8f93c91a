package io.epp4j.core;

import io.epp4j.api.Candidate;
import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

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

  EndpointState(Endpoint endpoint, EndpointMetrics metrics, InFlight inFlight) {
    this.endpoint = endpoint;
    this.metrics = metrics;
    this.inFlight = inFlight;
    this.waiting = metrics.waitingRequests();
    this.running = metrics.runningRequests();
    this.kvUsage = metrics.kvCacheUsage();
    this.scrapedAt = metrics.scrapedAtNanos();
  }

  EndpointState withMetrics(EndpointMetrics m) {
    return new EndpointState(endpoint, m, inFlight);
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
