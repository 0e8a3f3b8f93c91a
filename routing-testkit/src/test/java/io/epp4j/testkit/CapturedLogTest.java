package io.epp4j.testkit;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.logging.Level;
import java.util.logging.Logger;
import org.junit.jupiter.api.Test;

class CapturedLogTest {

  @Test
  void capturesTheLoggerAndThoseBelowItWithExceptionsUntilClosed() throws Exception {
    Logger below = Logger.getLogger("io.epp4j.testkit.captured.below");
    Logger beside = Logger.getLogger("io.epp4j.testkit.other");
    CapturedLog log = CapturedLog.of("io.epp4j.testkit.captured");
    try (log) {
      below.warning("first");
      beside.warning("not under the captured logger");
      Thread t = new Thread(() -> below.log(Level.WARNING, "from another thread",
          new IllegalStateException("why", new IllegalArgumentException("cause"))));
      t.start();
      t.join(10_000);
      assertThat(log.records()).hasSize(2);
      assertThat(log.records().get(0)).contains("WARNING").contains("first");
      assertThat(log.text()).contains("from another thread")
          .contains("java.lang.IllegalStateException: why")
          .contains("Caused by: java.lang.IllegalArgumentException: cause")
          .contains("CapturedLogTest") // a frame
          .doesNotContain("not under the captured logger");
    }
    below.warning("after the close");
    assertThat(log.records()).hasSize(2);
    assertThat(log.text()).doesNotContain("after the close");
  }
}
