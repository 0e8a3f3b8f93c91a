package io.epp4j.redis;

import io.epp4j.api.RouterHints;
import java.lang.management.ManagementFactory;
import java.util.Arrays;
import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.Map;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.LockSupport;
import org.jspecify.annotations.Nullable;

/**
 * One router's place in one pool, which outlives a {@link RedisReplication} instance. A reload
 * that changes the plugin's parameters creates a new instance while the router keeps the old one
 * open for its retirement delay (routes that read the old configuration may still call it); two
 * instances publishing the same router's in-flight figures under two ids would make the other
 * routers count its requests twice. So the instances of one router and pool share a seat: the
 * newest one not closed is the owner, and only the owner's threads publish and read. The
 * default {@code routerId}, what the other routers last received under it, the reader's place in
 * the stream and the session times belong to the seat and pass from one instance to the next.
 *
 * <p>Each role (publishing, reading) is held by one thread at a time: the owner's thread takes it
 * once the previous holder has let it go, and the holder lets it go as soon as it sees that it is
 * no longer the owner's. The fields of a role are used only by its holder; taking and letting go
 * (a compare-and-set and a volatile store) order one holder's writes before the next one's reads.
 * A failed reload closes the instance it created: the previous instance is the owner again and
 * takes the roles back.
 */
final class RouterSeat {
  // guarded by SEATS
  private static final Map<RouterHints, Map<String, RouterSeat>> SEATS = new IdentityHashMap<>();

  private final @Nullable RouterHints router;
  private final String pool;
  /** The routerId of every instance of this seat that sets none. */
  final String defaultRouterId = defaultRouterId();
  final RedisReplication.SessionTimes sessionTimes =
      new RedisReplication.SessionTimes(RedisReplication.MAX_SESSION_TIMES);
  /**
   * When this seat was made (this router's clock, as batches stamp their send time): a batch
   * under its routerId sent before it is an earlier run's (a router restarted under a fixed id).
   */
  final long startedMicros = RedisReplication.epochMicros();
  /**
   * Endpoints on which the other routers may still hold the in-flight figure of an earlier run
   * of this routerId (one that crashed, so that no farewell cleared them, and restarted within
   * their silence limit, so that they never forgot it): the reader adds them, the publisher sends
   * this run's figure for each, zero included, and takes them out.
   */
  final java.util.Set<String> earlierRunFigures =
      java.util.concurrent.ConcurrentHashMap.newKeySet();
  /** Batches the instances of this seat tried to append: the reader's own-id check counts all. */
  final AtomicLong appendsAttempted = new AtomicLong();

  // written under SEATS; oldest first
  private volatile RedisReplication[] members = new RedisReplication[0];
  private volatile @Nullable RedisReplication owner;
  /**
   * Queues of members that closed with hints still queued (a reload during an outage: the
   * replaced instance closes after its retirement delay, before the hints could go out); oldest
   * first, written under SEATS. The publishing holder, the one consumer of every queue of this
   * seat, moves their hints into its own queue.
   */
  private volatile HintQueue[] leftovers = new HintQueue[0];
  private final AtomicReference<@Nullable RedisReplication> publishing = new AtomicReference<>();
  private final AtomicReference<@Nullable RedisReplication> reading = new AtomicReference<>();

  // ---- the publishing role's state: the holder's only
  /** The in-flight figures the other routers last received, under {@link #sentAs}. */
  final Map<String, long[]> sent = new HashMap<>();
  /** The routerId and stream the figures of {@link #sent} went out under and to. */
  @Nullable String sentAs;

  // ---- the reading role's state: the holder's only
  /** The stream the fields below are about. */
  @Nullable String readFrom;
  @Nullable String lastId;
  long staleBeforeMillis = -1;
  /**
   * Other routers whose in-flight figures were applied, and when they were last heard from.
   * Guarded by itself, not by the reading role: the owner's expiry thread forgets the silent ones
   * while the reader may be waiting on Redis.
   */
  final Map<String, Long> originsSeen = new HashMap<>();
  /** How far each other router's clock is behind the log's, as its batches show. */
  final RedisReplication.OriginOffsets originOffsets = new RedisReplication.OriginOffsets();
  /** The routerId the three fields below count batches of. */
  @Nullable String ownId;
  long ownSinceMillis = -1;
  long ownSeen;
  @Nullable String ownCountedTo;

  private RouterSeat(@Nullable RouterHints router, String pool) {
    this.router = router;
    this.pool = pool;
  }

