package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import com.sun.management.UnixOperatingSystemMXBean;
import java.lang.management.ManagementFactory;
import org.junit.jupiter.api.Test;

/**
 * Arguments that cannot start replicas are refused before anything is made: a program that
 * catches the exception and goes on (a test that tries a bad count, a retry loop) is left with no
 * ZeroMQ context behind it. Each context holds file descriptors (its mailbox's selector and pipe)
 * until it is closed, so a leak shows as descriptors that pile up with every failed start.
 */
class EmulatedReplicasBadArgumentsTest {
  @Test
  void zeroReplicasAreRefusedWithoutLeavingAContextOpen() {
    UnixOperatingSystemMXBean os =
        (UnixOperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
    // once, so that whatever the first call loads for good (classes, the JDK's own selectors) is
    // in the baseline
    assertThatThrownBy(() -> EmulatedReplicas.start(0, 21_000, 26_000, false, 20, 1))
        .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("replicas");
    long before = os.getOpenFileDescriptorCount();
    int attempts = 50;
    for (int i = 0; i < attempts; i++) {
      assertThatThrownBy(() -> EmulatedReplicas.start(0, 21_000, 26_000, false, 20, 1))
          .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("replicas");
    }
    // a leaked context holds at least one descriptor per attempt; another test's socket closing
    // or opening meanwhile moves the count by a few at most
    assertThat(os.getOpenFileDescriptorCount() - before)
        .as("file descriptors opened by %d refused starts", attempts)
        .isLessThan(attempts / 2);
  }
}
