package com.example.epp4j.plugin;

import io.epp4j.api.Parameters;
import io.epp4j.api.PluginProvider;
import io.epp4j.api.Scorer;
import io.epp4j.testkit.ContractFixtures;
import io.epp4j.testkit.ProviderContract;
import io.epp4j.testkit.ScorerContract;
import java.util.Map;
import org.junit.jupiter.api.Nested;

/** The scorer and its provider against the epp4j test kit's contracts. */
class CheapestGpuScorerContractTest {
  static final Map<String, ?> PRICES = Map.of("pricePerHour", Map.of("h100", 3.0, "l4", 0.8));

  @Nested
  class Plugin extends ScorerContract<Scorer> {
    @Override
    protected Scorer createPlugin() {
      PluginProvider provider = new CheapestGpuScorerProvider();
      return (Scorer) provider.create(ContractFixtures.context("cost"), Parameters.of(PRICES))
          .value();
    }
  }

  @Nested
  class Provider extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new CheapestGpuScorerProvider();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return PRICES;
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of(
          "pricePerHour.h100", Map.of("pricePerHour", Map.of("h100", -3)),
          "pricePerHour", Map.of());
    }
  }
}
