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
 * connects once the answer has come (JeroMQ resolves the name again when asked to connect, which
 * the JVM then answers from its cache).
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
   * The outcome of one lookup: whether the name has IPv6 addresses only, or the failure (null
   * when it resolved).
   */
  record Answer(boolean ipv6Only, @Nullable Exception failure, long atNanos) {}

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
        executor.execute(() -> answers.put(host, lookUp(host)));
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
      boolean v4 = false;
      boolean v6 = false;
      for (InetAddress a : all) {
        v4 |= a instanceof Inet4Address;
        v6 |= a instanceof Inet6Address;
      }
      return new Answer(v6 && !v4, null, ticker.nanos());
    } catch (UnknownHostException | RuntimeException e) {
      return new Answer(false, e, ticker.nanos());
    }
  }

  /** Stops the lookup thread; a lookup under way is left to finish on its own. */
  @Override
  public void close() {
    executor.shutdownNow();
  }
}
