package com.example.epp4j.embedding;

import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.Rejection;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.Router;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;

/**
 * The README's embedding example: build a router with the EPP default profile, feed it metrics,
 * route an OpenAI body and report the outcome. {@link #main} prints where two requests that
 * share a system prompt went.
 */
public final class EmbeddingExample {
  private EmbeddingExample() {}

  /** Routes one chat body and returns the header value a proxy would forward on. */
  public static String routeOnce(Router router, String body) {
    // --- README example starts
    RoutingDecision d = router.route("/v1/chat/completions", Map.of("x-session-id", "alice"),
        body.getBytes(StandardCharsets.UTF_8));
    Rejection rejected = d.rejection();              // null when routed
    if (rejected != null) {
      return rejected.httpStatus() + " " + rejected.message();
    }
    String header = d.destinationHeaderValue();      // forward to d.primary()
    d.onFirstToken();                                // when the first byte streams back
    d.onComplete(new Usage(1200, 1024, 80));         // with the response's usage
    return header;
    // --- README example ends
  }

  /** Builds the router the README shows. */
  public static Router newRouter() {
    Router router = Router.builder()                 // no config: EPP default profile
        .endpoints(List.of(Endpoint.parse("10.0.0.1:8000"), Endpoint.parse("10.0.0.2:8000")))
        .build();
    router.updateMetrics("10.0.0.1:8000", EndpointMetrics.builder().waitingRequests(0).kvCacheUsage(0.2).build());
    router.updateMetrics("10.0.0.2:8000", EndpointMetrics.builder().waitingRequests(0).kvCacheUsage(0.2).build());
    return router;
  }

  public static void main(String[] args) {
    try (Router router = newRouter()) {
      String system = "You are a support agent for ACME. ".repeat(40);
      String a = "{\"model\":\"qwen3\",\"messages\":[{\"role\":\"system\",\"content\":\"" + system
          + "\"},{\"role\":\"user\",\"content\":\"Where is my order?\"}]}";
      String b = a.replace("Where is my order?", "How do I get a refund?");
      System.out.println("first request  -> " + routeOnce(router, a));
      System.out.println("second request -> " + routeOnce(router, b) + " (same system prompt)");
      System.out.println("bad body       -> " + routeOnce(router, "{\"model\":"));
    }
  }
}
