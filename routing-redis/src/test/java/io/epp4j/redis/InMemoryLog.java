package io.epp4j.redis;

import java.io.IOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

/**
 * An in-memory stream for tests of the replication logic. It can be taken down like Redis, lose
 * what it holds like a Redis restarted without persistence, and hold back its readers while
 * appends go on (a reader that fell behind).
 */
final class InMemoryLog {
  private final List<HintTransport.Entry> entries = new ArrayList<>();
  /** Entries lost before the first one held: ids go on from there, as a new stream's would. */
  private int lostBefore;
  /** Incremented by {@link #lose}: connections made before it fail, as after a restart. */
  private volatile int generation;
  private volatile boolean up = true;
  private volatile boolean readsHeld;
  /** Whether reads cut entries to what the reader wants of them, as the Redis transport does. */
  private volatile boolean cutsEntries;
  /** Connections are accepted but every command fails, as a server that refuses writes does. */
  private volatile boolean refusing;
  /** Error replies appends, and reads, fail with (a Redis error reply's text); null: none. */
  private volatile String refuseAppendsWith;
  private volatile String refuseReadsWith;

  /** Appends fail as Redis answering {@code reply} (e.g. "READONLY ...") does; null: they work. */
  void refuseAppends(String reply) {
    refuseAppendsWith = reply;
  }

  /** Reads fail as Redis answering {@code reply} does; null: they work. */
  void refuseReads(String reply) {
    refuseReadsWith = reply;
  }

  /** Whether the log answers {@link HintTransport#nowMillis} (its ids are a sequence number). */
  private volatile boolean clock;
  /** Whether {@link HintTransport#checkAppend} checks the connection, as Redis' does. */
  private volatile boolean checksAppends;

  /**
   * {@link HintTransport#checkAppend} fails as an append would (the log down, the connection
   * lost, commands refused), as the Redis transport's does; without this it finds nothing.
   */
  void checkAppends() {
    checksAppends = true;
  }
  private final java.util.concurrent.atomic.AtomicInteger connects =
      new java.util.concurrent.atomic.AtomicInteger();
  private volatile java.util.concurrent.CountDownLatch appendGate =
      new java.util.concurrent.CountDownLatch(0);
  private final java.util.concurrent.atomic.AtomicInteger appendsWaiting =
      new java.util.concurrent.atomic.AtomicInteger();
  private final java.util.concurrent.atomic.AtomicInteger appendsTried =
      new java.util.concurrent.atomic.AtomicInteger();

  synchronized void append(byte[] batch) {
    entries.add(new HintTransport.Entry((lostBefore + entries.size() + 1) + "-0", batch));
    notifyAll();
  }

  /**
   * Bytes of entries (as stored: {@code XREAD} sends them whole) that one read's answer can carry
   * before its timeout; a read of more fails with a {@link java.util.concurrent.TimeoutException},
   * as over a link too slow for them. 0: no limit.
   */
  private volatile long carriesAtMost;
  /** Entries the latest read asked for. */
  private volatile int lastAsked;

  /** Reads of more than {@code bytes} of entries run out of time (0: none does). */
  void carriesAtMost(long bytes) {
    carriesAtMost = bytes;
  }

  /** How many entries the latest read asked for. */
  int lastAsked() {
    return lastAsked;
  }

  /** Reads cut each entry to what the reader wants of it, as the Redis transport does. */
  void cutEntries() {
    cutsEntries = true;
  }

  private final java.util.concurrent.atomic.AtomicLong mostKeptByARead =
      new java.util.concurrent.atomic.AtomicLong();

  /** The most bytes of entries one read has kept, with {@link #cutEntries}. */
  long mostKeptByARead() {
    return mostKeptByARead.get();
  }

  /** Appends wait until {@link #releaseAppends} (a publisher stuck in a slow write). */
  void holdAppends() {
    appendGate = new java.util.concurrent.CountDownLatch(1);
  }

  void releaseAppends() {
    appendGate.countDown();
  }

  /** Appends waiting at the hold. */
  int appendsWaiting() {
    return appendsWaiting.get();
  }

  /**
   * Takes the log away, and with it every connection made so far: one that was open when it went
   * does not work again when it comes back, as a TCP connection through an outage does not.
   */
  synchronized void down() {
    up = false;
    generation++;
    notifyAll(); // a read waiting for entries fails now, as a blocking read's connection does
  }

  void up() {
    up = true;
  }

  /**
   * Connections succeed but every command fails, as with a Redis that accepts the client and
   * then refuses its commands (out of memory, a read-only replica, a missing ACL permission).
   */
  void refuseCommands(boolean refuse) {
    refusing = refuse;
  }

  /** Appends asked for so far, taken or not. */
  int appendsTried() {
    return appendsTried.get();
  }

  private final java.util.concurrent.atomic.AtomicInteger closedAfterFailedAppend =
      new java.util.concurrent.atomic.AtomicInteger();

  /**
   * Connections closed by their user after an append on them failed: a publisher closes its
   * connection once it has counted what the failed batch lost, so this says that it has.
   */
  int closedAfterFailedAppend() {
    return closedAfterFailedAppend.get();
  }

  /** Connections made so far. */
  int connects() {
    return connects.get();
  }

  /** When each thread connected ({@link System#nanoTime}), by thread name, oldest first. */
  private final java.util.Map<String, List<Long>> connectTimes =
      new java.util.concurrent.ConcurrentHashMap<>();

  /** The times at which the thread named {@code thread} connected, oldest first. */
  List<Long> connectTimes(String thread) {
    List<Long> times = connectTimes.get(thread);
    if (times == null) {
      return List.of();
    }
    synchronized (times) {
      return new ArrayList<>(times);
    }
  }

