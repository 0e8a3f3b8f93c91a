package com.example.epp4j.plugin;

import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.PluginProvider;
import io.epp4j.api.Result;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Registers {@code cheapest-gpu-scorer} through {@code META-INF/services}. Parameter
 * {@code pricePerHour}: a map from GPU type to a positive price; required.
 */
public final class CheapestGpuScorerProvider implements PluginProvider {
  @Override
  public String type() {
    return "cheapest-gpu-scorer";
  }

  @Override
  public Result<? extends Plugin> create(PluginContext context, Parameters params) {
    Parameters prices = params.getNested("pricePerHour");
    Map<String, Double> map = new LinkedHashMap<>();
    for (String gpu : prices.names()) {
      double p = prices.getDouble(gpu, -1);
      if (!(p > 0)) {
        params.error("pricePerHour." + gpu, "must be a positive number");
      }
      map.put(gpu, p);
    }
    for (String e : prices.errors()) {
      params.error("pricePerHour", e);
    }
    if (map.isEmpty()) {
      params.error("pricePerHour", "is required and must name at least one GPU type");
    }
    return params.errors().isEmpty() ? Result.ok(new CheapestGpuScorer(map)) : Result.errors(params.errors());
  }
}
