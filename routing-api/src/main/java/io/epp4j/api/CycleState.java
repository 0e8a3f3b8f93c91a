package io.epp4j.api;

import java.util.IdentityHashMap;
import java.util.Map;
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
  private final Map<AttributeKey<?>, Object> values = new IdentityHashMap<>(8);

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
    values.put(key, key.type().cast(value));
  }

  /** The value published under {@code key}, or {@code null}. */
  public <T> @Nullable T get(AttributeKey<T> key) {
    return key.type().cast(values.get(key));
  }
}
