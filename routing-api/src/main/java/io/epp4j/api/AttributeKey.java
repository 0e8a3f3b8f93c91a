package io.epp4j.api;

import java.util.Objects;

/**
 * A typed key for data that one plugin publishes in {@link CycleState} for later plugins of the
 * same cycle (e.g. the prefix match a scorer computed). Keys compare by identity: keep them in
 * static final fields.
 *
 * @param <T> the value type
 */
public final class AttributeKey<T> {
  private final String name;
  private final Class<T> type;

  private AttributeKey(String name, Class<T> type) {
    this.name = Objects.requireNonNull(name, "name");
    this.type = Objects.requireNonNull(type, "type");
  }

  /** A new key; two calls give two distinct keys. */
  public static <T> AttributeKey<T> of(String name, Class<T> type) {
    return new AttributeKey<>(name, type);
  }

  public String name() {
    return name;
  }

  public Class<T> type() {
    return type;
  }

  @Override
  public String toString() {
    return name;
  }
}
