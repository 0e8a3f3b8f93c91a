package io.epp4j.testkit;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.Ticker;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.SplittableRandom;

/**
 * The inputs the contracts feed to a plugin: candidate pools that cover what a router hands
 * over (no metrics yet, fresh metrics, stale metrics, in-flight load, role and custom labels,
 * LoRA adapters), requests of each kind, and cycle states with a fixed clock and seed. Public so
 * a plugin's own tests can reuse them.
 */
public final class ContractFixtures {
  private ContractFixtures() {}

  /** The clock reading of every cycle state made here: 10 s after the router's epoch. */
  public static final long NOW_NANOS = 10_000_000_000L;

  /** A candidate as a router presents it; immutable. */
  public record TestCandidate(Endpoint endpoint, EndpointMetrics metrics, int inFlightRequests,
      long inFlightTokens) implements Candidate {}

  /** A candidate without metrics or load. */
  public static TestCandidate candidate(String hostPort) {
    return new TestCandidate(Endpoint.parse(hostPort), EndpointMetrics.UNKNOWN, 0, 0);
  }

  private static EndpointMetrics fresh(int waiting, int running, double kv) {
    return EndpointMetrics.builder().waitingRequests(waiting).runningRequests(running)
        .kvCacheUsage(kv).scrapedAtNanos(NOW_NANOS - 1_000_000L).build();
  }

  /**
   * Named pools of candidates; every contract runs its checks on each of them. The lists are
   * immutable: the concurrent calls of a check share them, and a plugin that modifies one throws
   * rather than changing the pool under the other calls.
   */
  public static Map<String, List<Candidate>> pools() {
    List<Candidate> unknown = List.of(candidate("10.0.0.1:8000"), candidate("10.0.0.2:8000"),
        candidate("10.0.0.3:8000"));
    List<Candidate> loaded = new ArrayList<>();
    int[] waiting = {0, 3, 40, 200};
    int[] running = {1, 8, 64, 0};
    double[] kv = {0.0, 0.3, 0.97, 1.0};
    for (int i = 0; i < 4; i++) {
      loaded.add(new TestCandidate(Endpoint.parse("10.0.1." + (i + 1) + ":8000"),
          fresh(waiting[i], running[i], kv[i]), i * 3, i * 5_000L));
    }
    EndpointMetrics stale = EndpointMetrics.builder().waitingRequests(5).kvCacheUsage(0.5)
        .scrapedAtNanos(0).build();
    List<Candidate> mixed = List.of(
        new TestCandidate(Endpoint.parse("10.0.2.1:8000"), stale, 2, 100),
        new TestCandidate(Endpoint.parse("10.0.2.2:8000"), fresh(1, 1, 0.2), 0, 0),
        candidate("10.0.2.3:8000"));
    EndpointMetrics lora = EndpointMetrics.builder().runningLoraAdapters(Set.of("adapter-a"))
        .waitingLoraAdapters(Set.of("adapter-b")).maxLoras(2).scrapedAtNanos(NOW_NANOS).build();
    List<Candidate> labelled = List.of(
        new TestCandidate(Endpoint.parse("10.0.3.1:8000",
            Map.of(Endpoint.ROLE_LABEL, "prefill", "zone", "a")), lora, 0, 0),
        new TestCandidate(Endpoint.parse("10.0.3.2:8000",
            Map.of(Endpoint.ROLE_LABEL, "decode", "zone", "b")), fresh(2, 2, 0.4), 1, 10),
        new TestCandidate(Endpoint.parse("10.0.3.3:8000",
            Map.of(Endpoint.ROLE_LABEL, "both")), EndpointMetrics.UNKNOWN, 0, 0));
    return Map.of("unknown metrics", unknown, "fresh metrics and load", List.copyOf(loaded),
        "stale, fresh and unknown", mixed, "labels and LoRA", labelled,
        "single", List.of(candidate("10.0.4.1:8000")));
  }

  /** Requests of each kind a parser produces, with and without session, salt and adapter. */
  public static List<InferenceRequest> requests() {
    int[] tokens = new int[300];
    for (int i = 0; i < tokens.length; i++) {
      tokens[i] = (i * 7919) % 50_000;
    }
    return List.of(
        InferenceRequest.completion("m", "the same system prompt ".repeat(40) + "question"),
        InferenceRequest.builder().model("m").tokenIds(tokens).sessionKey("session-1")
            .maxTokens(64).build(),
        InferenceRequest.builder().model("m").prompt("hello").loraAdapter("adapter-b")
            .cacheSalt("salt").headers(Map.of("x-session-token", "not-base64")).build());
  }

  /** A cycle state at {@link #NOW_NANOS} with a seeded random source. */
  public static CycleState state(long seed) {
    return new CycleState(NOW_NANOS, new SplittableRandom(seed));
  }

  /** A plugin context with a fixed clock at {@link #NOW_NANOS} and no services. */
  public static PluginContext context(String pluginName) {
    Ticker ticker = () -> NOW_NANOS;
    return new PluginContext() {
      @Override
      public String pluginName() {
        return pluginName;
      }

      @Override
      public Ticker ticker() {
        return ticker;
      }

      @Override
      public <T> Optional<T> service(Class<T> type) {
        return Optional.empty();
      }
    };
  }

  /**
   * A context in which {@code earlier} are the plugins defined before this one, by name, as a
   * configuration file would define them.
   */
  public static PluginContext context(String pluginName, java.util.Map<String, Plugin> earlier) {
    PluginContext base = context(pluginName);
    return new PluginContext() {
      @Override
      public String pluginName() {
        return pluginName;
      }

      @Override
      public Ticker ticker() {
        return base.ticker();
      }

      @Override
      public <T> Optional<T> service(Class<T> type) {
        return Optional.empty();
      }

      @Override
      public Optional<Plugin> plugin(String name) {
        return Optional.ofNullable(earlier.get(name));
      }

      @Override
      public java.util.List<Plugin> earlierPlugins() {
        return java.util.List.copyOf(earlier.values());
      }
    };
  }

  /** Parameters from a map, for providers. */
  public static Parameters parameters(Map<String, ?> values) {
    return Parameters.of(values);
  }
}
