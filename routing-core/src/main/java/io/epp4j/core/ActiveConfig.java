package io.epp4j.core;

import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Plugin;
import io.epp4j.api.PoolListener;
import io.epp4j.api.RequestListener;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Ticker;
import java.util.ArrayList;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Supplier;
import java.util.logging.Logger;
import org.jspecify.annotations.Nullable;

/**
 * One configuration as the router runs it: the {@link RouterConfig}, the listeners found among
 * its plugins, a throttled warning per plugin, and how each plugin was declared (so a reload can
 * keep the instances it declares again). Immutable except for {@link #supersede}, which a reload
 * calls so that decisions routed under this configuration stop calling the plugins the running
 * configuration no longer uses.
 */
final class ActiveConfig {
  private static final Logger LOG = Logger.getLogger(Router.class.getName());

  final RouterConfig config;
  final RequestListener[] requestListeners;
  final ThrottledWarning[] requestListenerWarnings;
  // per request listener: whether its ask for a reserved request header was logged
  private final AtomicBoolean[] reservedAskReported;
  final PoolListener[] poolListeners;
  /** Every plugin and extra listener, by identity. */
  final Set<Object> members;
  /** How the configuration file declared each named plugin; empty for configs built in code. */
  final Map<String, PluginReuse.Declared> declared;
  /** The router's ledger, which decisions routed under this configuration release into. */
  final InFlightLedger ledger;
  /** The configuration's admitters, in order. */
  final io.epp4j.api.Admitter[] admitters;
  /** The configuration's named plugins that prepare requests, in the configuration's order. */
  final io.epp4j.api.RequestPreparer[] preparers;
  /** The configuration's saturation settings, or null to use the router's. */
  final @Nullable PoolSaturation saturation;
  /** The configuration's saturation detector plugin, which then decides instead; or null. */
  final io.epp4j.api.@Nullable SaturationDetector saturationDetector;
  /** Extractors that turn figures off for some engine ({@code loraSpec: ""}), else empty. */
  private final CoreMetricsExtractor[] metricMasks;
  private final Map<Object, ThrottledWarning> warnings;
  private final ThrottledWarning routerWarning;
  /** The router's running configuration: a replaced one asks it who still hears its decisions. */
  private final Supplier<ActiveConfig> running;
  /** Whether a plugin a reload dropped is still open, waiting for its close. */
  private final java.util.function.Predicate<Object> awaitingClose;
  /** Whether a reload replaced this configuration. */
  private volatile boolean superseded;
  /** Whether the router has closed (and with it every plugin of every configuration). */
  private final java.util.function.BooleanSupplier routerClosed;
  /** The plugins the router closes: every member but the builder's extra listeners. */
  private final Set<Plugin> owned;
  /** Per request listener: whether the router closes it (false for the builder's extra ones). */
  private final boolean[] closedWithRouter;

  ActiveConfig(RouterConfig config, Map<String, PluginReuse.Declared> declared,
      List<Object> extraListeners, InFlightLedger ledger, Ticker ticker,
      ThrottledWarning routerWarning, java.util.function.BooleanSupplier routerClosed,
      Supplier<ActiveConfig> running, java.util.function.Predicate<Object> awaitingClose) {
    this.config = config;
    this.awaitingClose = awaitingClose;
    this.running = running;
    this.routerClosed = routerClosed;
    this.ledger = ledger;
    this.declared = Map.copyOf(declared);
    this.routerWarning = routerWarning;
    this.admitters = config.admitters().toArray(new io.epp4j.api.Admitter[0]);
    List<io.epp4j.api.RequestPreparer> prep = new ArrayList<>();
    for (Plugin p : config.plugins().values()) {
      if (p instanceof io.epp4j.api.RequestPreparer r && !prep.contains(r)) {
        prep.add(r);
      }
    }
    this.preparers = prep.toArray(new io.epp4j.api.RequestPreparer[0]);
    List<CoreMetricsExtractor> masks = new ArrayList<>();
    for (Plugin p : config.plugins().values()) {
      if (p instanceof CoreMetricsExtractor x && x.masks() && !masks.contains(x)) {
        masks.add(x);
      }
    }
    this.metricMasks = masks.toArray(new CoreMetricsExtractor[0]);
    this.saturation = config.saturation().map(sat -> new PoolSaturation(sat.queueThreshold(),
        sat.kvCacheThreshold(), RouterSettings.nanos(sat.metricsStaleness()), ticker))
        .orElse(null);
    this.saturationDetector = config.saturationDetector().orElse(null);
    Set<Object> all = Collections.newSetFromMap(new IdentityHashMap<>());
    all.addAll(plugins(config));
    all.addAll(extraListeners);
    this.members = Collections.unmodifiableSet(all);
    List<RequestListener> rl = new ArrayList<>();
    List<PoolListener> pl = new ArrayList<>();
    for (Object o : all) {
      if (o instanceof RequestListener r) {
        rl.add(r);
      }
      if (o instanceof PoolListener p) {
        pl.add(p);
      }
    }
    this.requestListeners = rl.toArray(new RequestListener[0]);
    this.owned = plugins(config);
    this.closedWithRouter = new boolean[requestListeners.length];
    for (int i = 0; i < requestListeners.length; i++) {
      closedWithRouter[i] = owned.contains(requestListeners[i]);
    }
    this.poolListeners = pl.toArray(new PoolListener[0]);
    this.warnings = warningsByPlugin(config, all, ticker);
    this.requestListenerWarnings = new ThrottledWarning[requestListeners.length];
    this.reservedAskReported = new AtomicBoolean[requestListeners.length];
    for (int i = 0; i < requestListeners.length; i++) {
      requestListenerWarnings[i] = warnings.get(requestListeners[i]);
      reservedAskReported[i] = new AtomicBoolean();
    }
  }

