package io.epp4j.sim;

import java.util.List;

/**
 * The results of every policy on one scenario.
 *
 * @param scenario    scenario name
 * @param description the workload's sizes and regime
 * @param results     one result per policy, in the order they ran
 */
public record ScenarioResult(String scenario, String description, List<PolicyResult> results) {
  public ScenarioResult {
    results = List.copyOf(results);
  }
}
