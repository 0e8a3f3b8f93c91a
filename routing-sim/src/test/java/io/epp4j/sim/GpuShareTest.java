package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import org.junit.jupiter.api.Test;

class GpuShareTest {
  private static final long MS = 1_000_000L;

  @Test
  void aStepAloneGetsTheWholeGpu() {
    GpuShare gpu = new GpuShare();
    gpu.add(0, 0, 0.010);
    assertThat(gpu.nextCompletionNanos()).isEqualTo(10 * MS);
  }

  @Test
  void replicasSteppingTogetherShareTheGpu() {
    GpuShare gpu = new GpuShare();
    for (int r = 0; r < 6; r++) {
      gpu.add(0, r, 0.010);
    }
    assertThat(gpu.nextCompletionNanos()).isEqualTo(60 * MS);
    int[] done = new int[6];
    assertThat(gpu.popFinished(60 * MS, done)).isEqualTo(6);
    assertThat(gpu.active()).isZero();
  }

  @Test
  void aStepThatJoinsLaterSlowsTheOtherOnlyWhileBothRun() {
    GpuShare gpu = new GpuShare();
    gpu.add(0, 0, 0.010);             // alone for 4 ms: 6 ms of work left
    gpu.add(4 * MS, 1, 0.002);        // both at half speed: replica 1 done after 4 ms
    assertThat(gpu.nextCompletionNanos()).isEqualTo(8 * MS);
    int[] done = new int[2];
    assertThat(gpu.popFinished(8 * MS, done)).isEqualTo(1);
    assertThat(done[0]).isEqualTo(1);
    // replica 0 had 6 - 2 = 4 ms left, now alone again
    assertThat(gpu.nextCompletionNanos()).isEqualTo(12 * MS);
  }

  @Test
  void theBuiltInProfileDerivesItsCacheFromTheMemoryBudget() {
    HardwareProfile p = HardwareProfile.qwen3H100Mps6();
    long kvBytes = (long) (80.0 * (1L << 30) * 0.15 - 3.4e9 - 1.5e9);
    assertThat(p.kvBlocksPerReplica()).isEqualTo((int) (kvBytes / 114_688 / 16)).isEqualTo(4351);
    // decode of one short sequence is bound by reading the weights: ~1.3 ms on an unshared GPU
    assertThat(p.stepGpuSeconds(1, 100, 101, 1)).isBetween(0.001, 0.0015);
    // an 8192-token prefill is compute bound and far slower
    assertThat(p.stepGpuSeconds(8192, 8192 * 4096.0, 8192, 1))
        .isGreaterThan(20 * p.stepGpuSeconds(1, 100, 101, 1));
  }
}
