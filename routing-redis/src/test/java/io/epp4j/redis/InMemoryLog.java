package io.epp4j.redis;

import java.io.IOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

/** An in-memory stream for tests of the replication logic; it can be taken down like Redis. */
final class InMemoryLog {
  private final List<HintTransport.Entry> entries = new ArrayList<>();
  private volatile boolean up = true;

  synchronized void append(byte[] batch) {
    entries.add(new HintTransport.Entry((entries.size() + 1) + "-0", batch));
    notifyAll();
  }

  void down() {
    up = false;
  }

  void up() {
    up = true;
  }

  synchronized int size() {
    return entries.size();
  }

  HintTransport.Factory factory() {
    return () -> new HintTransport() {
      @Override
      public void connect() throws IOException {
        if (!up) {
          throw new IOException("down");
        }
      }

      @Override
      public String append(byte[] batch) throws IOException {
        connect();
        InMemoryLog.this.append(batch);
        return "";
      }

      @Override
      public List<Entry> read(String afterId, int max, Duration maxWait) throws Exception {
        connect();
        int from = (int) StreamIds.millis(afterId);
        synchronized (InMemoryLog.this) {
          if (entries.size() <= from) {
            InMemoryLog.this.wait(maxWait.toMillis());
          }
          return new ArrayList<>(entries.subList(Math.min(from, entries.size()),
              Math.min(entries.size(), from + max)));
        }
      }

      @Override
      public boolean holdsAfter(String afterId) {
        return true;
      }

      @Override
      public void close() {}
    };
  }
}
