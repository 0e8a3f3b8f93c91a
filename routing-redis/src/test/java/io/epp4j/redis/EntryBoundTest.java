package io.epp4j.redis;

import static io.epp4j.redis.ReplicationLogicTest.await;
import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Ticker;
import io.opentelemetry.api.OpenTelemetry;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * What a router writes stays within the entry length every reader accepts, whatever the size of
 * its pool: the readers skip a longer entry unread, as another writer's.
 */
class EntryBoundTest {
  /** Longest endpoint id used here, in bytes: a figure record is this and 15 bytes more. */
  private static final int ID_BYTES = 60_000;
  /** Endpoints whose figures together take more than the longest entry a reader accepts. */
  private static final int ENDPOINTS =
      RedisReplication.MAX_ENTRY_BYTES / (ID_BYTES + 15) + 8;

  private final List<RedisReplication> plugins = new ArrayList<>();

  @AfterEach
  void close() {
    plugins.forEach(RedisReplication::close);
  }

  private RedisReplication replication(InMemoryLog log, String routerId, FakeHints hints) {
    // a heartbeat of a minute: the figures go out once, on connecting, and are not forgotten
    RedisReplication r = new RedisReplication(new RedisReplication.Settings("p", "s", routerId,
        256, 1_000_000L, 1000, 1L << 20, 60_000_000_000L), "t", hints, log.factory(),
        OpenTelemetry.noop(), Ticker.system());
    plugins.add(r);
    return r;
  }

  /**
   * A pool of many endpoints (or of long endpoint ids): the figures of all of them used to go
   * out in one entry, which past {@link RedisReplication#MAX_ENTRY_BYTES} every other router
   * skipped as malformed, so that none of them counted this router's load. They go out in as
   * many entries as their bytes need, none longer than {@link RedisReplication#MAX_BATCH_BYTES}
   * and the one record that crossed it, and the other router counts every one.
   */
  @Test
  void theFiguresOfALargePoolGoOutInEntriesTheReadersAccept() throws Exception {
    Map<String, Integer> local = new ConcurrentHashMap<>();
    for (int i = 0; i < ENDPOINTS; i++) {
      String n = Integer.toString(i);
      local.put("h".repeat(ID_BYTES - n.length() - 5) + n + ":8000", i + 1);
    }
    InMemoryLog log = new InMemoryLog();
    FakeHints b = new FakeHints(Map.of());
    RedisReplication reader = replication(log, "b", b);
    replication(log, "a", new FakeHints(local));
    await("b counts a's figure on every endpoint",
        () -> b.remote.equals(local) || reader.malformed() > 0);
    assertThat(reader.malformed()).as("entries b skipped").isZero();
    assertThat(b.remote).isEqualTo(local);
    for (byte[] entry : log.batches()) {
      assertThat(entry.length).as("an entry's length")
          .isLessThan(RedisReplication.MAX_BATCH_BYTES + ID_BYTES + 15 + 64);
    }

    // the farewell of a router that closes: zeros for every endpoint, in entries as bounded
    int before = log.batches().size();
    plugins.remove(1).close();
    await("b hears that a's load is gone", () -> b.remote.isEmpty() || reader.malformed() > 0);
    assertThat(reader.malformed()).as("entries b skipped").isZero();
    List<byte[]> all = log.batches();
    for (byte[] entry : all.subList(before, all.size())) {
      assertThat(entry.length).as("a farewell entry's length")
          .isLessThan(RedisReplication.MAX_BATCH_BYTES + ID_BYTES + 15 + 64);
    }
  }
}
