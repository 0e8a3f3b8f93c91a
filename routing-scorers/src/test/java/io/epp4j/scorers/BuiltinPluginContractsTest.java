package io.epp4j.scorers;

import io.epp4j.api.Filter;
import io.epp4j.api.Parameters;
import io.epp4j.api.Picker;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginProvider;
import io.epp4j.api.Result;
import io.epp4j.api.Scorer;
import io.epp4j.core.CorePluginProviders;
import io.epp4j.testkit.ContractFixtures;
import io.epp4j.testkit.FilterContract;
import io.epp4j.testkit.PickerContract;
import io.epp4j.testkit.ScorerContract;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Nested;

/**
 * Every built-in filter, scorer and picker against the routing-testkit contracts, created through
 * its provider as a config would create it.
 */
class BuiltinPluginContractsTest {

  static final Map<String, ?> SELECTOR = Map.of(
      "matchLabels", Map.of("zone", "a"),
      "matchExpressions", List.of(Map.of("key", "llm-d.ai/role", "operator", "In",
          "values", List.of("prefill", "decode"))));

  /** GIE 0.5's tree in small: low queue, then the least queue, else the least KV usage. */
  static final Map<String, ?> TREE = Map.of(
      "current", Map.of("pluginRef", "low-queue-filter"),
      "nextOnSuccess", Map.of("decisionTree",
          Map.of("current", Map.of("pluginRef", "least-queue-filter"))),
      "nextOnFailure", Map.of("pluginRef", "least-kv-cache-filter"));

  /** A context where the filters {@link #TREE} names are defined. */
  static io.epp4j.api.PluginContext treeContext() {
    return ContractFixtures.context("decision-tree-filter", Map.of(
        "low-queue-filter", new LowQueueFilter(2),
        "least-queue-filter", new LeastQueueFilter(),
        "least-kv-cache-filter", new LeastKvCacheFilter()));
  }

  static <T extends Plugin> T create(PluginProvider provider, Map<String, ?> params,
      Class<T> role) {
    Result<? extends Plugin> r = provider.create(ContractFixtures.context(provider.type()),
        Parameters.of(params));
    return role.cast(r.value());
  }

  @Nested
  class PrefixCacheScorerContract extends ScorerContract<Scorer> {
    @Override
    protected Scorer createPlugin() {
      return create(new PrefixCacheScorer.Provider(), Map.of(), Scorer.class);
    }
  }

  @Nested
  class QueueScorerContract extends ScorerContract<Scorer> {
    @Override
    protected Scorer createPlugin() {
      return create(new QueueScorer.Provider(), Map.of(), Scorer.class);
    }
  }

  @Nested
  class RunningRequestsSizeScorerContract extends ScorerContract<Scorer> {
    @Override
    protected Scorer createPlugin() {
      return create(new RunningRequestsSizeScorer.Provider(), Map.of(), Scorer.class);
    }
  }

  @Nested
  class KvCacheUtilizationScorerContract extends ScorerContract<Scorer> {
    @Override
    protected Scorer createPlugin() {
      return create(new KvCacheUtilizationScorer.Provider(), Map.of(), Scorer.class);
    }
  }

  @Nested
  class LoadAwareScorerContract extends ScorerContract<Scorer> {
    @Override
    protected Scorer createPlugin() {
      return create(new LoadAwareScorer.Provider(), Map.of(), Scorer.class);
    }
  }

  @Nested
  class ActiveRequestScorerContract extends ScorerContract<Scorer> {
    @Override
    protected Scorer createPlugin() {
      return create(new ActiveRequestScorer.Provider(), Map.of(), Scorer.class);
    }
  }

  @Nested
  class TokenLoadScorerContract extends ScorerContract<Scorer> {
    @Override
    protected Scorer createPlugin() {
      return create(new TokenLoadScorer.Provider(), Map.of(), Scorer.class);
    }
  }

  @Nested
  class LoraAffinityScorerContract extends ScorerContract<Scorer> {
    @Override
    protected Scorer createPlugin() {
      return create(new LoraAffinityScorer.Provider(), Map.of(), Scorer.class);
    }
  }

  @Nested
  class SessionAffinityScorerContract extends ScorerContract<Scorer> {
    @Override
    protected Scorer createPlugin() {
      return create(new SessionAffinityScorer.Provider(), Map.of(), Scorer.class);
    }
  }

  @Nested
  class SessionAffinityFilterContract extends FilterContract<Filter> {
    @Override
    protected Filter createPlugin() {
      return create(new SessionAffinityFilter.Provider(), Map.of(), Filter.class);
    }
  }

  @Nested
  class ConcurrencyDetectorContract extends FilterContract<Filter> {
    @Override
    protected Filter createPlugin() {
      return create(new ConcurrencyDetector.Provider(), Map.of(), Filter.class);
    }
  }

  @Nested
  class NoHitLruScorerContract extends ScorerContract<Scorer> {
    @Override
    protected Scorer createPlugin() {
      return create(new NoHitLruScorer.Provider(), Map.of(), Scorer.class);
    }
  }

  @Nested
  class HeaderLabelAffinityScorerContract extends ScorerContract<Scorer> {
    @Override
    protected Scorer createPlugin() {
      // the fixtures' requests carry this header, their endpoints this label
      return create(new HeaderLabelAffinityScorer.Provider(),
          Map.of("headerName", "x-session-token", "labelKey", "zone"), Scorer.class);
    }
  }

