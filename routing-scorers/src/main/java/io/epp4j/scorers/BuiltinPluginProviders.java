package io.epp4j.scorers;

import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.PluginProvider;
import io.epp4j.api.Result;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.Function;

/**
 * {@link java.util.ServiceLoader} providers of the built-in plugins of this module. The classes are
 * public only because ServiceLoader instantiates them; use them through a configuration (plugin
 * type names) rather than directly. Parameters and defaults are documented in
 * {@code docs/plugins.md}.
 */
public final class BuiltinPluginProviders {
  private BuiltinPluginProviders() {}

  static final int MAX_ENDPOINTS_LIMIT = 1024;

  /** A provider with a fixed type and a creation function; errors collected from parameters. */
  abstract static class Base implements PluginProvider {
    private final String type;

    Base(String type) {
      this.type = type;
    }

    @Override
    public final String type() {
      return type;
    }

    abstract Plugin build(PluginContext context, Parameters p);

    @Override
    public final Result<? extends Plugin> create(PluginContext context, Parameters p) {
      Plugin plugin;
      try {
        plugin = build(context, p);
      } catch (IllegalArgumentException e) {
        if (p.errors().isEmpty()) {
          return Result.error(e.getMessage());
        }
        return Result.errors(p.errors());
      }
      if (!p.errors().isEmpty()) {
        plugin.close();
        return Result.errors(p.errors());
      }
      return Result.ok(plugin);
    }
  }

  static int maxEndpoints(Parameters p) {
    return p.getInt("maxNumOfEndpoints", 1, 1, MAX_ENDPOINTS_LIMIT);
  }

  /** The first of several accepted names that is present, else the first name. */
  static String alias(Parameters p, String... names) {
    for (String n : names) {
      if (p.has(n)) {
        return n;
      }
    }
    return names[0];
  }

  // ------------------------------------------------------------------------------------ scorers

  /** Provides {@code prefix-cache-scorer}. */
  public static final class PrefixCacheScorerProvider extends Base {
    public PrefixCacheScorerProvider() {
      super("prefix-cache-scorer");
    }

    @Override
    Plugin build(PluginContext c, Parameters p) {
      int block = PrefixCacheScorer.DEFAULT_BLOCK_SIZE_TOKENS;
      if (p.has("hashBlockSize") && !p.has("blockSizeTokens") && !p.has("blockSize")) {
        // the first upstream version sized blocks in characters (4 per token)
        int chars = p.getInt("hashBlockSize", 64, 4, 4 << 20);
        block = Math.max(1, chars / 4);
      } else {
        block = p.getInt(alias(p, "blockSizeTokens", "blockSize"), block, 1, 1 << 20);
      }
      return PrefixCacheScorer.builder()
          .blockSizeTokens(block)
          .maxPrefixBlocksToMatch(p.getInt("maxPrefixBlocksToMatch",
              PrefixCacheScorer.DEFAULT_MAX_PREFIX_BLOCKS, 1, 1 << 22))
          .lruCapacityPerServer(p.getInt("lruCapacityPerServer",
              PrefixCacheScorer.DEFAULT_LRU_CAPACITY_PER_SERVER, 1, 1 << 28))
          .autoTune(p.getBoolean("autoTune", true))
          .build();
    }
  }

  /** Provides {@code queue-scorer}. */
  public static final class QueueScorerProvider extends Base {
    public QueueScorerProvider() {
      super("queue-scorer");
    }

    @Override
    Plugin build(PluginContext c, Parameters p) {
      return new LoadScorers.MinMaxCountScorer(false, Staleness.from(p));
    }
  }

  /** Provides {@code running-requests-size-scorer}. */
  public static final class RunningRequestsSizeScorerProvider extends Base {
    public RunningRequestsSizeScorerProvider() {
      super("running-requests-size-scorer");
    }

    @Override
    Plugin build(PluginContext c, Parameters p) {
      return new LoadScorers.MinMaxCountScorer(true, Staleness.from(p));
    }
  }

