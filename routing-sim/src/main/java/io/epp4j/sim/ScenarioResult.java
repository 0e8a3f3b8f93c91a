package io.epp4j.sim;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The results of every policy on one scenario at one load level.
 *
 * @param scenario    scenario name
 * @param description the workload's sizes and regime
 * @param results     one result per policy, in the order they ran
 * @param load        the workload's parameters ({@link Workload#parameters()}), for the reports'
 *     metadata
 * @param loadLevel   the multiplier of the scenario's offered load ({@code --load-levels}); 1 for
 *     a run without it
 * @param seed        the run's random seed
 * @param hitRateCeiling the share of prompt tokens an infinite cache would hit
 *     ({@link Workload#hitRateCeiling}); {@code NaN} when not computed
 * @param capacityCrossover the load level at which the workload's live KV exceeds the cluster's
 *     ({@link Workload#capacityCrossover}); {@code NaN} when the load does not change it
 */
public record ScenarioResult(String scenario, String description, List<PolicyResult> results,
    Map<String, Object> load, double loadLevel, long seed, double hitRateCeiling,
    double capacityCrossover) {
  public ScenarioResult {
    results = List.copyOf(results);
    load = java.util.Collections.unmodifiableMap(new LinkedHashMap<>(load));
  }

  /** A result at load level 1 without workload facts. */
  public ScenarioResult(String scenario, String description, List<PolicyResult> results,
      Map<String, Object> load) {
    this(scenario, description, results, load, 1.0, 1, Double.NaN, Double.NaN);
  }

  /** A result without workload parameters. */
  public ScenarioResult(String scenario, String description, List<PolicyResult> results) {
    this(scenario, description, results, Map.of());
  }
}
