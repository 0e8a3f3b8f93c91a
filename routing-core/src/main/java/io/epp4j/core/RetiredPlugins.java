package io.epp4j.core;

import io.epp4j.api.Plugin;
import java.time.Duration;
import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executor;
import java.util.concurrent.TimeUnit;
import java.util.function.Predicate;
import java.util.logging.Level;
import java.util.logging.Logger;

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
  /** Numbers the calls of {@link #closeLater}; guarded by {@link #lock}. */
  private long drops;

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

  /** Closes {@code dropped} after the grace delay, skipping any back in use by then. */
  void closeLater(Set<Object> dropped) {
    if (dropped.isEmpty()) {
      return;
    }
    List<Object> batch = new ArrayList<>(dropped);
    long drop;
    synchronized (lock) {
      drop = ++drops;
      for (Object o : batch) {
        pending.put(o, drop);
      }
    }
    timer.execute(() -> closeUnused(batch, drop));
  }

  private void closeUnused(List<Object> batch, long drop) {
    synchronized (lock) {
      for (Object o : batch) {
        // a later drop of the same plugin (dropped, taken back, dropped again) owns it now
        Long latest = pending.get(o);
        if (latest != null && latest == drop) {
          pending.remove(o);
          if (!inUse.test(o)) {
            close(o);
          }
        }
      }
    }
  }

  /** Closes {@code plugins} now (each one not already closed through here). */
  void closeNow(Set<Object> plugins) {
    synchronized (lock) {
      for (Object o : plugins) {
        pending.remove(o);
        close(o);
      }
    }
  }

  /**
   * Closes every plugin still waiting for its delay, now, except those in {@code running} (a
   * reload took them back), which the caller closes next through {@link #closeNow}.
   */
  void closePending(Set<Object> running) {
    synchronized (lock) {
      List<Object> retiredOnly = new ArrayList<>();
      for (Iterator<Object> it = pending.keySet().iterator(); it.hasNext(); ) {
        Object o = it.next();
        if (!running.contains(o)) {
          it.remove();
          retiredOnly.add(o);
        }
      }
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
