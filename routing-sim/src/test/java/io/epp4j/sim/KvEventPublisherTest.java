package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.kvevents.KvEvent;
import io.epp4j.kvevents.KvEventBatch;
import io.epp4j.kvevents.KvEventDecoder;
import java.util.List;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

class KvEventPublisherTest {

  @ParameterizedTest
  @ValueSource(booleans = {false, true})
  void bothEncodingsDecodeToTheSameEvents(boolean mapEncoding) throws Exception {
    int[] tokens = new int[32];
    for (int i = 0; i < tokens.length; i++) {
      tokens[i] = 1_000 + i;
    }
    // one hash above Long.MAX_VALUE as an unsigned 64-bit value, as vLLM sends it
    List<KvEvent> events = List.of(
        KvEvent.BlockStored.of(new long[] {-7L, 42L}, null, tokens, 16),
        KvEvent.BlockStored.of(new long[] {43L}, 42L, java.util.Arrays.copyOf(tokens, 16), 16),
        KvEvent.BlockRemoved.of(-7L, 43L),
        KvEvent.AllBlocksCleared.INSTANCE);
    byte[] payload = KvEventPublisher.encode(12.5, events, mapEncoding);
    KvEventBatch batch = KvEventDecoder.decode(payload);
    assertThat(batch.timestampSeconds()).isEqualTo(12.5);
    assertThat(batch.events()).isEqualTo(events);
    assertThat(batch.dataParallelRank()).isNegative();
  }
}
