package com.example.epp4j.plugin;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Registers {@code cheapest-gpu-scorer} through {@code META-INF/services}. Parameter
 * {@code pricePerHour}: a map from GPU type to a positive price; required.
 *
 * <p>Extending {@link AbstractPluginProvider} leaves only {@link #build} to write: record each
 * bad value with {@link Parameters#error} and carry on, and the base class turns the collected
 * errors into the result (closing the plugin built from the fallback values).
 */
public final class CheapestGpuScorerProvider extends AbstractPluginProvider {
  public CheapestGpuScorerProvider() {
    super("cheapest-gpu-scorer");
  }

  @Override
  protected Plugin build(PluginContext context, Parameters params) {
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
    return new CheapestGpuScorer(map);
  }
}
