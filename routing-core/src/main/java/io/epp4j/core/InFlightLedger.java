package io.epp4j.core;

import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.ProfileResult;
import io.epp4j.api.RequestListener;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.util.Arrays;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicIntegerFieldUpdater;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Function;
import java.util.function.LongConsumer;
import java.util.function.LongSupplier;
import org.jspecify.annotations.Nullable;

/**
 * Every routed request whose in-flight counts are still held, so that a request the gateway
 * never finishes (a dropped decision, a lost callback, a decision that was garbage-collected)
 * is released after a maximum age instead of counting against its endpoint forever.
 *
 * <p>Each {@link Lease} is released exactly once, by whichever comes first: the gateway's
 * {@code onComplete}/{@code onFailure} or expiry. Expiry is lazy: callers on the routing and
 * metrics paths, and readers of the in-flight figures, offer the current time, and one of them
 * sweeps at most once per {@code maxAge / 8}, so no timer thread exists and a route that does not
 * sweep pays one volatile read. A sweep walks the requests in flight, which are few compared with the routes in between.
 */
final class InFlightLedger {
  private final long maxAgeNanos;
  private final long sweepEveryNanos;
  private final LongConsumer onExpired;
  private final LongSupplier clock;
  // the current pool's counters of an endpoint, for a request a fallback serves
  private final Function<String, EndpointState.@Nullable InFlight> counters;
  // after a move: makes the counts the lease holds findable by a return of their endpoints
  private final java.util.function.Consumer<Lease> moved;
  // the lease itself is the key: identity equality, and no per-request id to generate
  private final Set<Lease> live = ConcurrentHashMap.newKeySet();
  private final AtomicLong nextSweep;

  /**
   * @param onExpired called after a sweep that released something, with how many it released
   */
  InFlightLedger(long maxAgeNanos, long nowNanos, LongConsumer onExpired) {
    this(maxAgeNanos, nowNanos, onExpired, id -> null, System::nanoTime);
  }

  /**
   * @param onExpired called after a sweep that released something, with how many it released
   * @param counters  the in-flight counters of an endpoint of the current pool, null when it is
   *                  not in the pool: where {@link #move} counts a request a fallback serves
   * @param clock     the router's clock, for {@link #renew}
   */
  InFlightLedger(long maxAgeNanos, long nowNanos, LongConsumer onExpired,
      Function<String, EndpointState.@Nullable InFlight> counters, LongSupplier clock) {
    this(maxAgeNanos, nowNanos, onExpired, counters, clock, lease -> { });
  }

  /**
   * @param counters  the in-flight counters of an endpoint, those of the current pool or those
   *                  kept for its return; null when it has none: where {@link #move} counts a
   *                  request a fallback serves
   * @param moved     called after {@link #move} with the lease, so that counts it now holds on
   *                  counters a pool change dropped meanwhile are kept for their endpoint
   */
  InFlightLedger(long maxAgeNanos, long nowNanos, LongConsumer onExpired,
      Function<String, EndpointState.@Nullable InFlight> counters, LongSupplier clock,
      java.util.function.Consumer<Lease> moved) {
    this.counters = counters;
    this.moved = moved;
    this.clock = clock;
    this.maxAgeNanos = maxAgeNanos;
    this.sweepEveryNanos = Math.max(1, maxAgeNanos / 8);
    this.onExpired = onExpired;
    this.nextSweep = new AtomicLong(nowNanos + sweepEveryNanos);
  }

  /**
   * The lease a routed request takes: its estimated tokens on the first endpoint of every
   * profile that picked one, counted in the pool snapshot it was routed from.
   */
  static Lease lease(InferenceRequest request, PoolSnapshot snap,
      Map<String, ProfileResult> results, long now) {
    long tokens = (long) request.estimatedPromptTokens() + request.maxOutputTokens();
    if (results.size() == 1) {
      Endpoint e = results.values().iterator().next().primary();
      EndpointState s = e == null ? null : snap.get(e.id());
      return new Lease(now, tokens, s == null ? null : s.inFlight, null);
    }
    EndpointState.InFlight[] c = new EndpointState.InFlight[results.size()];
    int k = 0;
    for (ProfileResult r : results.values()) {
      Endpoint e = r.primary();
      if (e != null) {
        EndpointState s = snap.get(e.id());
        if (s != null) {
          c[k++] = s.inFlight;
        }
      }
    }
    return new Lease(now, tokens, null, k == c.length ? c : Arrays.copyOf(c, k));
  }

  /** Counts the lease's request on its endpoints and remembers it until released. */
  void acquire(Lease lease) {
    lease.add(1);
    live.add(lease);
  }

