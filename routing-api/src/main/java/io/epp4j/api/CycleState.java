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
}
