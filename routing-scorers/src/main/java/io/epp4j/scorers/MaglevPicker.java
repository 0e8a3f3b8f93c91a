package io.epp4j.scorers;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.Candidate;
import io.epp4j.api.Endpoint;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import java.util.Arrays;
import java.util.List;
import java.util.function.BooleanSupplier;

/**
 * {@code maglev-picker}: sticky sessions through a Maglev lookup table built as Envoy builds it
 * (hosts sorted by {@code ip:port}; offset {@code XXH64(addr, 0) mod M}, skip
 * {@code XXH64(addr, 1) mod (M − 1) + 1}; weighted round-robin fill of the prime-sized table).
 * Lookup is {@code table[hash mod M]}. Fallbacks are the next distinct hosts in the table; bounded
 * load ({@code balanceFactor}) skips overloaded hosts the same way.
 *
 * <p>A table larger than Envoy's default 65,537 slots (up to about a second of work at
 * 5,000,011) is built off the routing thread, when the pool changes or when a route first meets
 * its candidates; until then routes read the last table built for other candidates, or a
 * stand-in table of 65,537 slots when none was built yet.
 */
final class MaglevPicker extends ConsistentHashPicker {
  static final int DEFAULT_TABLE_SIZE = 65537;
  static final int MAX_TABLE_SIZE = 5_000_011;

  private final int tableSize;

  MaglevPicker(HashKeySource key, int tableSize, double balanceFactor, int maxNumOfEndpoints) {
    super(key, balanceFactor, maxNumOfEndpoints);
    if (!isPrime(tableSize) || tableSize > MAX_TABLE_SIZE) {
      throw new IllegalArgumentException("tableSize must be a prime <= " + MAX_TABLE_SIZE
          + ", got " + tableSize);
    }
    this.tableSize = tableSize;
  }

  static boolean isPrime(long n) {
    if (n < 2) {
      return false;
    }
    if (n % 2 == 0) {
      return n == 2;
    }
    for (long d = 3; d * d <= n; d += 2) {
      if (n % d == 0) {
        return false;
      }
    }
    return true;
  }

  @Override
  MaglevTable build(List<Candidate> candidates) {
    return new MaglevTable(candidates, tableSize);
  }

  @Override
  MaglevTable build(Endpoint[] endpoints, BooleanSupplier stop) {
    return new MaglevTable(endpoints, tableSize, false, stop);
  }

  /** The table's slots: its size, whatever the endpoints. */
  @Override
  long plannedSize(Endpoint[] endpoints) {
    return tableSize;
  }

  /**
   * Envoy's default table (65,537 slots, a prime just above {@link #ROUTE_BUILD_LIMIT}) costs a
   * route a few milliseconds like the largest ring built there, and is still built on the route.
   */
  @Override
  long routeBuildLimit() {
    return DEFAULT_TABLE_SIZE;
  }

  /**
   * The same construction in Envoy's default table size: a valid Maglev table of these
   * endpoints, with each one's share of slots as close to its weight as 65,537 slots allow.
   */
  @Override
  MaglevTable provisional(Endpoint[] endpoints) {
    return new MaglevTable(endpoints, Math.min(tableSize, DEFAULT_TABLE_SIZE), true);
  }

  static final class MaglevTable extends Table {
    final int[] slots;
    private final boolean provisional;

    MaglevTable(List<Candidate> candidates, int m) {
      this(endpointsOf(candidates), m, false);
    }

    MaglevTable(Endpoint[] endpoints, int m, boolean provisional) {
      this(endpoints, m, provisional, NEVER);
    }

    /** Asks {@code stop} every {@link #STOP_CHECK_INTERVAL} slots; see {@link BuildStopped}. */
    MaglevTable(Endpoint[] endpoints, int m, boolean provisional, BooleanSupplier stop) {
      super(endpoints);
      this.provisional = provisional;
      int n = endpoints.length;
      Integer[] sorted = new Integer[n];
      for (int i = 0; i < n; i++) {
        sorted[i] = i;
      }
      Arrays.sort(sorted, (a, b) -> endpoints[a].id().compareTo(endpoints[b].id()));
      long[] offset = new long[n];
      long[] skip = new long[n];
      long[] next = new long[n];
      double[] target = new double[n];
      double maxW = 0.0;
      for (int i = 0; i < n; i++) {
        String addr = endpoints[sorted[i]].id();
        offset[i] = Long.remainderUnsigned(Xxh64.hash(addr, 0), m);
        skip[i] = Long.remainderUnsigned(Xxh64.hash(addr, 1), m - 1) + 1;
        maxW = Math.max(maxW, normalizedWeights[sorted[i]]);
      }
      slots = new int[m];
      Arrays.fill(slots, -1);
      int filled = 0;
      for (long iteration = 1; filled < m; iteration++) {
        for (int i = 0; i < n && filled < m; i++) {
          double w = normalizedWeights[sorted[i]];
          if (iteration * w < target[i]) {
            continue;
          }
          target[i] += maxW;
          int c = (int) ((offset[i] + skip[i] * next[i]) % m);
          while (slots[c] != -1) {
            next[i]++;
            c = (int) ((offset[i] + skip[i] * next[i]) % m);
          }
          slots[c] = sorted[i];
          next[i]++;
          filled++;
          if ((filled & (STOP_CHECK_INTERVAL - 1)) == 0 && stop.getAsBoolean()) {
            throw new BuildStopped();
          }
        }
      }
    }

    @Override
    boolean provisional() {
      return provisional;
    }

    @Override
    int position(long hash) {
      return (int) Long.remainderUnsigned(hash, slots.length);
    }

    @Override
    int hostAt(int position) {
      return slots[position];
    }

    @Override
    int size() {
      return slots.length;
    }
  }

  @Override
  public String toString() {
    return "maglev-picker(tableSize=" + tableSize + ")";
  }

  /** Provides {@code maglev-picker}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("maglev-picker");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      HashKeySource key = HashKeySource.parse(p, "hashOn", "session");
      int size = p.getInt("tableSize", DEFAULT_TABLE_SIZE, 2, MAX_TABLE_SIZE);
      if (!isPrime(size)) {
        p.error("tableSize", "must be a prime number, got " + size);
        size = DEFAULT_TABLE_SIZE;
      }
      double bf = CommonParameters.balanceFactor(p);
      return new MaglevPicker(key, size, bf, CommonParameters.maxEndpoints(p));
    }
  }
}
