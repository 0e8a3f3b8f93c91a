package io.epp4j.api;

/**
 * Common base of every plugin (filters, scorers, pickers, profile handlers). A plugin instance
 * may implement several roles, e.g. a scorer that is also a {@link RequestListener}.
 * Implementations must be thread-safe: one instance serves all concurrent cycles.
 */
public interface Plugin extends AutoCloseable {

  /** Releases background resources (threads, sockets); the default does nothing. */
  @Override
  default void close() {}
}
