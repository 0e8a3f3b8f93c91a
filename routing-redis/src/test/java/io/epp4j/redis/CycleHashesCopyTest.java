package io.epp4j.redis;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Usage;
import io.epp4j.core.Router;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * The prefix scorer writes a cycle's block hashes into an array its thread reuses for the next
 * route, readable only until the cycle ends. The replication queues what a route taught for a
 * publisher that sends it later, so it must keep its own copy of the hashes.
 */
class CycleHashesCopyTest {
  private final ReplicationLogicTest logic = new ReplicationLogicTest();

  @AfterEach
  void close() {
    logic.close();
  }

  @Test
  void eachQueuedRouteSendsItsOwnPromptsHashesAfterLaterRoutesReusedTheScorersArray()
      throws Exception {
    InMemoryLog log = new InMemoryLog();
    log.down(); // every hint stays queued while the routing thread routes the next prompts
    Router a = logic.router(log, "p", "a", 64);
    // 64 characters make a block of the default 16-token size: 20 and 24 blocks
    InferenceRequest first = InferenceRequest.completion("m", "first prompt, ".repeat(92));
    InferenceRequest second = InferenceRequest.completion("m", "the other one ".repeat(110));
    for (InferenceRequest r : List.of(first, second, first)) {
      a.route(r).onComplete(new Usage(10, 1, 11));
    }
    log.up();
    List<long[]> sent = new ArrayList<>();
    ReplicationLogicTest.await("the three routes' prefixes were sent", () -> {
      sent.clear();
      sent.addAll(prefixesIn(log, "a"));
      return sent.size() >= 3;
    });
    assertThat(sent).hasSize(3);
    assertThat(sent.get(0)).as("the first prompt's blocks").hasSize(20);
    assertThat(sent.get(1)).as("the second prompt's blocks").hasSize(24);
    assertThat(sent.get(2)).as("the first prompt again: the same hashes").isEqualTo(sent.get(0));
    assertThat(sent.get(1)[0]).as("another prompt: other hashes").isNotEqualTo(sent.get(0)[0]);
  }

  /** The hashes of every prefix record router {@code origin} wrote to the log, in order. */
  private static List<long[]> prefixesIn(InMemoryLog log, String origin) {
    return ReplicationLogicTest.batchesOf(log, origin).stream()
        .flatMap(b -> b.prefixes().stream()).toList();
  }
}
