package io.epp4j.api;

import java.util.List;
import java.util.Objects;
import java.util.function.Function;
import org.jspecify.annotations.Nullable;

/**
 * A value or a list of error messages, for operations whose failure is a normal outcome (plugin
 * creation from parameters, config loading, body parsing).
 *
 * @param <T> the value type
 */
public final class Result<T> {
  private final @Nullable T value;
  private final List<String> errors;

  private Result(@Nullable T value, List<String> errors) {
    this.value = value;
    this.errors = errors;
  }

  public static <T> Result<T> ok(T value) {
    return new Result<>(Objects.requireNonNull(value, "value"), List.of());
  }

  public static <T> Result<T> error(String message) {
    return new Result<>(null, List.of(message));
  }

  /** @throws IllegalArgumentException if {@code messages} is empty */
  public static <T> Result<T> errors(List<String> messages) {
    if (messages.isEmpty()) {
      throw new IllegalArgumentException("an error result needs at least one message");
    }
    return new Result<>(null, List.copyOf(messages));
  }

  public boolean isOk() {
    return errors.isEmpty();
  }

  /** @throws IllegalStateException if this is an error */
  public T value() {
    if (value == null) {
      throw new IllegalStateException("no value: " + String.join("; ", errors));
    }
    return value;
  }

  /** The error messages; empty when ok. */
  public List<String> errors() {
    return errors;
  }

  public <U> Result<U> map(Function<? super T, ? extends U> f) {
    return value == null ? new Result<>(null, errors) : Result.ok(f.apply(value));
  }

  @Override
  public String toString() {
    return isOk() ? "Ok[" + value + "]" : "Error" + errors;
  }
}