  /**
   * {@code m} as this configuration publishes it for {@code e}: without the figures a
   * {@code core-metrics-extractor} turns off for its engine. Runs as metrics are published.
   */
  EndpointMetrics published(Endpoint e, EndpointMetrics m) {
    for (CoreMetricsExtractor x : metricMasks) {
      m = x.mask(e, m);
    }
    return m;
  }

  /** Every plugin instance the configuration uses: named ones, profile members, the handler. */
  static Set<Plugin> plugins(RouterConfig config) {
    Set<Plugin> all = Collections.newSetFromMap(new IdentityHashMap<>());
    all.addAll(config.plugins().values());
    all.add(config.profileHandler());
    for (SchedulingProfile p : config.profiles().values()) {
      all.addAll(p.filters());
      p.scorers().forEach(ws -> all.add(ws.scorer()));
      all.add(p.picker());
    }
    return all;
  }

  /**
   * One throttled warning per plugin or listener instance, named as the configuration names it,
   * so that each broken plugin gets its own log budget.
   */
  private static Map<Object, ThrottledWarning> warningsByPlugin(RouterConfig config,
      Set<Object> all, Ticker ticker) {
    Map<Object, ThrottledWarning> m = new IdentityHashMap<>();
    config.plugins().forEach((name, p) ->
        m.putIfAbsent(p, new ThrottledWarning(LOG, ticker, "plugin '" + name + "'")));
    for (SchedulingProfile p : config.profiles().values()) {
      for (SchedulingProfile.WeightedScorer ws : p.scorers()) {
        m.putIfAbsent(ws.scorer(), new ThrottledWarning(LOG, ticker, "scorer '" + ws.name() + "'"));
      }
    }
    for (Object o : all) {
      m.computeIfAbsent(o, x -> new ThrottledWarning(LOG, ticker,
          "plugin " + x.getClass().getName()));
    }
    return m;
  }

  /** The warning that names {@code plugin}, or the router's own for an unknown object. */
  ThrottledWarning warning(Object plugin) {
    return warnings.getOrDefault(plugin, routerWarning);
  }

  /**
   * Tells this configuration's pool listeners that {@code old} did not have about every member
   * of {@code pool}, so they know the pool before any route uses them.
   */
  void introducePool(ActiveConfig old, PoolSnapshot pool,
      java.util.function.Function<PoolListener, @Nullable List<Endpoint>> heardBefore) {
    for (PoolListener l : poolListeners) {
      if (old.members.contains(l)) {
        continue;
      }
      // a listener an earlier reload dropped and this one takes back heard nothing meanwhile:
      // the endpoints that left since then are gone for it too
      List<Endpoint> heard = heardBefore.apply(l);
      if (heard != null) {
        for (Endpoint e : heard) {
          if (pool.get(e.id()) == null) {
            try {
              l.onEndpointRemoved(e);
            } catch (RuntimeException x) {
              warning(l).report("threw " + x.getClass().getName() + " in onEndpointRemoved", x);
            }
          }
        }
      }
      for (EndpointState s : pool.states) {
        try {
          l.onEndpointAdded(s.endpoint);
        } catch (RuntimeException x) {
          warning(l).report("threw " + x.getClass().getName() + " in onEndpointAdded", x);
        }
      }
    }
  }

