package io.epp4j.core;

import io.epp4j.api.HintListener;
import io.epp4j.api.PrefixBlocks;
import io.epp4j.api.RouterHints;
import io.epp4j.api.Ticker;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.LongConsumer;
import java.util.function.Supplier;
import org.jspecify.annotations.Nullable;

/**
 * A router's {@link RouterHints}: hands prefix and session hints from other routers to the
 * running configuration's {@link HintListener}s and keeps the other routers' in-flight figures
 * inside this router's per-endpoint counters.
 *
 * <p>Remote figures are added to the same counters local leases use, so a route reads one number
 * per endpoint and pays nothing for sharing; the remote share is tracked beside it
 * ({@code InFlight.remoteRequests}) so that {@link #forEachLocalInFlight} can report this
 * router's own share without echoing what others told it. Each figure replaces the previous one
 * of its origin, so a lost message costs accuracy until the next refresh, never a drift; a
 * figure older than the router's {@code inFlightMaxAge} is taken back by a sweep, at most one per
 * eighth of that age, run from {@link Router#updateMetrics} and from the hint calls themselves.
 *
 * <p>Created with the router's settings so plugins can ask for it while the first
 * configuration loads; {@link #bind} connects it to the router once that exists, and calls
 * before that are ignored. One lock guards the remote figures: only hint deliveries, sweeps and
 * reads of the local share take it, never a route.
 */
final class HintApplier implements RouterHints {
  /** More remote routers than this sharing one pool is a misconfiguration, not a fleet. */
  static final int MAX_ORIGINS = 1024;
  /**
   * The largest remote figure taken for one endpoint: a million requests, far beyond what an
   * engine runs, yet small enough that {@link #MAX_ORIGINS} of them plus the local count cannot
   * overflow the {@code int} counters (a wrapped counter would make a loaded endpoint look idle).
   */
  static final int MAX_REMOTE_REQUESTS = 1 << 20;
  /** The largest remote token figure taken for one endpoint (2^40); same reason. */
  static final long MAX_REMOTE_TOKENS = 1L << 40;

  private static final class Bound {
    final Supplier<PoolSnapshot> pool;
    final Supplier<ActiveConfig> active;
    final Ticker ticker;
    final long maxAgeNanos;
    // the router's expiry of its own requests, offered the time before they are reported
    final LongConsumer localExpiry;

    Bound(Supplier<PoolSnapshot> pool, Supplier<ActiveConfig> active, Ticker ticker,
        long maxAgeNanos, LongConsumer localExpiry) {
      this.pool = pool;
      this.active = active;
      this.ticker = ticker;
      this.maxAgeNanos = maxAgeNanos;
      this.localExpiry = localExpiry;
    }
  }

  /** One origin's figure on one endpoint, and the counters it was added to. */
  private static final class Remote {
    final EndpointState.InFlight target;
    int requests;
    long tokens;
    long updatedNanos;

    Remote(EndpointState.InFlight target) {
      this.target = target;
    }
  }

  /** A configuration's hint listeners, and which of them the router closes. */
  private record Listeners(ActiveConfig active, HintListener[] listeners, boolean[] owned) {}

  /** Calls of shareState not undone by stopSharingState: the plugins that share state. */
  private final AtomicInteger sharing = new AtomicInteger();
  private volatile @Nullable Bound bound;
  private volatile @Nullable Listeners listeners;
  private final Object listenersLock = new Object();
  private final Object lock = new Object();
  // origin -> endpoint id -> figure; guarded by lock
  private final Map<String, Map<String, Remote>> remote = new HashMap<>();
  private long nextSweep = Long.MIN_VALUE;

  /**
   * @param localExpiry the router's expiry of its own unfinished requests, offered the time
   *                    before {@link #forEachLocalInFlight} reports them: a router that routes
   *                    nothing any more must not share requests that expired as in flight
   */
  void bind(Supplier<PoolSnapshot> pool, Supplier<ActiveConfig> active, Ticker ticker,
      long maxAgeNanos, LongConsumer localExpiry) {
    bound = new Bound(pool, active, ticker, maxAgeNanos, localExpiry);
  }

  @Override
  public void shareState() {
    sharing.incrementAndGet();
  }

  @Override
  public void stopSharingState() {
    // never below zero: an unmatched call must not cancel a later shareState
    sharing.getAndUpdate(n -> n > 0 ? n - 1 : 0);
  }

  @Override
  public boolean sharesState() {
    return sharing.get() > 0;
  }

  @Override
  public void prefixSent(String endpointId, PrefixBlocks blocks) {
    Bound b = bound;
    if (b == null) {
      return;
    }
    ActiveConfig a = b.active.get();
    Listeners ls = listeners(a);
    boolean closed = a.routerClosed();
    for (int i = 0; i < ls.listeners.length; i++) {
      HintListener l = ls.listeners[i];
      if (closed && ls.owned[i]) {
        continue; // closed with the router
      }
      try {
        l.onRemotePrefix(endpointId, blocks);
      } catch (RuntimeException e) {
        a.warning(l).report("threw " + e.getClass().getName() + " in onRemotePrefix", e);
      }
    }
  }

  @Override
  public void sessionBound(String sessionKey, String endpointId) {
    Bound b = bound;
    if (b == null) {
      return;
    }
    ActiveConfig a = b.active.get();
    long now = b.ticker.nanos();
    Listeners ls = listeners(a);
    boolean closed = a.routerClosed();
    for (int i = 0; i < ls.listeners.length; i++) {
      HintListener l = ls.listeners[i];
      if (closed && ls.owned[i]) {
        continue; // closed with the router
      }
      try {
        l.onRemoteSession(sessionKey, endpointId, now);
      } catch (RuntimeException e) {
        a.warning(l).report("threw " + e.getClass().getName() + " in onRemoteSession", e);
      }
    }
  }

