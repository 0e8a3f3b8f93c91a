package com.example.epp4j.plugin;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RoutingDecision;
import io.epp4j.core.ConfigException;
import io.epp4j.core.Router;
import java.net.URISyntaxException;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

class CustomPluginTest {

  static Path config() throws URISyntaxException {
    return Path.of(CustomPluginTest.class.getResource("/cheapest-gpu.yaml").toURI());
  }

  @Test
  void pluginIsFoundByTypeNameThroughServiceLoaderAndRoutes() throws Exception {
    Router router = Router.builder()
        .configFile(config())
        .endpoints(List.of(
            Endpoint.of("10.0.0.1", 8000, Map.of(CheapestGpuScorer.GPU_LABEL, "h100")),
            Endpoint.of("10.0.0.2", 8000, Map.of(CheapestGpuScorer.GPU_LABEL, "l4"))))
        .build();
    assertThat(router.registry().types()).contains("cheapest-gpu-scorer");
    for (int i = 0; i < 20; i++) {
      assertThat(router.route(InferenceRequest.completion("m", "hi")).primary().id())
          .isEqualTo("10.0.0.2:8000");
    }
  }

  @Test
  void anEndpointWithoutTheLabelOrWithAnUnpricedGpuScoresZeroInsteadOfFailingTheRequest()
      throws Exception {
    // the javadoc promises 0 for unknown types; a missing label is the commonest unknown type
    Router router = Router.builder()
        .configFile(config())
        .endpoints(List.of(
            Endpoint.of("10.0.0.1", 8000),
            Endpoint.of("10.0.0.2", 8000, Map.of(CheapestGpuScorer.GPU_LABEL, "tpu")),
            Endpoint.of("10.0.0.3", 8000, Map.of(CheapestGpuScorer.GPU_LABEL, "l4"))))
        .build();
    for (int i = 0; i < 20; i++) {
      RoutingDecision d = router.route(InferenceRequest.completion("m", "hi"));
      assertThat(d.isRouted()).as("routed, not rejected").isTrue();
      assertThat(d.primary().id()).isEqualTo("10.0.0.3:8000");
    }
  }

  @Test
  void badParametersAreReportedWithThePluginAndParameterName() {
    String yaml = """
        plugins:
        - name: cost
          type: cheapest-gpu-scorer
          parameters: {pricePerHour: {h100: -3}}
        schedulingProfiles:
        - name: default
          plugins: [{pluginRef: cost}]
        """;
    assertThatThrownBy(() -> Router.builder().configYaml(yaml, "cost.yaml").build())
        .isInstanceOf(ConfigException.class)
        .hasMessageContaining("cost.yaml")
        .hasMessageContaining("name 'cost'")
        .hasMessageContaining("pricePerHour.h100");
  }
}
