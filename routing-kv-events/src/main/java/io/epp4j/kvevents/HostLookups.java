package io.epp4j.kvevents;

import java.net.Inet4Address;
import java.net.Inet6Address;
import java.net.InetAddress;
import java.net.UnknownHostException;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import org.jspecify.annotations.Nullable;

/**
 * Host-name lookups of a {@link KvEventSubscriber}'s endpoints, run on a thread of their own so
 * that a slow DNS, or one that never answers for a name, holds up only the endpoint whose name
 * it is: the subscriber's thread, which reads every endpoint's events, asks for a name and
 * connects once the answer has come, to the address the answer gives rather than to the name.
 * JeroMQ resolves a name it is asked to connect to on the calling thread, and again at every
 * connection attempt on its I/O thread, which one subscriber's sockets share: a slow lookup there
 * would stop every endpoint's events too. (The price: an endpoint stays at the address its name
 * had when it was connected, see the module's README.)
 *
 * <p>Memory: at most one lookup per name is queued or running, and an answer is kept until the
 * subscriber's thread takes it or for {@link #KEPT_NANOS} at most, so both are bounded by the
 * names of the pool's endpoints.
 *
 * <p>Threading: {@link #take} and {@link #prune} are called from the subscriber's thread; the
 * lookups run on up to {@link #THREADS} daemon threads, which end when idle and on
 * {@link #close}.
 */
final class HostLookups implements AutoCloseable {
  /** How a name is looked up; {@link InetAddress#getAllByName} but in tests. */
  @FunctionalInterface
  interface Resolver {
    InetAddress[] resolve(String host) throws UnknownHostException;
  }

  /**
   * Lookups run at once: names whose DNS hangs hold up the lookups of other names only when
   * there are more of them than this.
   */
  static final int THREADS = 4;

  /** How long an answer nobody took is kept: its endpoint left the pool meanwhile. */
  static final long KEPT_NANOS = TimeUnit.SECONDS.toNanos(60);

  /**
   * The outcome of one lookup: the address to connect to (the name's first IPv4 address, where
   * vLLM's default {@code tcp://*:5557} listens, or its first IPv6 one when it has no IPv4
   * address); or the failure (null when it resolved, and then the address is not null).
   */
  record Answer(@Nullable Exception failure, long atNanos,
      @Nullable InetAddress address) {
    /**
     * {@code tcp://<address>:<port>} for the address the name resolved to; ZeroMQ needs no
     * lookup for it.
     */
    String connectAddress(int port) {
      InetAddress a = java.util.Objects.requireNonNull(address, "a failed lookup has no address");
      return SubscriberSockets.address(a.getHostAddress(), port);
    }
  }

  private final Resolver resolver;
  /** Dates the answers; the system's but in tests. */
  private final io.epp4j.api.Ticker ticker;
  private final ExecutorService executor;
  /** Names being looked up, or whose answer waits: a name has at most one entry. */
  private final Map<String, Object> asked = new ConcurrentHashMap<>();
  private final Map<String, Answer> answers = new ConcurrentHashMap<>();

  HostLookups(Resolver resolver) {
    this(resolver, io.epp4j.api.Ticker.system());
  }

  HostLookups(Resolver resolver, io.epp4j.api.Ticker ticker) {
    this.resolver = resolver;
    this.ticker = ticker;
    ThreadPoolExecutor pool = new ThreadPoolExecutor(THREADS, THREADS, 10, TimeUnit.SECONDS,
        new LinkedBlockingQueue<>(), r -> {
          Thread t = new Thread(r, "epp4j-kv-events-lookup");
          t.setDaemon(true);
          return t;
        });
    pool.allowCoreThreadTimeOut(true);
    this.executor = pool;
  }

  /**
   * Whether {@code host} has to be looked up: not an IPv4 address, not an IPv6 one (which has a
   * colon), not empty and not ZeroMQ's wildcard. Such hosts are left to ZeroMQ, which needs no
   * lookup for them and reports what it refuses.
   */
  static boolean isName(String host) {
    return !host.isEmpty() && !host.equals("*") && host.indexOf(':') < 0
        && !SubscriberSockets.isIpv4Literal(host);
  }

  /**
   * The answer for {@code host}, taken (the next call asks again), or null when none has come
   * yet: then a lookup is started unless one is under way.
   */
  @Nullable Answer take(String host) {
    Answer a = answers.remove(host);
    if (a != null) {
      asked.remove(host);
      return a;
    }
    if (asked.putIfAbsent(host, Boolean.TRUE) == null) {
      try {
        executor.execute(() -> {
          boolean answered = false;
          try {
            answers.put(host, lookUp(host));
            answered = true;
          } finally {
            if (!answered) {
              // the lookup ended without an answer (an Error out of the resolver): the name is
              // free to be asked for again, or its endpoint would wait for an answer for ever
              asked.remove(host);
            }
          }
        });
      } catch (java.util.concurrent.RejectedExecutionException closed) {
        asked.remove(host);
      }
    }
    return null;
  }

  /** Forgets answers nobody took within {@link #KEPT_NANOS}: their endpoints left the pool. */
  void prune() {
    if (answers.isEmpty()) {
      return;
    }
    long now = ticker.nanos();
    for (Map.Entry<String, Answer> e : answers.entrySet()) {
      if (now - e.getValue().atNanos() > KEPT_NANOS && answers.remove(e.getKey(), e.getValue())) {
        asked.remove(e.getKey());
      }
    }
  }

  /** Answers waiting to be taken; for tests. */
  int answersKept() {
    return answers.size();
  }

  private Answer lookUp(String host) {
    try {
      InetAddress[] all = resolver.resolve(host);
      InetAddress v4 = null;
      InetAddress v6 = null;
      for (InetAddress a : all) {
        if (a instanceof Inet4Address && v4 == null) {
          v4 = a;
        } else if (a instanceof Inet6Address && v6 == null) {
          v6 = a;
        }
      }
      InetAddress chosen = v4 != null ? v4 : v6;
      if (chosen == null) {
        return new Answer(new UnknownHostException(host + ": no IPv4 or IPv6 address"),
            ticker.nanos(), null);
      }
      return new Answer(null, ticker.nanos(), chosen);
    } catch (UnknownHostException | RuntimeException e) {
      return new Answer(e, ticker.nanos(), null);
    }
  }

  /** Stops the lookup thread; a lookup under way is left to finish on its own. */
  @Override
  public void close() {
    executor.shutdownNow();
  }
}
