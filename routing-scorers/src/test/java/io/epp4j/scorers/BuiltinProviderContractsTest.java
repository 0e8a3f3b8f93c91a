package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginProvider;
import io.epp4j.api.Result;
import io.epp4j.testkit.ContractFixtures;
import io.epp4j.core.CorePluginProviders;
import io.epp4j.testkit.ProviderContract;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Nested;
import org.junit.jupiter.api.Test;

/** Every built-in provider (and routing-core's two) against the routing-testkit provider contract. */
class BuiltinProviderContractsTest {

  @Nested
  class PrefixCacheScorerProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new PrefixCacheScorer.Provider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("blockSizeTokens", 16, "autoTune", false);
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("blockSizeTokens", Map.of("blockSizeTokens", 0), "lruCapacityPerServer", Map.of("lruCapacityPerServer", 0));
    }
  }

  @Nested
  class ApproxPrefixCacheProducerProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new PrefixCacheScorer.ApproxProducerProvider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("blockSizeTokens", 64, "maxPrefixTokensToMatch", 16384, "autoTune", false);
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("blockSizeTokens", Map.of("blockSizeTokens", -1),
          "lruCapacityPerServer", Map.of("lruCapacityPerServer", 0));
    }
  }

  @Nested
  class InFlightLoadProducerProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new InFlightLoadProducer.Provider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("addEstimatedOutputTokens", true, "outputRatio", 0.5,
          "maxEstimatedOutputTokens", 256);
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("outputRatio", Map.of("outputRatio", -1.0),
          "maxEstimatedOutputTokens", Map.of("maxEstimatedOutputTokens", -1));
    }
  }

  @Nested
  class PrefixCacheAffinityFilterProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new PrefixCacheAffinityFilter.Provider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("affinityThreshold", 0.9, "explorationProbability", 0.01,
          "maxTTFTPenaltyMs", 5000, "peakPrefillThroughput", 20000);
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("affinityThreshold", Map.of("affinityThreshold", 1.5),
          "explorationProbability", Map.of("explorationProbability", 2.0),
          "maxTTFTPenaltyMs", Map.of("maxTTFTPenaltyMs", -1),
          "ttftSource", Map.of("ttftSource", "latencyPredictor"),
          "peakPrefillThroughput", Map.of("peakPrefillThroughput", 0));
    }
  }

  @Nested
  class ContextLengthAwareProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new ContextLengthAware.Provider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("label", "llm-d.ai/context-length-range", "enableFiltering", true);
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("label", Map.of("label", ""));
    }
  }

  @Nested
  class TopologyAffinityFilterProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new Topology.FilterProvider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("minAffinity", "zone");
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("minAffinity", Map.of("minAffinity", "planet"));
    }
  }

  @Nested
  class TopologyExtractorProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new Topology.ExtractorProvider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("hostname", "node", "zone", "z");
    }
  }

  @Nested
  class TopologyAffinityScorerProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new Topology.ScorerProvider();
    }
  }

  @Nested
  class QueueScorerProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new QueueScorer.Provider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("metricsStalenessMillis", 1000);
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("metricsStalenessMillis", Map.of("metricsStalenessMillis", -1));
    }
  }

  @Nested
  class RunningRequestsSizeScorerProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new RunningRequestsSizeScorer.Provider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("metricsStalenessMillis", 1000);
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("metricsStalenessMillis", Map.of("metricsStalenessMillis", -1));
    }
  }

  @Nested
  class KvCacheUtilizationScorerProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new KvCacheUtilizationScorer.Provider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("metricsStalenessMillis", 1000);
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("metricsStalenessMillis", Map.of("metricsStalenessMillis", -1));
    }
  }

  @Nested
  class LoadAwareScorerProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new LoadAwareScorer.Provider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("queueThreshold", 64);
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("queueThreshold", Map.of("queueThreshold", "deep"),
          "threshold", Map.of("threshold", 1.5));
    }
  }

  @Nested
  class ActiveRequestScorerProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new ActiveRequestScorer.Provider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("idleThreshold", 2, "maxBusyScore", 0.5);
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("idleThreshold", Map.of("idleThreshold", "none"),
          "maxBusyScore", Map.of("maxBusyScore", "high"));
    }
  }

  @Nested
  class TokenLoadScorerProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new TokenLoadScorer.Provider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of();
    }
  }

  @Nested
  class LoraAffinityScorerProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new LoraAffinityScorer.Provider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("metricsStalenessMillis", 0);
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("metricsStalenessMillis", Map.of("metricsStalenessMillis", -5));
    }
  }

  @Nested
  class SessionAffinityScorerProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new SessionAffinityScorer.Provider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("ttlSeconds", 60, "maxSessions", 10);
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("ttlSeconds", Map.of("ttlSeconds", 0), "maxSessions", Map.of("maxSessions", 0));
    }
  }

  @Nested
  class SessionAffinityScorerUpstreamProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new SessionAffinityScorer.Provider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("strategy", "session_id", "profileName", "prefill", "sessionIdConfig",
          Map.of("sources", List.of(Map.of("header", "x-session-id"),
              Map.of("attribute", "agent-identity")), "evictionTtlSeconds", 60));
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("strategy", Map.of("strategy", "cookie"),
          "sessionIdConfig", Map.of("strategy", "session_id", "sessionIdConfig",
              Map.of("sources", List.of(Map.of()))),
          "sessionKeyFrom", Map.of("strategy", "session_id", "sessionKeyFrom", "session"));
    }
  }

  @Nested
  class SessionAffinityFilterProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new SessionAffinityFilter.Provider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("strategy", "encoded_endpoint_header", "encodedEndpointHeaderConfig",
          Map.of("header", "x-session-token"));
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("strategy", Map.of("strategy", "sticky"),
          "encodedEndpointHeaderConfig", Map.of("encodedEndpointHeaderConfig",
              Map.of("headers", "x")));
    }
  }

  @Nested
  class SessionIdProducerProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new SessionIdProducer.Provider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("cookieName", "llm-d-session");
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("headerName", Map.of(), "cookieName", Map.of("headerName", "a",
          "cookieName", "b"));
    }
  }

  @Nested
  class P2pSourceProducerProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new P2pSourceProducer.Provider();
    }

    @Override
    protected io.epp4j.api.PluginContext context() {
      Plugin producer = new PrefixCacheScorer.ApproxProducerProvider().create(
          io.epp4j.testkit.ContractFixtures.context("approx-prefix-cache-producer"),
          io.epp4j.api.Parameters.empty()).value();
      return io.epp4j.testkit.ContractFixtures.context("p2p-source-producer",
          Map.of("approx-prefix-cache-producer", producer));
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("minCachedTokenDelta", 64, "prefillProfileName", "prefill");
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("minCachedTokenDelta", Map.of("minCachedTokenDelta", 0),
          "prefixMatchInfoProducerName", Map.of("prefixMatchInfoProducerName", "nowhere"));
    }
  }

  @Nested
  class ConcurrencyDetectorProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new ConcurrencyDetector.Provider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("concurrencyMode", "hybrid", "maxConcurrency", 64,
          "maxTokenConcurrency", 500_000, "headroom", 0.2);
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("maxConcurrency", Map.of("maxConcurrency", 0),
          "maxTokenConcurrency", Map.of("maxTokenConcurrency", -5),
          "headroom", Map.of("headroom", -1.0),
          "concurrencyMode", Map.of("concurrencyMode", "bytes"));
    }
  }

  @Nested
  class AgentIdentityProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new AgentIdentity.Provider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("additionalSessionHeaders", List.of("x-my-agent-session"));
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("additionalSessionHeaders", Map.of("additionalSessionHeaders",
          Map.of("a", "b")));
    }
  }

  @Nested
  class NoHitLruScorerProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new NoHitLruScorer.Provider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of();
    }
  }

  @Nested
  class HeaderLabelAffinityScorerProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new HeaderLabelAffinityScorer.Provider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("headerName", "x-disagg-slice", "labelKey", "disaggregatedset.x-k8s.io/slice");
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("headerName", Map.of("labelKey", "zone"),
          "labelKey", Map.of("headerName", "x-zone", "labelKey", ""));
    }
  }

  @Nested
  class EndpointAttributeFilterProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new EndpointAttributeFilter.Provider();
    }

    @Override
    protected io.epp4j.api.PluginContext context() {
      return EndpointAttributePluginsTest.context(provider().type());
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("attribute", "queue", "onMissing", "Pass", "fallbackOnEmpty", true,
          "algorithm", Map.of("type", "threshold",
              "threshold", Map.of("operator", "LessThan", "value", 10)));
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      Map<String, ?> algorithm = Map.of("type", "threshold",
          "threshold", Map.of("operator", "LessThan", "value", 10));
      return Map.of("attribute", Map.of("attribute", "nowhere", "algorithm", algorithm),
          "producer", Map.of("attribute", "queue", "producer", "dcgm-extractor",
              "algorithm", algorithm),
          "onMissing", Map.of("attribute", "queue", "onMissing", "Drop", "algorithm", algorithm),
          "algorithm", Map.of("attribute", "queue", "algorithm", Map.of("type", "topK")));
    }
  }

  @Nested
  class EndpointAttributeScorerProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new EndpointAttributeScorer.Provider();
    }

    @Override
    protected io.epp4j.api.PluginContext context() {
      return EndpointAttributePluginsTest.context(provider().type());
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("attributeKey", "kv", "algorithm", Map.of("type", "linear_lower_is_better",
          "normalization", Map.of("fixedRange", Map.of("min", 0, "max", 1))));
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("attributeKey", Map.of("algorithm", Map.of("type", "linear_lower_is_better")),
          "algorithm", Map.of("attributeKey", "kv", "algorithm", Map.of("type", "log")));
    }
  }

  @Nested
  class LabelSelectorFilterProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new LabelSelectorFilter.Provider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return BuiltinPluginContractsTest.SELECTOR;
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("matchLabels", Map.of("matchLabels", "zone=a"), "matchExpressions[0].operator", Map.of("matchExpressions", List.of(Map.of("key", "k", "operator", "Is"))));
    }
  }

  @Nested
  class PrefillFilterProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new PrefillFilter.Provider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of();
    }
  }

  @Nested
  class DecodeFilterProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new DecodeFilter.Provider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of();
    }
  }

  @Nested
  class UtilizationFilterProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new UtilizationFilter.Provider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("queueThreshold", 10, "kvCacheThreshold", 0.9);
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("kvCacheThreshold", Map.of("kvCacheThreshold", 2.0), "queueThreshold", Map.of("queueThreshold", 0));
    }
  }

  @Nested
  class LowQueueFilterProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new LowQueueFilter.Provider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("threshold", 10);
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("threshold", Map.of("threshold", -1),
          "kvCacheThreshold", Map.of("kvCacheThreshold", 0.9));
    }
  }

  @Nested
  class LeastQueueFilterProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new LeastQueueFilter.Provider();
    }
  }

  @Nested
  class LeastKvCacheFilterProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new LeastKvCacheFilter.Provider();
    }
  }

  @Nested
  class LoraAffinityFilterProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new LoraAffinityFilter.Provider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("threshold", 0.5);
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("threshold", Map.of("threshold", 1.5));
    }
  }

  @Nested
  class DecisionTreeFilterProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new DecisionTreeFilter.Provider();
    }

    @Override
    protected io.epp4j.api.PluginContext context() {
      return BuiltinPluginContractsTest.treeContext();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return BuiltinPluginContractsTest.TREE;
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("current", Map.of("nextOnSuccess", Map.of("pluginRef", "low-queue-filter")),
          "current.pluginRef", Map.of("current", Map.of("pluginRef", "no-such-filter")));
    }
  }

  @Nested
  class PrefixBasedPdDeciderProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new PrefixBasedPdDecider.Provider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("nonCachedTokens", 16);
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("nonCachedTokens", Map.of("nonCachedTokens", -1));
    }
  }

  @Nested
  class AlwaysDisaggPdDeciderProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new AlwaysDisaggPdDecider.Provider();
    }
  }

  /** The errors of a file holding one plugin {@code pp} of {@code type}; empty when it loads. */
  static List<String> loadErrors(String type, String parameters) {
    String yaml = """
        plugins:
        - name: pp
          type: %s
          parameters: %s
        - type: random-picker
        """.formatted(type, parameters);
    try (io.epp4j.core.Router r = io.epp4j.core.Router.builder()
        .endpoints(List.of(io.epp4j.api.Endpoint.parse("10.0.0.1:8000")))
        .configYaml(yaml, "f.yaml").build()) {
      return List.of();
    } catch (io.epp4j.core.ConfigException e) {
      return e.errors();
    }
  }

  /**
   * A maxAge that is none of its forms was two errors, the second about the zero put in its
   * place ("must be a duration ..., got 'abc'" and "must be > 0 ..., got abc"); it is one, naming
   * the plugin, the parameter and the forms it takes.
   */
  @Test
  void aBadMaxAgeOfTheSessionScorerIsOneErrorNamingItsForms() {
    for (String type : List.of("session-affinity-scorer", "session-affinity-filter")) {
      for (String bad : List.of("abc", "1.5", "-5", "0", "'-30s'", "'0s'", "[30]", "{s: 1}", "''")) {
        assertThat(loadErrors(type, "{maxAge: " + bad + "}")).as("%s maxAge %s", type, bad)
            .singleElement().satisfies(e -> assertThat(e)
                .startsWith("f.yaml: plugins[0] (name 'pp', type '" + type + "'): parameter"
                    + " 'maxAge' must be a whole number of seconds above 0 or a duration above 0"
                    + " such as '90s', '30m' or '1h30m', got "));
      }
      for (String ok : List.of("30", "'30'", "90s", "30m", "1h30m")) {
        assertThat(loadErrors(type, "{maxAge: " + ok + "}")).as("%s maxAge %s", type, ok)
            .isEmpty();
      }
    }
  }

  /**
   * A value of the wrong type was refused and then reported again through the default put in its
   * place: a producer's name given as a list also "named no plugin ''", a headerName or an
   * output cap as a list or text was also "required" or "must be >= 0, got -1". Each is one error
   * now, naming the plugin and the parameter; a number beyond a double's range is refused rather
   * than read as Infinity.
   */
  @Test
  void aValueOfTheWrongTypeIsOneErrorThroughTheLoader() {
    String[][] cases = {
        {"active-request-scorer", "{inFlightLoadProducerName: [1]}", "inFlightLoadProducerName"},
        {"token-load-scorer", "{inFlightLoadProducerName: {a: 1}}", "inFlightLoadProducerName"},
        {"concurrency-detector", "{inFlightLoadProducerName: [1]}", "inFlightLoadProducerName"},
        {"prefix-cache-scorer", "{prefixMatchInfoProducerName: [1]}",
            "prefixMatchInfoProducerName"},
        {"p2p-source-producer", "{prefixMatchInfoProducerName: {a: 1}}",
            "prefixMatchInfoProducerName"},
        {"session-id-producer", "{headerName: [x]}", "headerName"},
        {"session-id-producer", "{cookieName: {a: 1}}", "cookieName"},
        {"inflight-load-producer", "{maxEstimatedOutputTokens: abc}", "maxEstimatedOutputTokens"},
        {"inflight-load-producer", "{maxEstimatedOutputTokens: 1.5}", "maxEstimatedOutputTokens"},
        {"inflight-load-producer", "{maxEstimatedOutputTokens: ''}", "maxEstimatedOutputTokens"},
        {"disagg-profile-handler", "{encodeDeciderPluginName: [1]}", "encodeDeciderPluginName"},
        {"active-request-scorer", "{maxBusyScore: 1e400}", "maxBusyScore"},
        {"token-cost-picker", "{queueWeight: '1e400'}", "queueWeight"},
    };
    for (String[] c : cases) {
      assertThat(loadErrors(c[0], c[1])).as("%s %s", c[0], c[1]).singleElement()
          .satisfies(e -> assertThat(e).startsWith("f.yaml: plugins[0] (name 'pp', type '" + c[0]
              + "'): parameter '" + c[2] + "' must be "));
    }
  }

  /**
   * disagg-profile-handler takes its prefill decider as prefillDeciderPluginName or, as
   * upstream's earlier name, deciderPluginName. A file giving deciderPluginName a name no plugin
   * has was told about 'prefillDeciderPluginName', a parameter it does not hold; the error now
   * names the parameter as the file gives it.
   */
  @Test
  void aDisaggDeciderNamingNoPluginIsReportedUnderTheNameTheFileUses() {
    for (String given : List.of("deciderPluginName", "prefillDeciderPluginName")) {
      assertThat(loadErrors("disagg-profile-handler", "{" + given + ": nowhere}")).as(given)
          .anySatisfy(e -> assertThat(e).startsWith("f.yaml: plugins[0] (name 'pp', type"
              + " 'disagg-profile-handler'): parameter '" + given + "' names no plugin"));
    }
  }

  @Test
  void disaggProfileHandlerReportsAWrongTypeInsideItsNestedParameters() {
    PluginProvider provider = new DisaggProfileHandler.Provider();
    // before, the nested Parameters kept these errors to itself and the handler was built
    Result<? extends Plugin> profiles = provider.create(ContractFixtures.context(provider.type()),
        Parameters.of(Map.of("profiles", Map.of("decode", List.of("a", "b")))));
    assertThat(profiles.errors()).containsExactly(
        "parameter 'profiles' field 'decode' must be a string, got a list");
    Result<? extends Plugin> deciders = provider.create(ContractFixtures.context(provider.type()),
        Parameters.of(Map.of("deciders", Map.of("prefill", Map.of("name", "x")))));
    assertThat(deciders.errors()).anySatisfy(e -> assertThat(e)
        .startsWith("parameter 'deciders' field 'prefill' must be a string"));
  }

  @Nested
  class DisaggProfileHandlerProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new DisaggProfileHandler.Provider();
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("deciders", Map.of("deciders", Map.of("prefill", "missing-decider")),
          "profiles", Map.of("profiles", Map.of("prefill", "my-prefill")));
    }
  }

  @Nested
  class HeaderProfileHandlerProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new HeaderProfileHandler.Provider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("headerName", "EPP-Profile", "defaultProfile", "decode");
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("headerName", Map.of("headerName", "EPP Profile"));
    }
  }

  @Nested
  class DataParallelProfileHandlerProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new DataParallelProfileHandler.Provider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("primaryPort", 8000);
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("primaryPort", Map.of("primaryPort", 70000));
    }
  }

  @Nested
  class PrefillHeaderHandlerProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new PrefillHeaderHandler.Provider();
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("prefillProfile", Map.of("prefillProfile", "pf"));
    }
  }

  @Nested
  class ProbabilisticAdmitterProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new ProbabilisticAdmitter.Provider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("queueDepthThreshold", 10, "kvCacheUtilThreshold", 0.9, "power", 3, "k", 100);
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("queueDepthThreshold", Map.of("queueDepthThreshold", 0),
          "kvCacheUtilThreshold", Map.of("kvCacheUtilThreshold", 0.0),
          "power", Map.of("power", -1), "k", Map.of("k", 0));
    }
  }

  @Nested
  class RandomPickerProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new RandomPicker.Provider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("maxNumOfEndpoints", 2);
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("maxNumOfEndpoints", Map.of("maxNumOfEndpoints", "many"));
    }
  }

  @Nested
  class WeightedRandomPickerProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new WeightedRandomPicker.Provider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("maxNumOfEndpoints", 2);
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("maxNumOfEndpoints", Map.of("maxNumOfEndpoints", "many"));
    }
  }

  @Nested
  class RoundRobinPickerProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new RoundRobinPicker.Provider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("maxNumOfEndpoints", 2);
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("maxNumOfEndpoints", Map.of("maxNumOfEndpoints", "many"));
    }
  }

  @Nested
  class TokenCostPickerProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new TokenCostPicker.Provider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("queueWeight", 0.5, "decodeWeight", 0.1, "capacityWeight", 1.0,
          "balanceFactor", 1.5);
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("queueWeight", Map.of("queueWeight", -1.0),
          "balanceFactor", Map.of("balanceFactor", 0.5));
    }
  }

  @Nested
  class PowerOfTwoPickerProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new PowerOfTwoPicker.Provider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("maxNumOfEndpoints", 2);
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("maxNumOfEndpoints", Map.of("maxNumOfEndpoints", "many"));
    }
  }

  @Nested
  class RingHashPickerProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new RingHashPicker.Provider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("minimumRingSize", 64, "maximumRingSize", 1024, "balanceFactor", 1.5);
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("minimumRingSize", Map.of("minimumRingSize", 100, "maximumRingSize", 50), "balanceFactor", Map.of("balanceFactor", 0.5), "hashBalanceFactor", Map.of("hashBalanceFactor", 50));
    }
  }

  @Nested
  class MaglevPickerProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new MaglevPicker.Provider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("tableSize", 257);
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("tableSize", Map.of("tableSize", 100));
    }
  }

  @Nested
  class PdProfileHandlerProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new PdProfileHandler.Provider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("nonCachedTokens", 256);
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("nonCachedTokens", Map.of("nonCachedTokens", -1));
    }
  }

  @Nested
  class MaxScorePickerProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new CorePluginProviders.MaxScorePickerProvider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("maxNumOfEndpoints", 3);
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("maxNumOfEndpoints", Map.of("maxNumOfEndpoints", "many"));
    }
  }

  @Nested
  class SingleProfileHandlerProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new CorePluginProviders.SingleProfileHandlerProvider();
    }
  }

  /** A provider found by ServiceLoader, for core types whose classes are package-private. */
  static PluginProvider byType(String type) {
    for (PluginProvider p : java.util.ServiceLoader.load(PluginProvider.class)) {
      if (p.type().equals(type)) {
        return p;
      }
    }
    throw new AssertionError("no provider of " + type);
  }

  @Nested
  class UtilizationDetectorProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return byType("utilization-detector");
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("queueDepthThreshold", 8, "kvCacheUtilThreshold", 0.9,
          "metricsStalenessThreshold", "250ms", "headroom", 0.1);
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("queueDepthThreshold", Map.of("queueDepthThreshold", 0),
          "kvCacheUtilThreshold", Map.of("kvCacheUtilThreshold", 1.5),
          "metricsStalenessThreshold", Map.of("metricsStalenessThreshold", 200));
    }
  }

  @Nested
  class OpenAiParserProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return byType("openai-parser");
    }
  }

  @Nested
  class MetricsDataSourceProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return byType("metrics-data-source");
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("scheme", "https", "path", "/custom/metrics");
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("path", Map.of("path", "metrics"),
          "insecureSkipVerify", Map.of("scheme", "https", "insecureSkipVerify", "maybe"));
    }
  }

  @Nested
  class EndpointNotificationSourceProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return byType("endpoint-notification-source");
    }
  }

  @Nested
  class CoreMetricsExtractorProviderContract extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return byType("core-metrics-extractor");
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("defaultEngine", "sglang");
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("defaultEngine", Map.of("defaultEngine", "trtllm"),
          "kvUsageSpec", Map.of("kvUsageSpec", "my_kv_usage"),
          "engineConfigs", Map.of("engineConfigs", List.of(Map.of("name", "trtllm-serve"))));
    }
  }
}
