package io.epp4j.sim;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The results of every policy on one scenario.
 *
 * @param scenario    scenario name
 * @param description the workload's sizes and regime
 * @param results     one result per policy, in the order they ran
 * @param load        the workload's parameters ({@link Workload#parameters()}), for the reports'
 *     metadata
 */
public record ScenarioResult(String scenario, String description, List<PolicyResult> results,
    Map<String, Object> load) {
  public ScenarioResult {
    results = List.copyOf(results);
    load = java.util.Collections.unmodifiableMap(new LinkedHashMap<>(load));
  }

  /** A result without workload parameters. */
  public ScenarioResult(String scenario, String description, List<PolicyResult> results) {
    this(scenario, description, results, Map.of());
  }
}