  /**
   * The lease's request is still being served: its age counts from now. A lease a sweep has
   * expired meanwhile stays expired (its counts were given back).
   */
  void renew(Lease lease) {
    Lease.START.setOpaque(lease, clock.getAsLong());
  }

  /** Releases the lease unless it was released or expired already. */
  void release(Lease lease) {
    if (lease.finish(Lease.RELEASED)) {
      live.remove(lease);
    }
  }

  /**
   * Moves the lease's counts from {@code fromId} to {@code toId}, when it still holds them: the
   * request went to a fallback. Counts held on another profile's endpoint stay where they are;
   * when {@code toId} has left the pool they go to the counters kept for its return, as those of
   * a request routed there before it left, so that it counts there if it comes back while the
   * request runs. The counts are found by endpoint id, so they move also when {@code fromId}
   * has left the pool (or left and came back) since the request was routed.
   */
  void move(Lease lease, String fromId, String toId) {
    lease.move(fromId, counters.apply(toId));
    moved.accept(lease);
  }

  /** Sweeps when one is due; cheap otherwise. */
  void expireIfDue(long nowNanos) {
    long due = nextSweep.get();
    if (nowNanos - due < 0 || !nextSweep.compareAndSet(due, nowNanos + sweepEveryNanos)) {
      return;
    }
    long expired = 0;
    for (var it = live.iterator(); it.hasNext(); ) {
      Lease l = it.next();
      if (nowNanos - (long) Lease.START.getOpaque(l) > maxAgeNanos
          && l.finish(Lease.EXPIRED)) {
        it.remove();
        expired++;
      }
    }
    if (expired > 0) {
      onExpired.accept(expired);
    }
  }

  /** The counts one routed request holds on the endpoints it was routed to. */
  static final class Lease {
    static final int HELD = 0;
    static final int RELEASED = 1;
    static final int EXPIRED = 2;
    private static final AtomicIntegerFieldUpdater<Lease> STATE =
        AtomicIntegerFieldUpdater.newUpdater(Lease.class, "state");

    // renewed by a gateway that says the request is still served (RoutingDecision.onActivity),
    // read by sweeps: opaque accesses (not volatile), so that routing, which sets it in the
    // constructor, pays no fence for it; the lease is published through the ledger's set
    @SuppressWarnings("UnusedVariable") // accessed through START
    private long startNanos;
    static final VarHandle START;

    static {
      try {
        START = MethodHandles.lookup().findVarHandle(Lease.class, "startNanos", long.class);
      } catch (ReflectiveOperationException e) {
        throw new ExceptionInInitializerError(e);
      }
    }
    private final long tokens;
    // one profile (the common case): a single counter, no array; both change only under the
    // lease's lock, when a fallback serves the request (move)
    private EndpointState.@Nullable InFlight counter;
    private EndpointState.InFlight @Nullable [] counters;
    private volatile int state;

    Lease(long startNanos, long tokens, EndpointState.@Nullable InFlight counter,
        EndpointState.InFlight @Nullable [] counters) {
      this.startNanos = startNanos;
      this.tokens = tokens;
      this.counter = counter;
      this.counters = counters;
    }

    /** Moves from held to {@code to}; true for exactly one caller, which gives the counts back. */
    boolean finish(int to) {
      if (!STATE.compareAndSet(this, HELD, to)) {
        return false;
      }
      synchronized (this) {
        add(-1);
      }
      return true;
    }

    /**
     * Counts the request on {@code to} (null: nowhere) instead of the counter of {@code fromId}
     * (found by id: the pool may have replaced it since) while it is held;
     * a release that already happened, or that comes after, gives back where the counts are.
     */
    synchronized void move(String fromId, EndpointState.@Nullable InFlight to) {
      if (state != HELD) {
        return;
      }
      EndpointState.InFlight from;
      if (counter != null && counter.endpointId.equals(fromId)) {
        from = counter;
        if (from == to) {
          return;
        }
        counter = to;
      } else if (counters != null) {
        int i = indexOf(counters, fromId);
        if (i < 0 || counters[i] == to) {
          return;
        }
        from = counters[i];
        EndpointState.InFlight[] c = counters.clone();
        if (to != null) {
          c[i] = to;
        } else {
          System.arraycopy(c, i + 1, c, i, c.length - i - 1);
          c = Arrays.copyOf(c, c.length - 1);
        }
        counters = c;
      } else {
        return;
      }
      from.requests.addAndGet(-1);
      from.tokens.addAndGet(-tokens);
      if (to != null) {
        to.requests.addAndGet(1);
        to.tokens.addAndGet(tokens);
      }
    }

