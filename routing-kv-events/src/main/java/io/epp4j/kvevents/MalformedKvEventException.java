package io.epp4j.kvevents;

import java.util.Objects;

/**
 * Thrown by {@link KvEventDecoder} when a payload is not a vLLM KV-event batch. The message
 * names the offending field; it never contains token IDs.
 */
public final class MalformedKvEventException extends Exception {
  private static final long serialVersionUID = 1L;

  public MalformedKvEventException(String message) {
    super(message);
  }

  public MalformedKvEventException(String message, Throwable cause) {
    super(message, cause);
  }

  /** Never null: every constructor takes the message naming the field. */
  @Override
  public String getMessage() {
    return Objects.requireNonNull(super.getMessage());
  }
}
