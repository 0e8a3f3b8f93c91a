package io.epp4j.sim;

import io.epp4j.kvevents.KvBlockIndex;
import io.epp4j.kvevents.KvEventBatch;
import java.util.ArrayList;
import java.util.List;

/**
 * Feeds the replicas' KV events into a precise-mode {@link KvBlockIndex} in process, in place of
 * vLLM's ZeroMQ publisher and epp4j's subscriber. Each call is one engine step's batch, applied
 * at the simulated instant the step ends, so routing decisions taken before that instant do not
 * see it (as a live router does not see a step's events before the engine publishes them).
 */
final class KvIndexFeed implements KvEventListener {
  private final KvBlockIndex index;

  KvIndexFeed(KvBlockIndex index) {
    this.index = index;
  }

  @Override
  public void onKvEvents(String endpointId, long timestampNanos, List<KvEvent> events) {
    List<io.epp4j.kvevents.KvEvent> out = new ArrayList<>(events.size());
    for (KvEvent e : events) {
      if (e instanceof KvEvent.BlockStored s) {
        out.add(io.epp4j.kvevents.KvEvent.BlockStored.of(s.blockHashes(), s.parentBlockHash(),
            s.tokenIds(), s.blockSize()));
      } else if (e instanceof KvEvent.BlockRemoved r) {
        out.add(io.epp4j.kvevents.KvEvent.BlockRemoved.of(r.blockHashes()));
      } else {
        out.add(io.epp4j.kvevents.KvEvent.AllBlocksCleared.INSTANCE);
      }
    }
    // the batch's wall-clock stamp only feeds the lag metric, which means nothing in simulated
    // time: leave it unset
    index.apply(endpointId, KvEventBatch.of(0, out));
  }
}