  /**
   * The log answers {@link HintTransport#nowMillis} with the sequence number its last entry got,
   * the unit of its ids, as Redis answers with the time its ids are made of.
   */
  void withClock() {
    clock = true;
  }

  /** Reads return nothing until {@link #releaseReads}; appends go on. */
  void holdReads() {
    readsHeld = true;
  }

  void releaseReads() {
    readsHeld = false;
  }

  /**
   * Drops all entries but the newest {@code keep} and leaves connections up, as the stream's
   * trim does when writers outrun a reader.
   */
  synchronized void trim(int keep) {
    int drop = Math.max(0, entries.size() - keep);
    lostBefore += drop;
    entries.subList(0, drop).clear();
  }

  /** Drops every entry and breaks every connection, as a restart without persistence does. */
  synchronized void lose() {
    lostBefore += entries.size();
    entries.clear();
    generation++;
  }

  /** The batches held, oldest first. */
  synchronized List<byte[]> batches() {
    List<byte[]> out = new ArrayList<>();
    for (HintTransport.Entry e : entries) {
      out.add(e.batch());
    }
    return out;
  }

  synchronized int size() {
    return entries.size();
  }

  HintTransport.Factory factory() {
    return () -> new HintTransport() {
      private int connectedTo = -1;
      private boolean appendFailed;

      @Override
      public void connect() throws IOException {
        if (!up) {
          throw new IOException("down");
        }
        connectedTo = generation;
        connects.incrementAndGet();
        List<Long> times = connectTimes.computeIfAbsent(Thread.currentThread().getName(),
            n -> new ArrayList<>());
        synchronized (times) {
          times.add(System.nanoTime());
        }
      }

      private void check() throws IOException {
        if (!up || connectedTo != generation) {
          throw new IOException("connection lost");
        }
        if (refusing) {
          throw new IOException("command refused");
        }
      }

      @Override
      public void checkAppend() throws IOException {
        if (checksAppends) {
          check();
        }
      }

      @Override
      public long nowMillis() throws IOException {
        check();
        if (!clock) {
          return -1;
        }
        synchronized (InMemoryLog.this) {
          return lostBefore + entries.size();
        }
      }

      @Override
      public String append(byte[] batch) throws IOException {
        appendsTried.incrementAndGet();
        java.util.concurrent.CountDownLatch gate = appendGate;
        if (gate.getCount() > 0) {
          appendsWaiting.incrementAndGet();
          try {
            if (!gate.await(30, java.util.concurrent.TimeUnit.SECONDS)) {
              throw new IOException("append held for 30 s");
            }
          } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IOException("interrupted while held", e);
          } finally {
            appendsWaiting.decrementAndGet();
          }
        }
        appendFailed = true;
        check();
        if (refuseAppendsWith != null) {
          throw new io.lettuce.core.RedisCommandExecutionException(refuseAppendsWith);
        }
        appendFailed = false;
        InMemoryLog.this.append(batch);
        return "";
      }

      @Override
      public List<Entry> read(String afterId, int max, Duration maxWait, Wanted wanted)
          throws Exception {
        List<Entry> whole = read(afterId, max, maxWait);
        if (!cutsEntries) {
          return whole;
        }
        // as the Redis transport does: each entry cut to what the reader wants of it
        List<Entry> cut = new ArrayList<>(whole.size());
        long kept = 0;
        for (Entry e : whole) {
          int keep = Math.max(0, Math.min(e.size(),
              wanted.bytes(java.nio.ByteBuffer.wrap(e.batch()).asReadOnlyBuffer())));
          cut.add(new Entry(e.id(), java.util.Arrays.copyOf(e.batch(), keep), e.size()));
          kept += keep;
        }
        mostKeptByARead.accumulateAndGet(kept, Math::max);
        return cut;
      }

      @Override
      public List<Entry> read(String afterId, int max, Duration maxWait) throws Exception {
        check();
        if (refuseReadsWith != null) {
          throw new io.lettuce.core.RedisCommandExecutionException(refuseReadsWith);
        }
        if (!readsHeld) {
          synchronized (InMemoryLog.this) {
            // checked again under the monitor that appends take: a hold that came between the
            // first check and here would otherwise let this read return an entry appended after
            // the hold
            if (!readsHeld) {
              check(); // and the log's state, which goes down under the same monitor
              int from = Math.max(0, (int) StreamIds.millis(afterId) - lostBefore);
              if (entries.size() <= from) {
                InMemoryLog.this.wait(maxWait.toMillis());
                // the log may have gone down while this read waited: it must not return what
                // was appended since
                check();
                if (readsHeld) {
                  return List.of(); // held while it waited
                }
                // where afterId is now: a trim while this read waited moved every entry down, and
                // a read that woke to the index it had would skip the entries moved below it
                from = Math.max(0, (int) StreamIds.millis(afterId) - lostBefore);
              }
              lastAsked = max;
              List<HintTransport.Entry> got = new ArrayList<>(entries.subList(
                  Math.min(from, entries.size()), Math.min(entries.size(), from + max)));
              long limit = carriesAtMost;
              if (limit > 0 && got.stream().mapToLong(HintTransport.Entry::size).sum() > limit) {
                throw new java.util.concurrent.TimeoutException("answer of " + got.size()
                    + " entries not in within the command timeout");
              }
              return got;
            }
          }
        }
        Thread.sleep(maxWait.toMillis());
        return List.of();
      }

      @Override
      public boolean holdsAfter(String afterId) {
        synchronized (InMemoryLog.this) {
          return StreamIds.millis(afterId) >= lostBefore;
        }
      }

      @Override
      public void close() {
        if (appendFailed) {
          appendFailed = false;
          closedAfterFailedAppend.incrementAndGet();
        }
      }
    };
  }
}