  /** Provides {@code kv-cache-utilization-scorer}. */
  public static final class KvCacheUtilizationScorerProvider extends Base {
    public KvCacheUtilizationScorerProvider() {
      super("kv-cache-utilization-scorer");
    }

    @Override
    Plugin build(PluginContext c, Parameters p) {
      return new LoadScorers.KvCacheUtilizationScorer(Staleness.from(p));
    }
  }

  /** Provides {@code load-aware-scorer}. */
  public static final class LoadAwareScorerProvider extends Base {
    public LoadAwareScorerProvider() {
      super("load-aware-scorer");
    }

    @Override
    Plugin build(PluginContext c, Parameters p) {
      int t = p.getInt(alias(p, "queueThreshold", "threshold"), 128, 1, Integer.MAX_VALUE);
      return new LoadScorers.LoadAwareScorer(t, Staleness.from(p));
    }
  }

  /** Provides {@code active-request-scorer}. */
  public static final class ActiveRequestScorerProvider extends Base {
    public ActiveRequestScorerProvider() {
      super("active-request-scorer");
    }

    @Override
    Plugin build(PluginContext c, Parameters p) {
      return new LoadScorers.ActiveRequestScorer(p.getInt("idleThreshold", 0, 0, Integer.MAX_VALUE));
    }
  }

  /** Provides {@code token-load-scorer}. */
  public static final class TokenLoadScorerProvider extends Base {
    public TokenLoadScorerProvider() {
      super("token-load-scorer");
    }

    @Override
    Plugin build(PluginContext c, Parameters p) {
      return new LoadScorers.TokenLoadScorer();
    }
  }

  /** Provides {@code lora-affinity-scorer}. */
  public static final class LoraAffinityScorerProvider extends Base {
    public LoraAffinityScorerProvider() {
      super("lora-affinity-scorer");
    }

    @Override
    Plugin build(PluginContext c, Parameters p) {
      return new LoadScorers.LoraAffinityScorer(Staleness.from(p));
    }
  }

  /** Provides {@code session-affinity-scorer}. */
  public static final class SessionAffinityScorerProvider extends Base {
    public SessionAffinityScorerProvider() {
      super("session-affinity-scorer");
    }

    @Override
    Plugin build(PluginContext c, Parameters p) {
      HashKeySource key = HashKeySource.parse(p, "sessionKeyFrom", "session");
      String header = p.getString("endpointHeader", "x-session-token");
      long ttl = p.getLong("ttlSeconds", 300);
      if (ttl < 1) {
        p.error("ttlSeconds", "must be >= 1, got " + ttl);
        ttl = 300;
      }
      long max = p.getLong("maxSessions", 100_000);
      if (max < 1) {
        p.error("maxSessions", "must be >= 1, got " + max);
        max = 100_000;
      }
      return new SessionAffinityScorer(key, header == null || header.isBlank() ? null
          : header.trim().toLowerCase(java.util.Locale.ROOT), Duration.ofSeconds(ttl), max,
          c.ticker());
    }
  }

  /** Provides {@code no-hit-lru-scorer}. */
  public static final class NoHitLruScorerProvider extends Base {
    public NoHitLruScorerProvider() {
      super("no-hit-lru-scorer");
    }

    @Override
    Plugin build(PluginContext c, Parameters p) {
      return new NoHitLruScorer();
    }
  }

  // ------------------------------------------------------------------------------------ filters

  /** Provides {@code label-selector-filter}. */
  public static final class LabelSelectorFilterProvider extends Base {
    private static final Set<String> OPERATORS = Set.of("In", "NotIn", "Exists", "DoesNotExist");

    public LabelSelectorFilterProvider() {
      super("label-selector-filter");
    }

