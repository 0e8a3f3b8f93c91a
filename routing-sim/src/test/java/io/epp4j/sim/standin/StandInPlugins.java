package io.epp4j.sim.standin;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Picker;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.PluginProvider;
import io.epp4j.api.RequestListener;
import io.epp4j.api.Result;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Scorer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Minimal test-only versions of the built-in plugins the presets name, registered with a
 * negative priority so the real ones from routing-scorers win as soon as they are on the
 * classpath. They follow the upstream EPP behaviour closely enough to exercise the simulator.
 */
public final class StandInPlugins {
  private StandInPlugins() {}

  static final int PRIORITY = -100;

  /** {@code round-robin-picker}. */
  public static final class RoundRobinProvider implements PluginProvider {
    @Override public String type() { return "round-robin-picker"; }
    @Override public int priority() { return PRIORITY; }
    @Override public Result<? extends Plugin> create(PluginContext c, Parameters p) {
      AtomicLong next = new AtomicLong();
      Picker picker = (req, state, cands, scores) ->
          List.of(cands.get((int) Math.floorMod(next.getAndIncrement(), (long) cands.size())));
      return Result.ok(picker);
    }
  }

  /** {@code ring-hash-picker}: a ketama ring (1024 entries) keyed by the session key. */
  public static final class RingHashProvider implements PluginProvider {
    @Override public String type() { return "ring-hash-picker"; }
    @Override public int priority() { return PRIORITY; }
    @Override public Result<? extends Plugin> create(PluginContext c, Parameters p) {
      Map<List<String>, long[][]> rings = new HashMap<>();
      Picker picker = (req, state, cands, scores) -> {
        List<String> ids = new ArrayList<>();
        for (Candidate cand : cands) {
          ids.add(cand.id());
        }
        long[][] ring;
        synchronized (rings) {
          ring = rings.computeIfAbsent(ids, RingHashProvider::build);
        }
        String key = req.sessionKey() == null ? req.requestId() : req.sessionKey();
        long h = hash(key);
        int i = Arrays.binarySearch(ring[0], h);
        if (i < 0) {
          i = -i - 1;
        }
        if (i == ring[0].length) {
          i = 0;
        }
        return List.of(cands.get((int) ring[1][i]));
      };
      return Result.ok(picker);
    }

    private static long[][] build(List<String> ids) {
      int per = (1024 + ids.size() - 1) / ids.size();
      long[][] entries = new long[ids.size() * per][];
      int k = 0;
      for (int e = 0; e < ids.size(); e++) {
        for (int i = 0; i < per; i++) {
          entries[k++] = new long[] {hash(ids.get(e) + "_" + i), e};
        }
      }
      Arrays.sort(entries, (a, b) -> Long.compareUnsigned(a[0], b[0]) < 0 ? -1
          : Long.compareUnsigned(a[0], b[0]) > 0 ? 1 : 0);
      long[][] ring = new long[2][entries.length];
      for (int i = 0; i < entries.length; i++) {
        ring[0][i] = entries[i][0] ^ Long.MIN_VALUE; // signed order for binarySearch
        ring[1][i] = entries[i][1];
      }
      return ring;
    }

    static long hash(String s) {
      long h = 0xcbf29ce484222325L;
      for (byte b : s.getBytes(StandardCharsets.UTF_8)) {
        h = (h ^ (b & 0xff)) * 0x100000001b3L;
      }
      h ^= h >>> 33;
      h *= 0xff51afd7ed558ccdL;
      h ^= h >>> 33;
      return h ^ Long.MIN_VALUE;
    }
  }

  /** {@code queue-scorer}: min-max over waiting requests. */
  public static final class QueueProvider implements PluginProvider {
    @Override public String type() { return "queue-scorer"; }
    @Override public int priority() { return PRIORITY; }
    @Override public Result<? extends Plugin> create(PluginContext c, Parameters p) {
      Scorer s = (req, state, cands, scores) -> {
        int min = Integer.MAX_VALUE;
        int max = 0;
        for (Candidate cand : cands) {
          min = Math.min(min, cand.metrics().waitingRequests());
          max = Math.max(max, cand.metrics().waitingRequests());
        }
        for (int i = 0; i < cands.size(); i++) {
          scores[i] = max == min ? 1.0
              : (max - cands.get(i).metrics().waitingRequests()) / (double) (max - min);
        }
      };
      return Result.ok(s);
    }
  }

  /** {@code kv-cache-utilization-scorer}: 1 − usage. */
  public static final class KvUtilizationProvider implements PluginProvider {
    @Override public String type() { return "kv-cache-utilization-scorer"; }
    @Override public int priority() { return PRIORITY; }
    @Override public Result<? extends Plugin> create(PluginContext c, Parameters p) {
      Scorer s = (req, state, cands, scores) -> {
        for (int i = 0; i < cands.size(); i++) {
          scores[i] = 1.0 - cands.get(i).metrics().kvCacheUsage();
        }
      };
      return Result.ok(s);
    }
  }

  /** {@code prefix-cache-scorer}: per-endpoint LRU of chained block hashes of the token IDs. */
  public static final class PrefixProvider implements PluginProvider {
    @Override public String type() { return "prefix-cache-scorer"; }
    @Override public int priority() { return PRIORITY; }
    @Override public Result<? extends Plugin> create(PluginContext c, Parameters p) {
      return Result.ok(new PrefixScorer());
    }
  }

  static final class PrefixScorer implements Scorer, RequestListener {
    private static final int BLOCK = 16;
    private final Map<String, LinkedHashMap<Long, Boolean>> index = new HashMap<>();
    private final Map<String, Long> capacity = new HashMap<>();

    private static long[] blocks(InferenceRequest req) {
      int[] t = req.tokenIds();
      if (t == null) {
        return new long[0];
      }
      long[] out = new long[t.length / BLOCK];
      long h = 0x1234;
      for (int b = 0; b < out.length; b++) {
        for (int i = b * BLOCK; i < (b + 1) * BLOCK; i++) {
          h = (h ^ t[i]) * 0x9E3779B97F4A7C15L;
          h ^= h >>> 31;
        }
        out[b] = h;
      }
      return out;
    }

    @Override
    public synchronized void score(InferenceRequest req, CycleState state, List<Candidate> cands,
        double[] scores) {
      long[] bs = blocks(req);
      if (bs.length == 0) {
        return;
      }
      for (int i = 0; i < cands.size(); i++) {
        capacity.put(cands.get(i).id(), cands.get(i).metrics().kvCapacityBlocks() > 0
            ? cands.get(i).metrics().kvCapacityBlocks() : 31_250L);
        LinkedHashMap<Long, Boolean> m = index.get(cands.get(i).id());
        int n = 0;
        while (m != null && n < bs.length && m.containsKey(bs[n])) {
          n++;
        }
        scores[i] = n / (double) bs.length;
      }
    }

    @Override
    public synchronized void afterRouting(InferenceRequest req, CycleState state,
        RoutingDecision decision) {
      Endpoint e = decision.primary();
      long cap = capacity.getOrDefault(e.id(), 31_250L);
      LinkedHashMap<Long, Boolean> m = index.computeIfAbsent(e.id(),
          k -> new LinkedHashMap<>(1024, 0.75f, true) {
            private static final long serialVersionUID = 1L;
            @Override protected boolean removeEldestEntry(Map.Entry<Long, Boolean> eldest) {
              return size() > cap;
            }
          });
      for (long b : blocks(req)) {
        m.put(b, Boolean.TRUE);
      }
    }
  }
}
