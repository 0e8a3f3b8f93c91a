package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.ArrayList;
import java.util.List;
import java.util.logging.Handler;
import java.util.logging.Level;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import org.junit.jupiter.api.Test;

/**
 * An engine whose block size differs from the one precise mode is configured with is a loud,
 * counted condition: requests scored before the engine's size is learned, and anything else
 * configured for the same size, work with the wrong blocks.
 */
class BlockSizeMismatchTest {

  private static KvEventBatch stored(long hash, int blockSize) {
    int[] tokens = new int[blockSize];
    for (int i = 0; i < blockSize; i++) {
      tokens[i] = (int) hash * 1000 + i;
    }
    return new KvEventBatch(0, List.of(KvEvent.BlockStored.of(new long[] {hash}, null, tokens,
        blockSize)), 0);
  }

  @Test
  void anEngineBlockSizeOtherThanTheConfiguredOneIsCountedOncePerChangeAndLogged() {
    List<LogRecord> logged = new ArrayList<>();
    Handler capture = new Handler() {
      @Override
      public void publish(LogRecord r) {
        logged.add(r);
      }

      @Override
      public void flush() {}

      @Override
      public void close() {}
    };
    Logger log = Logger.getLogger(KvBlockIndex.class.getName());
    log.addHandler(capture);
    try {
      KvBlockIndex index = KvBlockIndex.builder().defaultBlockSize(16).build();
      index.apply("a:1", stored(1, 16));
      assertThat(index.metrics().blockSizeMismatches()).isZero();
      index.apply("b:1", stored(2, 64));
      index.apply("b:1", stored(3, 64)); // the same size again: nothing new
      assertThat(index.metrics().blockSizeMismatches()).isEqualTo(1);
      assertThat(index.endpointBlockSize("b:1")).as("the engine's size wins").isEqualTo(64);
      index.setEndpointBlockSize("c:1", 32); // learned from metrics
      index.apply("c:1", stored(4, 32));
      assertThat(index.metrics().blockSizeMismatches()).isEqualTo(2);
      index.apply("b:1", stored(5, 16)); // back to the configured size: not a mismatch
      assertThat(index.metrics().blockSizeMismatches()).isEqualTo(2);

      List<LogRecord> warnings = logged.stream()
          .filter(r -> r.getLevel() == Level.WARNING).toList();
      assertThat(warnings).as("rate-limited: one report for two mismatches").hasSize(1);
      assertThat(warnings.get(0).getMessage()).contains("b:1").contains("64")
          .contains("16").contains("blockSizeTokens");
    } finally {
      log.removeHandler(capture);
    }
  }
}