  private Listeners listeners(ActiveConfig a) {
    Listeners c = listeners;
    if (c != null && c.active == a) {
      return c;
    }
    List<HintListener> found = new ArrayList<>();
    for (Object o : a.members) {
      if (o instanceof HintListener h) {
        found.add(h);
      }
    }
    HintListener[] arr = found.toArray(new HintListener[0]);
    boolean[] owned = new boolean[arr.length];
    for (int i = 0; i < arr.length; i++) {
      owned[i] = a.closesWithRouter(arr[i]);
    }
    c = new Listeners(a, arr, owned);
    synchronized (listenersLock) {
      // kept only while it is the running configuration: a configuration a reload replaced must
      // not stay reachable through this cache, with the plugins it dropped, until the next hint
      Bound b = bound;
      if (b != null && b.active.get() == a) {
        listeners = c;
      }
    }
    return c;
  }

  /** Called once a reload has published a new configuration: forgets the old one's listeners. */
  void configReplaced() {
    synchronized (listenersLock) {
      listeners = null;
    }
  }

  @Override
  public void inFlight(String origin, String endpointId, int requests, long tokens) {
    Bound b = bound;
    if (b == null) {
      return;
    }
    int r = Math.min(MAX_REMOTE_REQUESTS, Math.max(0, requests));
    long t = Math.min(MAX_REMOTE_TOKENS, Math.max(0, tokens));
    long now = b.ticker.nanos();
    EndpointState s = b.pool.get().get(endpointId);
    synchronized (lock) {
      sweepLocked(b, now);
      Map<String, Remote> figures = remote.get(origin);
      Remote e = figures == null ? null : figures.get(endpointId);
      if (figures != null && e != null
          && (s == null || e.target != s.inFlight || (r == 0 && t == 0))) {
        // the endpoint left (or left and came back with new counters), or the figure is 0
        take(e);
        figures.remove(endpointId);
        e = null;
      }
      if (s == null || (r == 0 && t == 0)) {
        if (figures != null && figures.isEmpty()) {
          remote.remove(origin);
        }
        return;
      }
      if (figures == null) {
        if (remote.size() >= MAX_ORIGINS) {
          return;
        }
        figures = new HashMap<>();
        remote.put(origin, figures);
      }
      if (e == null) {
        e = new Remote(s.inFlight);
        figures.put(endpointId, e);
      }
      add(e.target, r - e.requests, t - e.tokens);
      e.requests = r;
      e.tokens = t;
      e.updatedNanos = now;
    }
  }

  @Override
  public void forget(String origin) {
    synchronized (lock) {
      Map<String, Remote> figures = remote.remove(origin);
      if (figures != null) {
        figures.values().forEach(HintApplier::take);
      }
    }
  }

  @Override
  public void forEachLocalInFlight(InFlightVisitor visitor) {
    Bound b = bound;
    if (b == null) {
      return;
    }
    b.localExpiry.accept(b.ticker.nanos());
    EndpointState[] states = b.pool.get().states;
    long[] own = new long[states.length * 2];
    // under the lock that every change of a remote figure holds: a remote figure changes its two
    // counters one after the other, and a read between them took the total from one side of the
    // change and the remote share from the other. Lowered, a figure was then read as this
    // router's own, which it sent to the others. Local leases change only the total: their
    // figures are this router's own whenever they are read
    synchronized (lock) {
      for (int i = 0; i < states.length; i++) {
        EndpointState.InFlight f = states[i].inFlight;
        own[2 * i] = Math.max(0, f.requests.get() - f.remoteRequests.get());
        own[2 * i + 1] = Math.max(0, f.tokens.get() - f.remoteTokens.get());
      }
    }
    for (int i = 0; i < states.length; i++) {
      visitor.visit(states[i].endpoint.id(), (int) own[2 * i], own[2 * i + 1]);
    }
  }

  /** Takes back figures older than the router's in-flight age limit, when a sweep is due. */
  void expireIfDue(long nowNanos) {
    Bound b = bound;
    if (b == null) {
      return;
    }
    synchronized (lock) {
      sweepLocked(b, nowNanos);
    }
  }

  private void sweepLocked(Bound b, long now) {
    if (nextSweep != Long.MIN_VALUE && now - nextSweep < 0) {
      return;
    }
    nextSweep = now + Math.max(1, b.maxAgeNanos / 8);
    PoolSnapshot pool = b.pool.get();
    for (Iterator<Map<String, Remote>> o = remote.values().iterator(); o.hasNext(); ) {
      Map<String, Remote> figures = o.next();
      for (Iterator<Map.Entry<String, Remote>> it = figures.entrySet().iterator(); it.hasNext(); ) {
        Map.Entry<String, Remote> en = it.next();
        Remote e = en.getValue();
        EndpointState s = pool.get(en.getKey());
        if (now - e.updatedNanos > b.maxAgeNanos || s == null || s.inFlight != e.target) {
          take(e);
          it.remove();
        }
      }
      if (figures.isEmpty()) {
        o.remove();
      }
    }
  }

  /** Remote figures held, over every origin and endpoint; for tests. */
  int remoteFigures() {
    synchronized (lock) {
      int n = 0;
      for (Map<String, Remote> m : remote.values()) {
        n += m.size();
      }
      return n;
    }
  }

  private static void take(Remote e) {
    add(e.target, -e.requests, -e.tokens);
  }

  private static void add(EndpointState.InFlight f, int requests, long tokens) {
    // under the lock, which forEachLocalInFlight takes to read the two counters as one
    f.remoteRequests.addAndGet(requests);
    f.requests.addAndGet(requests);
    f.remoteTokens.addAndGet(tokens);
    f.tokens.addAndGet(tokens);
  }
}
