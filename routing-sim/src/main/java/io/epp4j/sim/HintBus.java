package io.epp4j.sim;

import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.PrefixBlocks;
import io.epp4j.api.RequestListener;
import io.epp4j.api.RouterHints;
import io.epp4j.api.RoutingDecision;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.jspecify.annotations.Nullable;

/**
 * Several gateways' routers sharing what they learn, in simulated time: what {@code
 * redis-replication} does through Redis, without Redis. A routed request's block hashes and
 * session reach the other routers {@code delay} later; every {@code flushInterval} each router's
 * own in-flight figures (those that changed, and all every heartbeat) reach the others
 * {@code delay} later. Delivery goes through each router's {@link RouterHints}, the same code
 * that applies the hints {@code redis-replication} reads from its stream.
 */
final class HintBus {
  /** The publisher's flush interval of {@code redis-replication}'s defaults. */
  static final long FLUSH_INTERVAL_NANOS = 2_000_000L;
  /** {@code redis-replication}'s default heartbeat; a whole number of flush intervals. */
  static final long HEARTBEAT_NANOS = 1_000_000_000L;

  static {
    if (HEARTBEAT_NANOS % FLUSH_INTERVAL_NANOS != 0) {
      throw new AssertionError("the heartbeat must fall on a flush");
    }
  }

  /** Schedules a delivery in simulated time. */
  interface Scheduler {
    void at(long timeNanos, Runnable delivery);
  }

  private final long delayNanos;
  private final Scheduler scheduler;
  private final List<RouterHints> routers = new ArrayList<>();
  private final List<Map<String, long[]>> sent = new ArrayList<>();
  private long nextHeartbeat;

  HintBus(long delayNanos, Scheduler scheduler) {
    this.delayNanos = delayNanos;
    this.scheduler = scheduler;
  }

  /** The listener that captures router {@code origin}'s decisions; add it to that router. */
  RequestListener capture(int origin) {
    return new RequestListener() {
      @Override
      public void afterRouting(InferenceRequest request, CycleState state,
          RoutingDecision decision) {
        PrefixBlocks found = state.get(PrefixBlocks.KEY);
        // delivered later, after the cycle has ended: what a cycle-bound value keeps (the prefix
        // scorer's hashes live in an array its thread reuses), as redis-replication queues it
        PrefixBlocks blocks = found == null || found.size() == 0 ? null : found.retained();
        String session = request.sessionKey();
        if (blocks == null && session == null) {
          return;
        }
        String primary = decision.primary().id();
        Endpoint prefill = decision.secondaryEndpoint("prefill");
        String prefillId = prefill == null ? null : prefill.id();
        if (delayNanos == 0) {
          // no delay: the next decision of any gateway, even one at the same instant, knows it
          deliver(origin, primary, prefillId, blocks, session);
        } else {
          scheduler.at(now + delayNanos, () -> deliver(origin, primary, prefillId, blocks,
              session));
        }
      }
    };
  }

  private long now;

  /** The simulation's clock, read when a decision is captured. */
  void tick(long nowNanos) {
    now = nowNanos;
  }

  /** Registers router {@code origin}'s hint side; call in origin order. */
  void register(RouterHints hints) {
    hints.shareState();
    routers.add(hints);
    sent.add(new HashMap<>());
  }

  private void deliver(int origin, String primary, @Nullable String prefill,
      @Nullable PrefixBlocks blocks, @Nullable String session) {
    for (int g = 0; g < routers.size(); g++) {
      if (g == origin) {
        continue;
      }
      RouterHints h = routers.get(g);
      if (blocks != null) {
        h.prefixSent(primary, blocks);
        if (prefill != null && !prefill.equals(primary)) {
          h.prefixSent(prefill, blocks);
        }
      }
      if (session != null) {
        h.sessionBound(session, primary);
      }
    }
  }

  /** One publisher flush of every router's in-flight figures; returns when the next is due. */
  long flushInFlight(long nowNanos) {
    boolean all = nowNanos - nextHeartbeat >= 0;
    if (all) {
      nextHeartbeat = nowNanos + HEARTBEAT_NANOS;
    }
    for (int g = 0; g < routers.size(); g++) {
      Map<String, long[]> before = sent.get(g);
      Map<String, long[]> changes = new HashMap<>();
      routers.get(g).forEachLocalInFlight((ep, r, t) -> {
        long[] b = before.get(ep);
        if (b == null ? (r != 0 || t != 0) : (all || b[0] != r || b[1] != t)) {
          changes.put(ep, new long[] {r, t});
        }
      });
      if (changes.isEmpty()) {
        continue;
      }
      changes.forEach((ep, v) -> {
        if (v[0] == 0 && v[1] == 0) {
          before.remove(ep);
        } else {
          before.put(ep, v);
        }
      });
      String origin = "gateway-" + g;
      int from = g;
      scheduler.at(nowNanos + delayNanos, () -> {
        for (int o = 0; o < routers.size(); o++) {
          if (o != from) {
            RouterHints h = routers.get(o);
            changes.forEach((ep, v) -> h.inFlight(origin, ep, (int) v[0], v[1]));
          }
        }
      });
    }
    return nowNanos + FLUSH_INTERVAL_NANOS;
  }

  /**
   * Whether the last flush left nothing to send: every router's own in-flight figures were 0
   * (and the others were told so). Until one of them routes a request, every flush, heartbeats
   * included, sends nothing.
   */
  boolean quiet() {
    for (Map<String, long[]> m : sent) {
      if (!m.isEmpty()) {
        return false;
      }
    }
    return true;
  }

  /**
   * Leaves out the flushes due at {@code due}, {@code due + FLUSH_INTERVAL_NANOS}, ... before
   * {@code later} (a later flush time on the same grid), which a {@link #quiet} bus would run
   * for nothing: the heartbeats among them would have sent nothing but moved the next heartbeat
   * on, so it is moved as they would have moved it, and the flushes that follow are the ones
   * that would have run.
   */
  void skipFlushes(long due, long later) {
    if (!quiet()) {
      throw new IllegalStateException("flushes skipped while figures are in flight");
    }
    // the first skipped flush at or after the next heartbeat is one; every heartbeat after it
    // falls on a flush, HEARTBEAT_NANOS later
    long first = nextHeartbeat - due <= 0 ? due
        : due + (nextHeartbeat - due + FLUSH_INTERVAL_NANOS - 1) / FLUSH_INTERVAL_NANOS
            * FLUSH_INTERVAL_NANOS;
    if (first - later < 0) {
      nextHeartbeat = first + ((later - 1 - first) / HEARTBEAT_NANOS + 1) * HEARTBEAT_NANOS;
    }
  }
}
