package io.epp4j.scorers;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.Candidate;
import io.epp4j.api.Endpoint;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;
import java.util.function.BooleanSupplier;

/**
 * {@code ring-hash-picker}: sticky sessions by consistent hashing on a ketama ring, built and
 * searched exactly as Envoy's ring-hash load balancer (the one Istio's
 * {@code consistentHash.ringHash} configures) does, so for the same {@code ip:port} list, weights,
 * ring sizes and key the same endpoint is chosen.
 *
 * <p>Ring: weights are normalised to sum 1; {@code scale = min(ceil(minW × minRing) / minW,
 * maxRing)}; for each host in candidate order, entries {@code XXH64("<ip:port>_<i>", 0)} are added
 * while a running count stays below the running target {@code Σ scale × w}; entries are sorted by
 * unsigned hash. Lookup: the first entry whose hash is ≥ the request hash, wrapping to the first.
 * Fallbacks are the next distinct hosts clockwise. With {@code balanceFactor > 0}, hosts at or
 * above their bounded-load share are skipped clockwise (Envoy probes in a seeded random order
 * instead; the default, off, matches Istio).
 *
 * <p>A ring of more than 65,536 entries (about a second of work at 8 million) is built off the
 * routing thread, when the pool changes or when a route first meets its candidates; until then
 * routes read the last ring built for other candidates, as Envoy's workers keep their previous
 * ring until the rebuilt one reaches them.
 */
public final class RingHashPicker extends ConsistentHashPicker {
  public static final int DEFAULT_MINIMUM_RING_SIZE = 1024;
  public static final int DEFAULT_MAXIMUM_RING_SIZE = 8_388_608;

  private final int minRing;
  private final int maxRing;

  RingHashPicker(HashKeySource key, int minimumRingSize, int maximumRingSize, double balanceFactor,
      int maxNumOfEndpoints) {
    super(key, balanceFactor, maxNumOfEndpoints);
    if (minimumRingSize < 1 || minimumRingSize > maximumRingSize
        || maximumRingSize > DEFAULT_MAXIMUM_RING_SIZE) {
      throw new IllegalArgumentException("ring sizes must satisfy 1 <= minimumRingSize <= "
          + "maximumRingSize <= " + DEFAULT_MAXIMUM_RING_SIZE);
    }
    this.minRing = minimumRingSize;
    this.maxRing = maximumRingSize;
  }

  /**
   * A ring-hash picker keyed on {@link io.epp4j.api.InferenceRequest#sessionKey()} with Envoy's
   * default ring sizes, no bounded load and one endpoint.
   */
  public static RingHashPicker create() {
    return new RingHashPicker(HashKeySource.SESSION, DEFAULT_MINIMUM_RING_SIZE,
        DEFAULT_MAXIMUM_RING_SIZE, 0, 1);
  }

  /**
   * A ring-hash picker.
   *
   * @param hashOn          {@code session}, {@code header:<name>}, {@code cookie:<name>},
   *                        {@code query:<name>} or {@code source-ip}
   * @param minimumRingSize Envoy's {@code minimum_ring_size}
   * @param maximumRingSize Envoy's {@code maximum_ring_size}
   * @param balanceFactor   0 for off, else ≥ 1 (e.g. 1.25 = 125% of the mean load)
   * @param maxNumOfEndpoints endpoints returned (primary and fallbacks)
   */
  public static RingHashPicker create(String hashOn, int minimumRingSize, int maximumRingSize,
      double balanceFactor, int maxNumOfEndpoints) {
    HashKeySource s = HashKeySource.parse(hashOn);
    if (s == null) {
      throw new IllegalArgumentException("unsupported hashOn '" + hashOn + "'");
    }
    return new RingHashPicker(s, minimumRingSize, maximumRingSize, balanceFactor, maxNumOfEndpoints);
  }

  @Override
  Ring build(List<Candidate> candidates) {
    return new Ring(candidates, minRing, maxRing);
  }

  @Override
  Ring build(Endpoint[] endpoints, BooleanSupplier stop) {
    return new Ring(endpoints, minRing, maxRing, false, stop);
  }

  /** The ring's entries: its scale, plus at most one per host for rounding. */
  @Override
  long plannedSize(Endpoint[] endpoints) {
    long sum = 0;
    int minWeight = Integer.MAX_VALUE;
    for (Endpoint e : endpoints) {
      int w = weight(e);
      sum += w;
      minWeight = Math.min(minWeight, w);
    }
    double minW = Math.min(1.0, minWeight * 1.0 / sum);
    return (long) Math.ceil(Ring.scale(minW, minRing, maxRing)) + endpoints.length;
  }

  /**
   * The same construction with the ring limited to {@link #ROUTE_BUILD_LIMIT} entries: a few
   * milliseconds of work, with each host's share as close to its weight as that size allows.
   */
  @Override
  Ring provisional(Endpoint[] endpoints) {
    int max = Math.min(maxRing, ROUTE_BUILD_LIMIT);
    return new Ring(endpoints, Math.min(minRing, max), max, true);
  }