  /**
   * The seat of {@code router} in {@code pool}, made when it has no member; a seat of its own when
   * there is no router to share it with. The instance that asked {@link #join}s it once built.
   */
  static RouterSeat of(@Nullable RouterHints router, String pool) {
    if (router == null) {
      return new RouterSeat(null, pool);
    }
    synchronized (SEATS) {
      return SEATS.computeIfAbsent(router, r -> new HashMap<>())
          .computeIfAbsent(pool, p -> new RouterSeat(router, p));
    }
  }

  /**
   * {@code member}, fully built, owns the seat from now on: the previous owner's threads let the
   * roles go, and {@code member}'s take them.
   */
  void join(RedisReplication member) {
    synchronized (SEATS) {
      if (router != null) {
        // the last member may have left between of and join: the seat is this router's again
        SEATS.computeIfAbsent(router, r -> new HashMap<>()).putIfAbsent(pool, this);
      }
      RedisReplication[] m = Arrays.copyOf(members, members.length + 1);
      m[m.length - 1] = member;
      members = m;
      owner = member;
      wakeAll();
    }
  }

  /** {@code member} is closing: the newest other member, if any, owns the seat again. */
  void leave(RedisReplication member) {
    synchronized (SEATS) {
      RedisReplication[] m = Arrays.stream(members).filter(x -> x != member)
          .toArray(RedisReplication[]::new);
      if (m.length < members.length && m.length > 0 && member.hintQueue().size() > 0) {
        // the members that go on send what it queued: the next publishing holder takes them
        HintQueue[] l = Arrays.copyOf(leftovers, leftovers.length + 1);
        l[l.length - 1] = member.hintQueue();
        leftovers = l;
      }
      members = m;
      owner = m.length == 0 ? null : m[m.length - 1];
      forgetIfEmpty();
      wakeAll();
    }
  }

  /**
   * The instance that asked for this seat failed before it joined: the seat goes when no member
   * holds it, so that a failed construction leaves no seat (and no reference to the router).
   */
  void abandon() {
    synchronized (SEATS) {
      forgetIfEmpty();
    }
  }

  // under SEATS
  private void forgetIfEmpty() {
    if (members.length == 0 && router != null) {
      Map<String, RouterSeat> pools = SEATS.get(router);
      if (pools != null && pools.get(pool) == this) {
        pools.remove(pool);
        if (pools.isEmpty()) {
          SEATS.remove(router);
        }
      }
    }
  }

  /** Whether {@code router} has a seat in {@code pool}; for tests. */
  static boolean registered(RouterHints router, String pool) {
    synchronized (SEATS) {
      Map<String, RouterSeat> pools = SEATS.get(router);
      return pools != null && pools.containsKey(pool);
    }
  }

  /** The instance whose threads publish and read; null once every member closed. */
  @Nullable RedisReplication owner() {
    return owner;
  }

  /** Queues closed members left hints in, oldest first; see {@link #leftovers}. */
  HintQueue[] leftovers() {
    return leftovers;
  }

  /** {@code q}, a queue of {@link #leftovers()}, has been emptied by the publishing holder. */
  void leftoverEmptied(HintQueue q) {
    synchronized (SEATS) {
      leftovers = Arrays.stream(leftovers).filter(x -> x != q).toArray(HintQueue[]::new);
    }
  }

  /** The members, oldest first: the publishing holder takes the hints queued on each. */
  RedisReplication[] members() {
    return members;
  }

  /** Takes the publishing role for {@code m}, the owner; false while another holds it. */
  boolean takePublishing(RedisReplication m) {
    return publishing.get() == m || publishing.compareAndSet(null, m);
  }

  void releasePublishing(RedisReplication m) {
    if (publishing.compareAndSet(m, null)) {
      wakeAll();
    }
  }

  /** Takes the reading role for {@code m}, the owner; false while another holds it. */
  boolean takeReading(RedisReplication m) {
    return reading.get() == m || reading.compareAndSet(null, m);
  }

  void releaseReading(RedisReplication m) {
    if (reading.compareAndSet(m, null)) {
      wakeAll();
    }
  }

  /** Wakes the members' threads to look at who owns the seat. */
  private void wakeAll() {
    for (RedisReplication m : members) {
      m.wake();
    }
  }

  private static String defaultRouterId() {
    String jvm = ManagementFactory.getRuntimeMXBean().getName(); // pid@host
    return jvm + "-" + Long.toHexString(ThreadLocalRandom.current().nextLong());
  }

  /** Parks the caller until woken or for at most {@code nanos}. */
  static void idle(long nanos) {
    LockSupport.parkNanos(nanos);
  }
}
