package io.epp4j.api;

import java.util.HashMap;
import java.util.Map;
import java.util.Objects;
import java.util.random.RandomGenerator;
import org.jspecify.annotations.Nullable;

/**
 * Per-request scratch space shared by the plugins of one scheduling cycle. Not thread-safe: a
 * cycle runs on one thread. Also carries the cycle's clock reading and random source so that
 * tie-breaks are reproducible when the router is seeded.
 *
 * <p>A cycle ends when the router's {@code route} returns or throws, after every
 * {@link RequestListener#afterRouting} has run: the router then calls {@link #end()}, which runs
 * the actions plugins registered with {@link #onEnd}, for example to take back a per-thread
 * buffer a published value was read from. Whoever runs plugins with a state of their own (tests,
 * benchmarks) calls {@link #end()} when done with it; a state never ended only keeps such buffers
 * from being reused.
 */
public final class CycleState {
  private final long nowNanos;
  private final RandomGenerator random;
  // a handful of entries per cycle: linear search over small arrays beats a hash map and
  // allocates less on the hot path
  private AttributeKey<?>[] keys = new AttributeKey<?>[4];
  private Object[] values = new Object[4];
  private int size;
  private @Nullable Map<String, String> requestAttributes;
  // one end action in a field, more (rare) in a list: most cycles register one and allocate none
  private @Nullable Runnable endAction;
  private java.util.@Nullable List<Runnable> moreEndActions;
  private boolean ended;

  public CycleState(long nowNanos, RandomGenerator random) {
    this.nowNanos = nowNanos;
    this.random = random;
  }

  /** The router's clock when the cycle started. */
  public long nowNanos() {
    return nowNanos;
  }

  /** Random source for tie-breaks and random pickers. */
  public RandomGenerator random() {
    return random;
  }

  /** Publishes a value for later plugins of this cycle, replacing any earlier one. */
  public <T> void put(AttributeKey<T> key, T value) {
    Object v = key.type().cast(value);
    for (int i = 0; i < size; i++) {
      if (keys[i] == key) {
        values[i] = v;
        return;
      }
    }
    if (size == keys.length) {
      keys = java.util.Arrays.copyOf(keys, size * 2);
      values = java.util.Arrays.copyOf(values, size * 2);
    }
    keys[size] = key;
    values[size++] = v;
  }

  /** The value published under {@code key}, or {@code null}. */
  @SuppressWarnings("unchecked")
  public <T> @Nullable T get(AttributeKey<T> key) {
    for (int i = 0; i < size; i++) {
      if (keys[i] == key) {
        // put() checked the type against this very key; a second Class.cast with a class that
        // is not a compile-time constant costs a slow subtype check on every lookup
        return (T) values[i];
      }
    }
    return null;
  }

  /**
   * Publishes a request attribute under a name, replacing an earlier value: the upstream EPP's
   * request attribute store, which its request-header processors and data producers fill before
   * scheduling (for example {@code session-id-producer}) and which plugins read by name. Upstream
   * names a key {@code dataType/producerName} ({@code SessionIDDataKey/session-id-producer},
   * {@code agent-identity/}); epp4j's built-ins use the same names.
   */
  public void putRequestAttribute(String name, String value) {
    Objects.requireNonNull(value, "value");
    if (requestAttributes == null) {
      requestAttributes = new HashMap<>(4);
    }
    requestAttributes.put(Objects.requireNonNull(name, "name"), value);
  }

  /** The request attribute published under {@code name}, or {@code null}. */
  public @Nullable String requestAttribute(String name) {
    Map<String, String> m = requestAttributes;
    return m == null ? null : m.get(name);
  }

  /**
   * Registers {@code action} to run when the cycle ends ({@link #end()}), after every action
   * registered before it. An action registered once the cycle has ended runs at once.
   */
  public void onEnd(Runnable action) {
    Objects.requireNonNull(action, "action");
    if (ended) {
      action.run();
    } else if (endAction == null && moreEndActions == null) {
      endAction = action;
    } else {
      if (moreEndActions == null) {
        moreEndActions = new java.util.ArrayList<>(2);
      }
      moreEndActions.add(action);
    }
  }

  /**
   * Ends the cycle: runs the actions registered with {@link #onEnd}, in the order they were
   * registered, each once; a second call does nothing. Every action runs even when one throws;
   * the first exception is rethrown afterwards with the later ones suppressed in it. Values a
   * plugin published may not be readable afterwards (see {@link PrefixBlocks}).
   */
  public void end() {
    if (ended) {
      return;
    }
    ended = true;
    RuntimeException failure = null;
    Runnable first = endAction;
    java.util.List<Runnable> more = moreEndActions;
    endAction = null;
    moreEndActions = null;
    if (first != null) {
      failure = runEndAction(first, null);
    }
    if (more != null) {
      for (int i = 0; i < more.size(); i++) {
        failure = runEndAction(more.get(i), failure);
      }
    }
    if (failure != null) {
      throw failure;
    }
  }

  /** Whether {@link #end()} has been called. */
  public boolean ended() {
    return ended;
  }

  private static @Nullable RuntimeException runEndAction(Runnable action,
      @Nullable RuntimeException failure) {
    try {
      action.run();
    } catch (RuntimeException e) {
      if (failure == null) {
        return e;
      }
      failure.addSuppressed(e);
    }
    return failure;
  }
}
