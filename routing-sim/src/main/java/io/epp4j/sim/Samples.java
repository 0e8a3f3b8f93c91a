package io.epp4j.sim;

import java.util.Arrays;

/** A growable list of doubles with percentiles (nearest rank on the sorted values). */
final class Samples {
  private double[] values = new double[256];
  private int size;
  private boolean sorted = true;

  void add(double v) {
    if (size == values.length) {
      values = Arrays.copyOf(values, size * 2);
    }
    values[size++] = v;
    sorted = false;
  }

  int size() {
    return size;
  }

  /**
   * The p-th percentile (0..100); NaN when empty: a run without the samples (an inter-token
   * latency when every output is one token, anything when nothing was served) has no figure,
   * and reports print none rather than a 0 that reads as measured.
   */
  double percentile(double p) {
    if (size == 0) {
      return Double.NaN;
    }
    sort();
    int rank = (int) Math.ceil(p / 100.0 * size);
    return values[Math.min(size - 1, Math.max(0, rank - 1))];
  }

  /** The mean; NaN when empty, as {@link #percentile}. */
  double mean() {
    if (size == 0) {
      return Double.NaN;
    }
    double s = 0;
    for (int i = 0; i < size; i++) {
      s += values[i];
    }
    return s / size;
  }

  /** The values, sorted ascending (a copy). */
  double[] sortedValues() {
    sort();
    return Arrays.copyOf(values, size);
  }

  private void sort() {
    if (!sorted) {
      Arrays.sort(values, 0, size);
      sorted = true;
    }
  }
}