    /**
     * Counts on {@code to} every count the lease holds on {@code from} (compared by identity),
     * while it is held: the endpoint of those counters came back with others. Unlike
     * {@link #move}, which moves one profile's count to a fallback, this moves them all: when
     * several profiles picked the endpoint (P/D on one replica), the request counts there once
     * per profile, and all of them are where the endpoint counts now.
     */
    synchronized void reattach(EndpointState.InFlight from, EndpointState.InFlight to) {
      if (state != HELD || from == to) {
        return;
      }
      int n = 0;
      if (counter == from) {
        counter = to;
        n = 1;
      } else if (counters != null) {
        EndpointState.InFlight[] c = counters.clone();
        for (int i = 0; i < c.length; i++) {
          if (c[i] == from) {
            c[i] = to;
            n++;
          }
        }
        counters = c;
      }
      if (n > 0) {
        from.requests.addAndGet(-n);
        from.tokens.addAndGet(-n * tokens);
        to.requests.addAndGet(n);
        to.tokens.addAndGet(n * tokens);
      }
    }

    /** The counters the lease holds its request on now. */
    synchronized EndpointState.InFlight[] held() {
      if (counter != null) {
        return new EndpointState.InFlight[] {counter};
      }
      return counters == null ? new EndpointState.InFlight[0] : counters.clone();
    }

    private static int indexOf(EndpointState.InFlight[] a, String endpointId) {
      for (int i = 0; i < a.length; i++) {
        if (a[i].endpointId.equals(endpointId)) {
          return i;
        }
      }
      return -1;
    }

    private void add(int sign) {
      if (counter != null) {
        counter.requests.addAndGet(sign);
        counter.tokens.addAndGet(sign * tokens);
      }
      if (counters != null) {
        for (EndpointState.InFlight f : counters) {
          f.requests.addAndGet(sign);
          f.tokens.addAndGet(sign * tokens);
        }
      }
    }
  }

  /**
   * Feeds the lifecycle of one decision into its lease and into the request listeners of the
   * configuration it was routed under, so a listener hears about a request's end only if it saw
   * the request routed. Listeners a reload dropped still hear it until their close begins (see
   * {@link ActiveConfig#isRetired}), and are skipped from then on.
   */
  static final class Tracker implements RoutingDecision.Callbacks {
    // three fields, as few as the lifecycle needs: one is allocated per routed request
    private final ActiveConfig active;
    private final InferenceRequest request;
    private final Lease lease;

    Tracker(ActiveConfig active, InferenceRequest request, Lease lease) {
      this.active = active;
      this.request = request;
      this.lease = lease;
    }

    @Override
    public void firstToken(RoutingDecision decision) {
      tell("onFirstToken", (l, r, e, d) -> l.onFirstToken(r, e), decision.servedBy(), decision);
    }

    @Override
    public void complete(RoutingDecision decision, Usage usage) {
      active.ledger.release(lease);
      tell("onComplete", RequestListener::onComplete, decision.servedBy(), usage);
    }

    @Override
    public void failure(RoutingDecision decision, Throwable cause) {
      active.ledger.release(lease);
      tell("onFailure", RequestListener::onFailure, decision.servedBy(), cause);
    }

    @Override
    public void activity(RoutingDecision decision) {
      active.ledger.renew(lease);
      tell("onActivity", (l, r, e, a) -> l.onActivity(r, e), decision.servedBy(), decision);
    }

    @Override
    public void fallback(RoutingDecision decision, Endpoint from, Endpoint to) {
      active.ledger.move(lease, from.id(), to.id());
      RequestListener[] listeners = active.requestListeners;
      for (int i = 0; i < listeners.length; i++) {
        if (active.isRetired(i)) {
          continue;
        }
        try {
          listeners[i].onFallback(request, from, to);
        } catch (RuntimeException x) {
          active.requestListenerWarnings[i].report(
              "threw " + x.getClass().getName() + " in onFallback", x);
        }
      }
    }

    /** One lifecycle call with its argument; the calls above capture nothing, so none allocates. */
    private interface Call<A> {
      void on(RequestListener listener, InferenceRequest request, Endpoint endpoint, A arg);
    }

    // listeners run on the gateway's thread: one that throws must neither reach the gateway
    // nor keep the listeners after it from hearing about the request
    private <A> void tell(String method, Call<A> call, Endpoint e, A arg) {
      RequestListener[] listeners = active.requestListeners;
      for (int i = 0; i < listeners.length; i++) {
        if (active.isRetired(i)) {
          continue;
        }
        try {
          call.on(listeners[i], request, e, arg);
        } catch (RuntimeException x) {
          active.requestListenerWarnings[i].report(
              "threw " + x.getClass().getName() + " in " + method, x);
        }
      }
    }
  }
}