  /** The ketama ring. Hashes are stored with the sign bit flipped so signed order is unsigned order. */
  static final class Ring extends Table {
    final long[] flipped;
    final int[] hosts;
    private final boolean provisional;

    Ring(List<Candidate> candidates, int minRing, int maxRing) {
      this(endpointsOf(candidates), minRing, maxRing, false);
    }

    Ring(Endpoint[] endpoints, int minRing, int maxRing, boolean provisional) {
      this(endpoints, minRing, maxRing, provisional, NEVER);
    }

    /** Asks {@code stop} every {@link #STOP_CHECK_INTERVAL} entries; see {@link BuildStopped}. */
    Ring(Endpoint[] endpoints, int minRing, int maxRing, boolean provisional,
        BooleanSupplier stop) {
      super(endpoints);
      this.provisional = provisional;
      int n = endpoints.length;
      double minW = 1.0;
      for (double w : normalizedWeights) {
        minW = Math.min(minW, w);
      }
      double scale = scale(minW, minRing, maxRing);
      // uneven weights take the ring up to maxRing (8,388,608) entries: the build holds
      // primitive arrays only, the hashes as made (8 bytes per entry) besides the ring's own 12
      long[] entries = new long[(int) Math.ceil(scale) + n]; // unused beyond count
      int[] starts = new int[n + 1]; // host h made entries [starts[h], starts[h + 1])
      int count = 0;
      double current = 0.0;
      double target = 0.0;
      byte[] buf = new byte[64];
      for (int h = 0; h < n; h++) {
        starts[h] = count;
        byte[] prefix = (endpoints[h].id() + "_").getBytes(StandardCharsets.UTF_8);
        if (buf.length < prefix.length + 20) {
          buf = new byte[prefix.length + 20];
        }
        System.arraycopy(prefix, 0, buf, 0, prefix.length);
        target += scale * normalizedWeights[h];
        long i = 0;
        while (current < target) {
          int len = writeDecimal(i, buf, prefix.length);
          if (count == entries.length) {
            entries = Arrays.copyOf(entries, count * 2);
          }
          entries[count++] = Xxh64.hash(buf, 0, len, 0) ^ Long.MIN_VALUE;
          if ((count & (STOP_CHECK_INTERVAL - 1)) == 0 && stop.getAsBoolean()) {
            throw new BuildStopped();
          }
          i++;
          current += 1.0;
        }
      }
      starts[n] = count;
      flipped = new long[count];
      hosts = new int[count];
      sortByHash(entries, count, starts, n, flipped, hosts, stop);
    }

    /** Envoy's scale: entries for the lightest host's share of {@code minRing}, capped. */
    static double scale(double minW, int minRing, int maxRing) {
      return Math.min(Math.ceil(minW * minRing) / minW, (double) maxRing);
    }

    @Override
    boolean provisional() {
      return provisional;
    }

    /**
     * Writes entries {@code [0, count)}, each made by the host {@code h} with
     * {@code starts[h] <= index < starts[h + 1]}, into {@code flipped} and their hosts into
     * {@code hosts}, ordered by signed value and, among equal values, by index: what a stable
     * sort of the entries gives. Sorts primitive keys, the upper half of each value above its
     * index, then orders the few runs whose upper halves are equal by their whole values.
     */
    static void sortByHash(long[] entries, int count, int[] starts, int hostCount,
        long[] flipped, int[] hosts) {
      sortByHash(entries, count, starts, hostCount, flipped, hosts, NEVER);
    }