  @Nested
  class EndpointAttributeScorerContract extends ScorerContract<Scorer> {
    @Override
    protected Scorer createPlugin() {
      return Scorer.class.cast(new EndpointAttributeScorer.Provider().create(
          EndpointAttributePluginsTest.context("endpoint-attribute-scorer"),
          Parameters.of(Map.of("attributeKey", "queue",
              "algorithm", Map.of("type", "linear_lower_is_better")))).value());
    }
  }

  @Nested
  class EndpointAttributeFilterContract extends FilterContract<Filter> {
    @Override
    protected Filter createPlugin() {
      return Filter.class.cast(new EndpointAttributeFilter.Provider().create(
          EndpointAttributePluginsTest.context("endpoint-attribute-filter"),
          Parameters.of(Map.of("attribute", "kv", "onMissing", "Fail", "algorithm",
              Map.of("type", "threshold",
                  "threshold", Map.of("operator", "LessThan", "value", 0.5))))).value());
    }
  }

  @Nested
  class LabelSelectorFilterContract extends FilterContract<Filter> {
    @Override
    protected Filter createPlugin() {
      return create(new LabelSelectorFilter.Provider(), SELECTOR, Filter.class);
    }
  }

  @Nested
  class PrefillFilterContract extends FilterContract<Filter> {
    @Override
    protected Filter createPlugin() {
      return create(new PrefillFilter.Provider(), Map.of(), Filter.class);
    }
  }

  @Nested
  class DecodeFilterContract extends FilterContract<Filter> {
    @Override
    protected Filter createPlugin() {
      return create(new DecodeFilter.Provider(), Map.of(), Filter.class);
    }
  }

  @Nested
  class UtilizationFilterContract extends FilterContract<Filter> {
    @Override
    protected Filter createPlugin() {
      return create(new UtilizationFilter.Provider(), Map.of(), Filter.class);
    }
  }

  @Nested
  class LowQueueFilterContract extends FilterContract<Filter> {
    @Override
    protected Filter createPlugin() {
      return create(new LowQueueFilter.Provider(), Map.of("threshold", 2), Filter.class);
    }
  }

  @Nested
  class LeastQueueFilterContract extends FilterContract<Filter> {
    @Override
    protected Filter createPlugin() {
      return create(new LeastQueueFilter.Provider(), Map.of(), Filter.class);
    }
  }

  @Nested
  class LeastKvCacheFilterContract extends FilterContract<Filter> {
    @Override
    protected Filter createPlugin() {
      return create(new LeastKvCacheFilter.Provider(), Map.of(), Filter.class);
    }
  }

  @Nested
  class LoraAffinityFilterContract extends FilterContract<Filter> {
    @Override
    protected Filter createPlugin() {
      return create(new LoraAffinityFilter.Provider(), Map.of(), Filter.class);
    }
  }

  @Nested
  class DecisionTreeFilterContract extends FilterContract<Filter> {
    @Override
    protected Filter createPlugin() {
      Result<? extends Plugin> r = new DecisionTreeFilter.Provider().create(treeContext(),
          Parameters.of(TREE));
      return Filter.class.cast(r.value());
    }
  }

  @Nested
  class UtilizationDetectorContract extends FilterContract<Filter> {
    @Override
    protected Filter createPlugin() {
      return create(BuiltinProviderContractsTest.byType("utilization-detector"),
          Map.of("headroom", 0.2), Filter.class);
    }
  }

  @Nested
  class RandomPickerContract extends PickerContract<Picker> {
    @Override
    protected Picker createPlugin() {
      return create(new RandomPicker.Provider(), Map.of(), Picker.class);
    }
  }

  @Nested
  class WeightedRandomPickerContract extends PickerContract<Picker> {
    @Override
    protected Picker createPlugin() {
      return create(new WeightedRandomPicker.Provider(), Map.of(), Picker.class);
    }
  }

  @Nested
  class RoundRobinPickerContract extends PickerContract<Picker> {
    @Override
    protected Picker createPlugin() {
      return create(new RoundRobinPicker.Provider(), Map.of(), Picker.class);
    }

    @Override
    protected boolean deterministic() {
      return false;
    }
  }

  @Nested
  class TokenCostPickerContract extends PickerContract<Picker> {
    @Override
    protected Picker createPlugin() {
      return create(new TokenCostPicker.Provider(), Map.of(), Picker.class);
    }
  }

  @Nested
  class PowerOfTwoPickerContract extends PickerContract<Picker> {
    @Override
    protected Picker createPlugin() {
      return create(new PowerOfTwoPicker.Provider(), Map.of(), Picker.class);
    }
  }

  @Nested
  class RingHashPickerContract extends PickerContract<Picker> {
    @Override
    protected Picker createPlugin() {
      return create(new RingHashPicker.Provider(), Map.of("maxNumOfEndpoints", 2), Picker.class);
    }
  }

  @Nested
  class MaglevPickerContract extends PickerContract<Picker> {
    @Override
    protected Picker createPlugin() {
      return create(new MaglevPicker.Provider(), Map.of("maxNumOfEndpoints", 2, "tableSize", 257), Picker.class);
    }
  }

  /** {@code max-score-picker} lives in routing-core; the router's default picker. */
  @Nested
  class MaxScorePickerContract extends PickerContract<Picker> {
    @Override
    protected Picker createPlugin() {
      return create(new CorePluginProviders.MaxScorePickerProvider(),
          Map.of("maxNumOfEndpoints", 2), Picker.class);
    }
  }
}
