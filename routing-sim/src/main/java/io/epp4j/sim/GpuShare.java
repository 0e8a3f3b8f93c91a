package io.epp4j.sim;

/**
 * One GPU shared by several replicas through MPS, modelled as processor sharing: while {@code k}
 * replicas have a step on the GPU, each progresses at {@code 1/k} of the unshared speed. A step
 * alone gets the whole GPU; six replicas stepping together each take six times as long. Work is
 * in seconds of unshared GPU time, as {@link HardwareProfile#stepGpuSeconds} computes it.
 */
final class GpuShare {
  private static final double DONE = 1e-9;

  private int[] replicas = new int[8];
  private double[] remaining = new double[8];
  private int count;
  private long lastNanos;
  /** Bumped on every change, so completion events scheduled before it are known stale. */
  long version;

  /** Starts a step of {@code replica} needing {@code work} seconds of unshared GPU time. */
  void add(long nowNanos, int replica, double work) {
    advance(nowNanos);
    if (count == replicas.length) {
      replicas = java.util.Arrays.copyOf(replicas, count * 2);
      remaining = java.util.Arrays.copyOf(remaining, count * 2);
    }
    replicas[count] = replica;
    remaining[count] = Math.max(work, 0);
    count++;
    version++;
  }

  /** Time the next running step finishes at the current share, or -1 when the GPU is idle. */
  long nextCompletionNanos() {
    if (count == 0) {
      return -1;
    }
    double min = Double.MAX_VALUE;
    for (int i = 0; i < count; i++) {
      min = Math.min(min, remaining[i]);
    }
    return lastNanos + (long) Math.ceil(Math.max(0, min) * count * 1e9);
  }

  /**
   * Advances to {@code nowNanos} and removes the steps that are done; writes their replicas to
   * {@code out} and returns how many.
   */
  int popFinished(long nowNanos, int[] out) {
    advance(nowNanos);
    int n = 0;
    for (int i = 0; i < count; ) {
      if (remaining[i] <= DONE) {
        out[n++] = replicas[i];
        count--;
        replicas[i] = replicas[count];
        remaining[i] = remaining[count];
      } else {
        i++;
      }
    }
    if (n > 0) {
      version++;
    }
    return n;
  }

  int active() {
    return count;
  }

  private void advance(long nowNanos) {
    if (count > 0 && nowNanos > lastNanos) {
      double each = (nowNanos - lastNanos) / 1e9 / count;
      for (int i = 0; i < count; i++) {
        remaining[i] -= each;
      }
    }
    lastNanos = Math.max(lastNanos, nowNanos);
  }
}
