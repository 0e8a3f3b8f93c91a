package io.epp4j.smoke;

import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.Router;
import java.util.List;
import java.util.Map;

/**
 * Routes with the default profile and with a YAML config naming built-in plugins of
 * routing-scorers, found through ServiceLoader from the module path. Exits non-zero when a
 * request is not routed or a plugin is not found.
 */
public final class Main {
  public static void main(String[] args) {
    List<Endpoint> endpoints = List.of(Endpoint.parse("10.0.0.1:8000", Map.of()),
        Endpoint.parse("10.0.0.2:8000", Map.of()));
    String yaml = """
        plugins:
        - type: prefix-cache-scorer
        - type: queue-scorer
        - type: token-cost-picker
        schedulingProfiles:
        - name: default
          plugins: [{pluginRef: prefix-cache-scorer}, {pluginRef: queue-scorer},
                    {pluginRef: token-cost-picker}]
        """;
    try (Router byDefault = Router.builder().endpoints(endpoints).build();
        Router configured = Router.builder().endpoints(endpoints).configYaml(yaml, "smoke.yaml")
            .build()) {
      for (Router r : List.of(byDefault, configured)) {
        RoutingDecision d = r.route(InferenceRequest.builder().model("m")
            .prompt("a prompt routed from the module path").maxTokens(8).build());
        if (!d.isRouted()) {
          throw new AssertionError("not routed: " + d.rejection());
        }
        d.onComplete(Usage.NONE);
        System.out.println("routed to " + d.primary().id() + " by " + r.config().profiles());
      }
    }
  }
}