    @Override
    Plugin build(PluginContext c, Parameters p) {
      Map<String, String> labels = new LinkedHashMap<>();
      Object ml = p.raw("matchLabels");
      if (ml instanceof Map<?, ?> m) {
        m.forEach((k, v) -> labels.put(String.valueOf(k), String.valueOf(v)));
      } else if (ml != null) {
        p.error("matchLabels", "must be a mapping of label to value");
      }
      List<Filters.Requirement> reqs = new ArrayList<>();
      Object me = p.raw("matchExpressions");
      if (me instanceof List<?> list) {
        for (int i = 0; i < list.size(); i++) {
          String where = "matchExpressions[" + i + "]";
          if (!(list.get(i) instanceof Map<?, ?> m)) {
            p.error(where, "must be a mapping with key, operator and values");
            continue;
          }
          Object key = m.get("key");
          Object op = m.get("operator");
          if (!(key instanceof String k) || k.isEmpty()) {
            p.error(where + ".key", "is required");
            continue;
          }
          if (!(op instanceof String o) || !OPERATORS.contains(o)) {
            p.error(where + ".operator", "must be one of In, NotIn, Exists, DoesNotExist, got '"
                + op + "'");
            continue;
          }
          Set<String> values = new LinkedHashSet<>();
          Object vs = m.get("values");
          if (vs instanceof List<?> vl) {
            vl.forEach(v -> values.add(String.valueOf(v)));
          } else if (vs != null) {
            p.error(where + ".values", "must be a list");
            continue;
          }
          boolean needsValues = o.equals("In") || o.equals("NotIn");
          if (needsValues && values.isEmpty()) {
            p.error(where + ".values", "must not be empty for operator " + o);
            continue;
          }
          if (!needsValues && !values.isEmpty()) {
            p.error(where + ".values", "must be empty for operator " + o);
            continue;
          }
          reqs.add(new Filters.Requirement(k, o, values));
        }
      } else if (me != null) {
        p.error("matchExpressions", "must be a list");
      }
      return new Filters.LabelSelectorFilter(labels, reqs);
    }
  }

  /** Provides {@code prefill-filter}. */
  public static final class PrefillFilterProvider extends Base {
    public PrefillFilterProvider() {
      super("prefill-filter");
    }

    @Override
    Plugin build(PluginContext c, Parameters p) {
      return new Filters.RoleFilter("prefill-filter", Set.of("prefill"), false);
    }
  }

  /** Provides {@code decode-filter}. */
  public static final class DecodeFilterProvider extends Base {
    public DecodeFilterProvider() {
      super("decode-filter");
    }

    @Override
    Plugin build(PluginContext c, Parameters p) {
      return new Filters.RoleFilter("decode-filter", Set.of("decode", "both"), true);
    }
  }

  static Plugin utilizationFilter(String type, Parameters p) {
    int q = p.getInt(alias(p, "queueThreshold", "threshold"), 128, 1, Integer.MAX_VALUE);
    double kv = p.getDouble("kvCacheThreshold", 0.95, 0.0, 1.0);
    return new Filters.UtilizationFilter(type, q, kv, Staleness.from(p));
  }

  /** Provides {@code utilization-filter}. */
  public static final class UtilizationFilterProvider extends Base {
    public UtilizationFilterProvider() {
      super("utilization-filter");
    }

    @Override
    Plugin build(PluginContext c, Parameters p) {
      return utilizationFilter(type(), p);
    }
  }

  /** Provides {@code low-queue-filter}. */
  public static final class LowQueueFilterProvider extends Base {
    public LowQueueFilterProvider() {
      super("low-queue-filter");
    }

    @Override
    Plugin build(PluginContext c, Parameters p) {
      return utilizationFilter(type(), p);
    }
  }

  // ------------------------------------------------------------------------------------ pickers

  private abstract static class SimplePickerProvider extends Base {
    private final Function<Integer, Plugin> factory;

    SimplePickerProvider(String type, Function<Integer, Plugin> factory) {
      super(type);
      this.factory = factory;
    }

    @Override
    Plugin build(PluginContext c, Parameters p) {
      return factory.apply(maxEndpoints(p));
    }
  }

  /** Provides {@code random-picker}. */
  public static final class RandomPickerProvider extends SimplePickerProvider {
    public RandomPickerProvider() {
      super("random-picker", SimplePickers.RandomPicker::new);
    }
  }

