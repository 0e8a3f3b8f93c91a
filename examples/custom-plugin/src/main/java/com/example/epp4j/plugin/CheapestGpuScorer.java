package com.example.epp4j.plugin;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Scorer;
import java.util.List;
import java.util.Map;

/**
 * Prefers endpoints on cheaper hardware: reads the label {@code example.com/gpu} and scores
 * 1 − price/maxPrice, so the cheapest GPU type scores highest. Endpoints without the label and
 * GPU types without a price score 0.
 */
final class CheapestGpuScorer implements Scorer {
  static final String GPU_LABEL = "example.com/gpu";

  private final Map<String, Double> pricePerHour;
  private final double maxPrice;

  CheapestGpuScorer(Map<String, Double> pricePerHour) {
    this.pricePerHour = Map.copyOf(pricePerHour);
    this.maxPrice = pricePerHour.values().stream().mapToDouble(Double::doubleValue).max().orElse(1.0);
  }

  @Override
  public void score(InferenceRequest request, CycleState state, List<Candidate> candidates, double[] scores) {
    for (int i = 0; i < candidates.size(); i++) {
      String gpu = candidates.get(i).endpoint().label(GPU_LABEL);
      // Map.copyOf rejects get(null) with an exception: an unlabelled endpoint must be asked
      // about explicitly, or one such endpoint fails every request routed to its pool
      Double price = gpu == null ? null : pricePerHour.get(gpu);
      scores[i] = price == null ? 0.0 : 1.0 - price / maxPrice;
    }
  }
}