  /**
   * Tells every pool listener about removals, then members whose labels changed, then additions
   * (the order {@link PoolListener} promises). A listener that throws is logged (throttled per
   * listener) and skipped: the pool change has happened and the other listeners must still hear
   * it, or their per-endpoint state would drift from the pool.
   */
  void notifyPool(List<Endpoint> removed, List<PoolSnapshot.Relabel> relabelled,
      List<Endpoint> added) {
    // after close() the pool may still change (a discovery timer, a caller's shutdown order):
    // the router's own plugins are closed and hear no more; the builder's extra listeners,
    // which it does not close, still do
    boolean closed = routerClosed.getAsBoolean();
    for (PoolListener l : poolListeners) {
      if (closed && owned.contains(l)) {
        continue;
      }
      for (Endpoint e : removed) {
        try {
          l.onEndpointRemoved(e);
        } catch (RuntimeException x) {
          warning(l).report("threw " + x.getClass().getName() + " in onEndpointRemoved", x);
        }
      }
      for (PoolSnapshot.Relabel r : relabelled) {
        try {
          l.onEndpointChanged(r.previous(), r.current());
        } catch (RuntimeException x) {
          warning(l).report("threw " + x.getClass().getName() + " in onEndpointChanged", x);
        }
      }
      for (Endpoint e : added) {
        try {
          l.onEndpointAdded(e);
        } catch (RuntimeException x) {
          warning(l).report("threw " + x.getClass().getName() + " in onEndpointAdded", x);
        }
      }
    }
  }

  /**
   * Tells every pool listener that the engines of {@code endpoints} dropped their prefix caches
   * (they fell asleep); a listener that throws is logged and skipped, as in {@link #notifyPool}.
   */
  void notifyCacheDropped(List<Endpoint> endpoints) {
    boolean closed = routerClosed.getAsBoolean();
    for (PoolListener l : poolListeners) {
      if (closed && owned.contains(l)) {
        continue;
      }
      for (Endpoint e : endpoints) {
        try {
          l.onEndpointCacheDropped(e);
        } catch (RuntimeException x) {
          warning(l).report("threw " + x.getClass().getName() + " in onEndpointCacheDropped", x);
        }
      }
    }
  }

  /** The members of {@code a} not in {@code b}, by identity. */
  static Set<Object> difference(Set<Object> a, Set<Object> b) {
    Set<Object> d = Collections.newSetFromMap(new IdentityHashMap<>());
    for (Object o : a) {
      if (!b.contains(o)) {
        d.add(o);
      }
    }
    return d;
  }

  /**
   * Marks this configuration replaced: from now on its decisions reach only the listeners the
   * running configuration still uses. Comparing with the running one rather than with the
   * configuration that replaced this one matters when several reloads pass during one request: a
   * plugin the first reload kept and a later one dropped (and closed) must not hear it either.
   */
  void supersede() {
    superseded = true;
  }

  /** Whether the router closes {@code member} (false for the builder's extra listeners). */
  boolean closesWithRouter(Object member) {
    return owned.contains(member);
  }

  /** Whether the router has closed. */
  boolean routerClosed() {
    return routerClosed.getAsBoolean();
  }

  /**
   * Whether request listener {@code i} has been closed, or is about to be: a reload dropped it
   * and its close has begun, or the router closed. A decision finished after that must not call
   * into it. Until then it hears how the requests it saw routed end, even once a reload dropped
   * it: a listener that a later reload takes back would otherwise count them in flight until
   * they expire, and one that holds something per request (a permit, a buffer) would hold it
   * until it is closed.
   */
  boolean isRetired(int i) {
    return superseded && !running.get().members.contains(requestListeners[i])
        && !awaitingClose.test(requestListeners[i])
        || closedWithRouter[i] && routerClosed.getAsBoolean();
  }

  /**
   * Tells the request listeners about a routed decision. A listener that throws is reported
   * (throttled) and skipped: what a listener learns is an optimisation, and the endpoint was
   * already chosen, so the request stays routed.
   */
  void afterRouting(InferenceRequest request, CycleState cycleState, RoutingDecision decision) {
    RequestListener[] listeners = requestListeners;
    int refused = 0;
    for (int i = 0; i < listeners.length; i++) {
      try {
        listeners[i].afterRouting(request, cycleState, decision);
      } catch (RuntimeException e) {
        requestListenerWarnings[i].report("threw " + e.getClass().getName()
            + " in afterRouting; the request was routed anyway", e);
      }
      List<String> r = decision.refusedRequestHeaders();
      if (r.size() > refused) {
        reportReservedAsk(i, r.subList(refused, r.size()));
        refused = r.size();
      }
    }
  }

  /**
   * Logs, once per listener, that it asked for a request header the gateway sets from the
   * decision itself; the ask was ignored ({@link RoutingDecision#RESERVED_REQUEST_HEADERS}).
   */
  private void reportReservedAsk(int i, List<String> names) {
    if (reservedAskReported[i].compareAndSet(false, true)) {
      LOG.warning(requestListenerWarnings[i].source() + " asked for request header "
          + String.join(", ", names) + ", which the gateway sets from the routing decision;"
          + " the ask is ignored (logged once)");
    }
  }
}
