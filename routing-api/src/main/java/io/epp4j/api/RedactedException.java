package io.epp4j.api;

import java.util.IdentityHashMap;
import java.util.Map;
import org.jspecify.annotations.Nullable;

/**
 * A stand-in for an exception that is about to be logged: the same class name, stack frames,
 * causes and suppressed exceptions, but none of their messages. A plugin's exception message may
 * quote the request it was working on (a prompt, a session key), and prompts must never reach a
 * log; the class and the frames are what an operator needs to find the bug. The router logs the
 * exceptions of plugins this way, and so do the gateway integrations and the built-in plugins
 * that call other plugins' code; a gateway or plugin of your own that logs an exception from
 * routing, from another plugin or from a decision's header asks should log
 * {@code RedactedException.of(e)} instead of {@code e}.
 *
 * <p>{@link #toString()} (which {@link #printStackTrace()} and every log formatter print) reads
 * {@code java.lang.IllegalStateException: <message withheld>} when the original had a message.
 */
public final class RedactedException extends RuntimeException {
  private static final long serialVersionUID = 1L;
  private static final String WITHHELD = "<message withheld>";

  private final String exceptionClass;
  private final boolean hadMessage;

  private RedactedException(Throwable original) {
    super((String) null); // leaves the cause unset, for initCause
    this.exceptionClass = original.getClass().getName();
    this.hadMessage = original.getMessage() != null;
    setStackTrace(original.getStackTrace());
  }

  /**
   * {@code t} without its messages, nor those of its causes and suppressed exceptions. A
   * {@code RedactedException} is returned as it is.
   */
  public static RedactedException of(Throwable t) {
    if (t instanceof RedactedException r) {
      return r;
    }
    return redact(t, new IdentityHashMap<>());
  }

  private static RedactedException redact(Throwable t, Map<Throwable, RedactedException> done) {
    RedactedException known = done.get(t);
    if (known != null) {
      return known; // a cause chain that loops back
    }
    RedactedException r = new RedactedException(t);
    done.put(t, r);
    Throwable cause = t.getCause();
    if (cause != null && cause != t) {
      r.initCause(redact(cause, done));
    }
    for (Throwable s : t.getSuppressed()) {
      r.addSuppressed(redact(s, done));
    }
    return r;
  }

  /** The fully qualified class name of the exception this stands for. */
  public String exceptionClass() {
    return exceptionClass;
  }

  @Override
  public @Nullable String getMessage() {
    return hadMessage ? WITHHELD : null;
  }

  @Override
  public String toString() {
    return hadMessage ? exceptionClass + ": " + WITHHELD : exceptionClass;
  }
}
