package io.epp4j.core;

import java.util.SplittableRandom;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicLong;
import java.util.random.RandomGenerator;
import org.jspecify.annotations.Nullable;

/**
 * The random numbers a routing cycle draws for tie-breaks. Without a seed each cycle uses the
 * thread's own generator (no contention); with one, the n-th cycle of the router gets a
 * generator derived from the seed and n, so a run driven from one thread repeats exactly.
 */
final class TieBreaks {
  private final @Nullable Long seed;
  private final AtomicLong cycles = new AtomicLong();

  TieBreaks(@Nullable Long seed) {
    this.seed = seed;
  }

  /** The generator for the next cycle. */
  RandomGenerator next() {
    if (seed == null) {
      return ThreadLocalRandom.current();
    }
    return new SplittableRandom(seed ^ (cycles.incrementAndGet() * 0x9E3779B97F4A7C15L));
  }
}
