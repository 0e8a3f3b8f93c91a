package io.epp4j.core;

import io.epp4j.api.Plugin;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Predicate;
import java.util.logging.Level;
import java.util.logging.Logger;
import org.jspecify.annotations.Nullable;

/**
 * Closes the plugins a reload dropped, once no route can still be using them.
 *
 * <p>A route reads the configuration once and may still be running a plugin the reload just
 * dropped. Counting routes per configuration would put two contended atomic updates on every
 * route for an event that happens a few times a day, so a dropped plugin is closed after a grace
 * delay instead, far longer than a route takes. A plugin the running configuration uses again by
 * then (a reload took the same instance back) is not closed. A plugin dropped, taken back and
 * dropped again waits its full delay from the last drop: only the timer of its latest drop may
 * close it. Each plugin is closed at most once through this class; checks and closes happen under
 * the router's membership lock, so no reload can take a plugin back while it is being closed.
 */
final class RetiredPlugins {
  private static final Logger LOG = Logger.getLogger(Router.class.getName());

  private final Executor timer;
  private final Predicate<Object> inUse;
  private final Object lock;
  /**
   * Dropped and not yet closed, each with the number of the drop that last put it here; guarded
   * by {@link #lock}.
   */
  private final Map<Object, Long> pending = new IdentityHashMap<>();
  /**
   * A copy of {@link #pending}'s keys, published after every change, so that the lifecycle of a
   * decision can ask whether a plugin is still open without the lock: reloads are rare, decisions
   * finish all the time. Updated before a plugin is closed, so a check made after the close
   * started sees it gone.
   */
  private volatile Set<Object> awaiting = Set.of();
  /** Numbers the calls of {@link #closeLater}; guarded by {@link #lock}. */
  private long drops;
  /**
   * What a timer reaches this through, until the router closes: a timer outlives the router when
   * the delay is long (the JDK's shared delay thread holds it until due), and must then hold
   * neither the router nor the plugins it was to close.
   */
  private final AtomicReference<@Nullable RetiredPlugins> handle = new AtomicReference<>(this);

  /**
   * @param inUse whether the running configuration uses a plugin; false once the router closed
   * @param lock the lock reloads hold
   */
  RetiredPlugins(Duration delay, Predicate<Object> inUse, Object lock) {
    this(CompletableFuture.delayedExecutor(RouterSettings.nanos(delay), TimeUnit.NANOSECONDS),
        inUse, lock);
  }

  /** @param timer runs each task once the grace delay has passed */
  RetiredPlugins(Executor timer, Predicate<Object> inUse, Object lock) {
    this.timer = timer;
    this.inUse = inUse;
    this.lock = lock;
  }

  /**
   * Whether {@code plugin} was dropped by a reload and is not closed yet, without the lock: a
   * decision routed while it was in use still tells it how the request ends until then.
   */
  boolean awaitingClose(Object plugin) {
    return awaiting.contains(plugin);
  }

  /** Publishes {@link #pending}'s keys; called under {@link #lock} after each change. */
  private void publish() {
    Set<Object> copy = Collections.newSetFromMap(new IdentityHashMap<>());
    copy.addAll(pending.keySet());
    awaiting = copy;
  }

  /** Whether {@code plugin} was dropped by a reload and is not closed yet. */
  boolean pending(Object plugin) {
    synchronized (lock) {
      return pending.containsKey(plugin);
    }
  }

  /** Closes {@code dropped} after the grace delay, skipping any back in use by then. */
  void closeLater(Set<Object> dropped) {
    if (dropped.isEmpty()) {
      return;
    }
    long drop;
    synchronized (lock) {
      drop = ++drops;
      for (Object o : dropped) {
        pending.put(o, drop);
      }
      publish();
    }
    timer.execute(timerTask(handle, drop));
  }

  /** The timer of drop {@code drop}: it holds the handle and the drop's number, nothing else. */
  private static Runnable timerTask(AtomicReference<@Nullable RetiredPlugins> handle, long drop) {
    return () -> {
      RetiredPlugins r = handle.get();
      if (r != null) {
        r.closeUnused(drop);
      }
    };
  }

  private void closeUnused(long drop) {
    synchronized (lock) {
      // the plugins of this drop; a later drop of the same plugin (dropped, taken back, dropped
      // again) owns it now
      List<Object> batch = new ArrayList<>();
      for (Iterator<Map.Entry<Object, Long>> it = pending.entrySet().iterator(); it.hasNext(); ) {
        Map.Entry<Object, Long> e = it.next();
        if (e.getValue() == drop) {
          batch.add(e.getKey()); // before the removal, which invalidates an IdentityHashMap entry
          it.remove();
        }
      }
      publish();
      for (Object o : batch) {
        if (!inUse.test(o)) {
          close(o);
        }
      }
    }
  }

  /** Closes {@code plugins} now (each one not already closed through here). */
  void closeNow(Set<Object> plugins) {
    synchronized (lock) {
      for (Object o : plugins) {
        pending.remove(o);
      }
      publish();
      for (Object o : plugins) {
        close(o);
      }
    }
  }

  /**
   * Closes every plugin still waiting for its delay, now, except those in {@code running} (a
   * reload took them back), which the caller closes next through {@link #closeNow}. The router
   * calls it as it closes: timers still waiting from then on reach nothing.
   */
  void closePending(Set<Object> running) {
    handle.set(null);
    synchronized (lock) {
      List<Object> retiredOnly = new ArrayList<>();
      for (Iterator<Object> it = pending.keySet().iterator(); it.hasNext(); ) {
        Object o = it.next();
        if (!running.contains(o)) {
          it.remove();
          retiredOnly.add(o);
        }
      }
      publish();
      retiredOnly.forEach(RetiredPlugins::close);
    }
  }

  private static void close(Object o) {
    if (o instanceof Plugin p) {
      try {
        p.close();
      } catch (RuntimeException e) {
        LOG.log(Level.WARNING, "closing plugin " + p.getClass().getName() + " failed", e);
      }
    }
  }
}