    /**
     * {@link #sortByHash(long[], int, int[], int, long[], int[])}, asking {@code stop} every
     * {@link #STOP_CHECK_INTERVAL} entries. The keys are distinct (each holds its index), so
     * their sorted order is one whatever the sort: they are first moved, in place, into 256
     * buckets by their top byte in signed order, then each bucket is sorted on its own, so that
     * no single step of a ring of millions takes more than a few milliseconds.
     */
    static void sortByHash(long[] entries, int count, int[] starts, int hostCount,
        long[] flipped, int[] hosts, BooleanSupplier stop) {
      int[] bounds = new int[257]; // bucket b holds positions [bounds[b], bounds[b + 1])
      for (int i = 0; i < count; i++) {
        long key = (entries[i] & 0xFFFF_FFFF_0000_0000L) | i;
        flipped[i] = key;
        bounds[bucket(key) + 1]++;
        checkStop(i, stop);
      }
      for (int b = 0; b < 256; b++) {
        bounds[b + 1] += bounds[b];
      }
      // in place: each key displaced from a bucket it does not belong to goes to the next free
      // position of its own, until the key in hand belongs where the walk stands
      int[] free = Arrays.copyOf(bounds, 256);
      int placed = 0;
      for (int b = 0; b < 256; b++) {
        int end = bounds[b + 1];
        while (free[b] < end) {
          long key = flipped[free[b]];
          for (int kb = bucket(key); kb != b; kb = bucket(key)) {
            int dest = free[kb]++;
            long displaced = flipped[dest];
            flipped[dest] = key;
            key = displaced;
            checkStop(++placed, stop);
          }
          flipped[free[b]++] = key;
          checkStop(++placed, stop);
        }
      }
      for (int b = 0; b < 256; b++) {
        Arrays.sort(flipped, bounds[b], bounds[b + 1]);
        if (stop.getAsBoolean()) {
          throw new BuildStopped();
        }
      }
      for (int i = 0; i < count; i++) {
        int index = (int) flipped[i];
        hosts[i] = hostOf(starts, hostCount, index);
        flipped[i] = entries[index];
        checkStop(i, stop);
      }
      // a run shares its upper half and is in index order: an insertion sort that moves only
      // greater values past smaller ones keeps equal values in index order
      for (int runStart = 0; runStart < count; ) {
        int runEnd = runStart + 1;
        long upper = flipped[runStart] >> 32;
        while (runEnd < count && flipped[runEnd] >> 32 == upper) {
          runEnd++;
        }
        for (int i = runStart + 1; i < runEnd; i++) {
          long v = flipped[i];
          int host = hosts[i];
          int j = i - 1;
          while (j >= runStart && flipped[j] > v) {
            flipped[j + 1] = flipped[j];
            hosts[j + 1] = hosts[j];
            j--;
          }
          flipped[j + 1] = v;
          hosts[j + 1] = host;
        }
        runStart = runEnd;
      }
    }

    /** A key's bucket: its top byte, 0 for the most negative, in signed order. */
    private static int bucket(long key) {
      return (int) (key >> 56) + 128;
    }

    /** Throws {@link BuildStopped} when {@code i} ends a stretch and the picker has closed. */
    private static void checkStop(int i, BooleanSupplier stop) {
      if ((i & (STOP_CHECK_INTERVAL - 1)) == 0 && stop.getAsBoolean()) {
        throw new BuildStopped();
      }
    }

    /** The host whose entries include {@code index}: the last one starting at or before it. */
    private static int hostOf(int[] starts, int hostCount, int index) {
      int low = 0;
      int high = hostCount - 1;
      while (low < high) {
        int mid = (low + high + 1) >>> 1;
        if (starts[mid] <= index) {
          low = mid;
        } else {
          high = mid - 1;
        }
      }
      return low;
    }

    /** Writes {@code v} (not negative) in decimal at {@code at}; returns the end. */
    private static int writeDecimal(long v, byte[] buf, int at) {
      int digits = 1;
      for (long rest = v / 10; rest != 0; rest /= 10) {
        digits++;
      }
      int end = at + digits;
      long rest = v;
      for (int p = end - 1; p >= at; p--) {
        buf[p] = (byte) ('0' + (int) (rest % 10));
        rest /= 10;
      }
      return end;
    }

    /** Envoy's (ketama's) binary search, on unsigned values. */
    @Override
    int position(long hash) {
      long h = hash ^ Long.MIN_VALUE;
      int size = flipped.length;
      int low = 0;
      int high = size;
      int mid;
      while (true) {
        mid = (low + high) >>> 1;
        if (mid == size) {
          return 0;
        }
        long midval = flipped[mid];
        long below = mid == 0 ? Long.MIN_VALUE : flipped[mid - 1];
        if (h <= midval && h > below) {
          return mid;
        }
        if (midval < h) {
          low = mid + 1;
        } else {
          high = mid - 1;
        }
        if (low > high) {
          return 0;
        }
      }
    }

    @Override
    int hostAt(int position) {
      return hosts[position];
    }

    @Override
    int size() {
      return flipped.length;
    }

    /** Unsigned ring hash at a position (for tests). */
    long hashAt(int position) {
      return flipped[position] ^ Long.MIN_VALUE;
    }
  }

  @Override
  public String toString() {
    return "ring-hash-picker(minimumRingSize=" + minRing + ", maximumRingSize=" + maxRing + ")";
  }

  /** Provides {@code ring-hash-picker}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("ring-hash-picker");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      HashKeySource key = HashKeySource.parse(p, "hashOn", "session");
      int min = p.getInt("minimumRingSize", DEFAULT_MINIMUM_RING_SIZE, 1,
          DEFAULT_MAXIMUM_RING_SIZE);
      int max = p.getInt("maximumRingSize", DEFAULT_MAXIMUM_RING_SIZE, 1,
          DEFAULT_MAXIMUM_RING_SIZE);
      if (min > max) {
        p.error("minimumRingSize", "must not exceed maximumRingSize (" + max + "), got " + min);
        min = Math.min(DEFAULT_MINIMUM_RING_SIZE, max);
      }
      double bf = CommonParameters.balanceFactor(p);
      return new RingHashPicker(key, min, max, bf, CommonParameters.maxEndpoints(p));
    }
  }
}
