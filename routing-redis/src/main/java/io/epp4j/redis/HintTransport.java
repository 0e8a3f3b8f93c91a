package io.epp4j.redis;

import java.time.Duration;
import java.util.List;

/**
 * The bus {@link RedisReplication} publishes hint batches to and reads them from: an
 * append-only log with ordered ids, as a Redis stream is. The Redis one is built in; another
 * (an in-memory log for tests and benchmarks, or another store) is given to
 * {@link RedisReplication.Provider#Provider(Factory)}.
 *
 * <p>One instance is used by one thread: the replication makes one for publishing and one for
 * reading. Any method may throw when the bus is unreachable; the caller then closes the instance,
 * waits (backing off) and calls {@link #connect} again. Methods must not block longer than the
 * timeouts they are given or were configured with.
 */
public interface HintTransport extends AutoCloseable {

  /** Id to read from when nothing was read yet: the oldest batch the log holds. */
  String OLDEST = "0-0";

  /** Opens the connection; throws when the bus is unreachable. */
  void connect() throws Exception;

  /** Appends one batch and returns its id. */
  String append(byte[] batch) throws Exception;

  /**
   * Throws as {@link #append} would when the log refuses appends now (a read-only replica, a
   * server out of memory, a user not allowed to append), without appending anything. The
   * replication calls it on every new publishing connection, so that it counts as connected only
   * once the log takes its batches, and on every heartbeat that finds nothing appended since the
   * previous one, so that a refusal under a router with nothing to send shows too. The default
   * finds nothing to refuse.
   */
  default void checkAppend() throws Exception {}

  /**
   * Up to {@code max} batches with ids after {@code afterId}, oldest first, waiting up to
   * {@code maxWait} for the first one; empty when none came.
   */
  List<Entry> read(String afterId, int max, Duration maxWait) throws Exception;

  /**
   * As {@link #read(String, int, Duration)}, but an entry need only come back with as many of its
   * leading bytes as {@code wanted} asks for, so that a reader does not hold entries it will not
   * apply (its own, another pool's, one larger than any router writes). A transport that cannot
   * cut entries short returns them whole, as the default does; {@link Entry#size()} is always
   * the stored length.
   */
  default List<Entry> read(String afterId, int max, Duration maxWait, Wanted wanted)
      throws Exception {
    return read(afterId, max, maxWait);
  }

  /** How much of an entry its reader needs. */
  @FunctionalInterface
  interface Wanted {
    /**
     * How many of the entry's leading bytes to keep, from 0 to all of them; {@code stored} holds
     * the whole entry from its position to its limit and is only read, never kept.
     */
    int bytes(java.nio.ByteBuffer stored);
  }

  /**
   * Whether the log still holds everything after {@code afterId}, an id read from it: false when
   * older batches were trimmed (or the log was lost) so that some after {@code afterId} may be
   * gone, and false when the log's newest batch is older than {@code afterId} (another log took
   * its place, e.g. after a failover, and a read after {@code afterId} would skip its batches).
   */
  boolean holdsAfter(String afterId) throws Exception;

  /**
   * The log's clock now, in the milliseconds of its ids (a Redis stream id starts with the
   * server's time in milliseconds), so that a reader can tell the batches of its catch-up that
   * are older than it can use; -1 when the ids are not times. The default is -1.
   */
  default long nowMillis() throws Exception {
    return -1;
  }

  /** Closes the connection; never throws. */
  @Override
  void close();

  /**
   * One batch as stored: its id, its bytes (or their first ones only, see
   * {@link #read(String, int, Duration, Wanted)}) and its stored length.
   */
  record Entry(String id, byte[] batch, int size) {
    /** A whole entry. */
    public Entry(String id, byte[] batch) {
      this(id, batch, batch.length);
    }
  }

  /** Makes transports for one replication plugin, which closes the factory with itself. */
  interface Factory extends AutoCloseable {
    HintTransport create();

    @Override
    default void close() {}
  }
}