  /** Provides {@code weighted-random-picker}. */
  public static final class WeightedRandomPickerProvider extends SimplePickerProvider {
    public WeightedRandomPickerProvider() {
      super("weighted-random-picker", SimplePickers.WeightedRandomPicker::new);
    }
  }

  /** Provides {@code round-robin-picker}. */
  public static final class RoundRobinPickerProvider extends SimplePickerProvider {
    public RoundRobinPickerProvider() {
      super("round-robin-picker", SimplePickers.RoundRobinPicker::new);
    }
  }

  /** Provides {@code power-of-two-picker}. */
  public static final class PowerOfTwoPickerProvider extends SimplePickerProvider {
    public PowerOfTwoPickerProvider() {
      super("power-of-two-picker", SimplePickers.PowerOfTwoPicker::new);
    }
  }

  /** {@code balanceFactor} (multiplier, 0 = off) or Envoy's {@code hashBalanceFactor} (percent). */
  static double balanceFactor(Parameters p) {
    if (p.has("hashBalanceFactor") && !p.has("balanceFactor")) {
      int pct = p.getInt("hashBalanceFactor", 0, 0, 100_000);
      if (pct != 0 && pct < 100) {
        p.error("hashBalanceFactor", "must be 0 (off) or >= 100 (percent of the mean), got " + pct);
        return 0;
      }
      return pct / 100.0;
    }
    double f = p.getDouble("balanceFactor", 0.0);
    if (f != 0 && !(f >= 1.0 && f <= 1000.0)) {
      p.error("balanceFactor", "must be 0 (off) or in [1, 1000], got " + f);
      return 0;
    }
    return f;
  }

  /** Provides {@code ring-hash-picker}. */
  public static final class RingHashPickerProvider extends Base {
    public RingHashPickerProvider() {
      super("ring-hash-picker");
    }

    @Override
    Plugin build(PluginContext c, Parameters p) {
      HashKeySource key = HashKeySource.parse(p, "hashOn", "session");
      int min = p.getInt("minimumRingSize", RingHashPicker.DEFAULT_MINIMUM_RING_SIZE, 1,
          RingHashPicker.DEFAULT_MAXIMUM_RING_SIZE);
      int max = p.getInt("maximumRingSize", RingHashPicker.DEFAULT_MAXIMUM_RING_SIZE, 1,
          RingHashPicker.DEFAULT_MAXIMUM_RING_SIZE);
      if (min > max) {
        p.error("minimumRingSize", "must not exceed maximumRingSize (" + max + "), got " + min);
        min = Math.min(RingHashPicker.DEFAULT_MINIMUM_RING_SIZE, max);
      }
      double bf = balanceFactor(p);
      return new RingHashPicker(key, min, max, bf, maxEndpoints(p));
    }
  }

  /** Provides {@code maglev-picker}. */
  public static final class MaglevPickerProvider extends Base {
    public MaglevPickerProvider() {
      super("maglev-picker");
    }

    @Override
    Plugin build(PluginContext c, Parameters p) {
      HashKeySource key = HashKeySource.parse(p, "hashOn", "session");
      int size = p.getInt("tableSize", MaglevPicker.DEFAULT_TABLE_SIZE, 2, MaglevPicker.MAX_TABLE_SIZE);
      if (!MaglevPicker.isPrime(size)) {
        p.error("tableSize", "must be a prime number, got " + size);
        size = MaglevPicker.DEFAULT_TABLE_SIZE;
      }
      double bf = balanceFactor(p);
      return new MaglevPicker(key, size, bf, maxEndpoints(p));
    }
  }

  // --------------------------------------------------------------------------- profile handlers

  /** Provides {@code pd-profile-handler}. */
  public static final class PdProfileHandlerProvider extends Base {
    public PdProfileHandlerProvider() {
      super("pd-profile-handler");
    }

    @Override
    Plugin build(PluginContext c, Parameters p) {
      return new PdProfileHandler(
          p.getInt(alias(p, "nonCachedTokens", "threshold"), 0, 0, Integer.MAX_VALUE));
    }
  }
}
