package com.example.epp4j.gateway;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import io.epp4j.api.Endpoint;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.MetricsScraper;
import io.epp4j.core.Router;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Executors;

/**
 * A complete, minimal OpenAI-compatible gateway: the JDK's HTTP server takes
 * {@code /v1/completions} and {@code /v1/chat/completions}, epp4j picks the replica, the JDK's
 * HTTP client forwards the body and streams the answer back, and the outcome (first byte, usage,
 * failure) flows into the router. A scraper keeps replica metrics fresh.
 *
 * <pre>
 * java -cp ... com.example.epp4j.gateway.PlainGateway 8080 10.0.0.1:8000 10.0.0.2:8000
 * </pre>
 */
public final class PlainGateway implements AutoCloseable {
  private static final ObjectMapper JSON = new ObjectMapper();

  private final Router router;
  private final MetricsScraper scraper;
  private final HttpServer server;
  private final HttpClient client = HttpClient.newBuilder()
      .connectTimeout(Duration.ofSeconds(2)).version(HttpClient.Version.HTTP_1_1).build();

  public PlainGateway(int port, List<Endpoint> replicas) throws IOException {
    this.router = Router.builder().endpoints(replicas).build(); // EPP default profile
    this.scraper = MetricsScraper.builder(router).interval(Duration.ofMillis(50)).start();
    this.server = HttpServer.create(new InetSocketAddress(port), 0);
    server.createContext("/v1/", this::handle);
    server.setExecutor(Executors.newCachedThreadPool());
    server.start();
  }

  /** The port the gateway listens on. */
  public int port() {
    return server.getAddress().getPort();
  }

  public Router router() {
    return router;
  }

  private void handle(HttpExchange ex) throws IOException {
    try (ex) {
      if (!"POST".equals(ex.getRequestMethod())) {
        reply(ex, 405, "{\"error\":\"use POST\"}");
        return;
      }
      byte[] body = ex.getRequestBody().readAllBytes();
      Map<String, String> headers = new HashMap<>();
      ex.getRequestHeaders().forEach((k, v) -> headers.put(k, v.isEmpty() ? "" : v.get(0)));
      String path = ex.getRequestURI().getPath();
      RoutingDecision d = router.route(path, headers, body);
      if (!d.isRouted()) {
        reply(ex, d.rejection().httpStatus(),
            JSON.createObjectNode().put("error", d.rejection().message()).toString());
        return;
      }
      Endpoint target = d.primary();
      HttpRequest.Builder fwd = HttpRequest.newBuilder(URI.create("http://" + target.id() + path))
          .timeout(Duration.ofMinutes(10))
          .header("content-type", "application/json")
          .header(RoutingDecision.DESTINATION_HEADER, d.destinationHeaderValue())
          .POST(HttpRequest.BodyPublishers.ofByteArray(body));
      Endpoint prefill = d.prefillEndpoint();
      if (prefill != null) {
        fwd.header(RoutingDecision.PREFILLER_HEADER, prefill.id());
      }
      HttpResponse<InputStream> resp;
      try {
        resp = client.send(fwd.build(), HttpResponse.BodyHandlers.ofInputStream());
      } catch (IOException | InterruptedException e) {
        d.onFailure(e);
        if (e instanceof InterruptedException) {
          Thread.currentThread().interrupt();
        }
        reply(ex, 502, "{\"error\":\"upstream " + target.id() + " unavailable\"}");
        return;
      }
      ex.getResponseHeaders().set("content-type",
          resp.headers().firstValue("content-type").orElse("application/json"));
      ex.getResponseHeaders().set(RoutingDecision.DESTINATION_HEADER, target.id());
      ex.sendResponseHeaders(resp.statusCode(), 0);
      List<byte[]> tail = new ArrayList<>();
      boolean first = true;
      try (InputStream in = resp.body(); OutputStream out = ex.getResponseBody()) {
        byte[] buf = new byte[8192];
        for (int n; (n = in.read(buf)) > 0; ) {
          if (first) {
            d.onFirstToken();
            first = false;
          }
          out.write(buf, 0, n);
          out.flush();
          remember(tail, buf, n);
        }
      } catch (IOException e) {
        d.onFailure(e);
        return;
      }
      if (resp.statusCode() >= 500) {
        d.onFailure(new IOException("upstream answered " + resp.statusCode()));
      } else {
        d.onComplete(usageOf(tail));
      }
    }
  }

  /** Keeps the last 64 KiB of the response: usage is in the final JSON object or SSE chunk. */
  private static void remember(List<byte[]> tail, byte[] buf, int n) {
    tail.add(java.util.Arrays.copyOf(buf, n));
    int total = 0;
    for (byte[] b : tail) {
      total += b.length;
    }
    while (total > 65536 && tail.size() > 1) {
      total -= tail.remove(0).length;
    }
  }

  static Usage usageOf(List<byte[]> tail) {
    StringBuilder sb = new StringBuilder();
    for (byte[] b : tail) {
      sb.append(new String(b, StandardCharsets.UTF_8));
    }
    String text = sb.toString();
    // SSE: the usage chunk is the last "data: {...}" line holding "usage"; plain JSON: the body
    String candidate = text;
    int idx = text.lastIndexOf("\"usage\"");
    if (text.contains("data:") && idx >= 0) {
      int start = text.lastIndexOf("data:", idx);
      int end = text.indexOf('\n', idx);
      candidate = text.substring(start + 5, end < 0 ? text.length() : end).strip();
    }
    try {
      JsonNode u = JSON.readTree(candidate).path("usage");
      if (u.isMissingNode() || u.isNull()) {
        return Usage.NONE;
      }
      return new Usage(u.path("prompt_tokens").asInt(0),
          u.path("prompt_tokens_details").path("cached_tokens").asInt(0),
          u.path("completion_tokens").asInt(0));
    } catch (IOException | RuntimeException e) {
      return Usage.NONE;
    }
  }

  private static void reply(HttpExchange ex, int status, String json) throws IOException {
    byte[] b = json.getBytes(StandardCharsets.UTF_8);
    ex.getResponseHeaders().set("content-type", "application/json");
    ex.sendResponseHeaders(status, b.length);
    ex.getResponseBody().write(b);
  }

  @Override
  public void close() {
    server.stop(0);
    scraper.close();
    router.close();
  }

  public static void main(String[] args) throws IOException {
    if (args.length < 2) {
      System.err.println("usage: PlainGateway PORT HOST:PORT [HOST:PORT ...]");
      System.exit(2);
    }
    List<Endpoint> replicas = new ArrayList<>();
    for (int i = 1; i < args.length; i++) {
      replicas.add(Endpoint.parse(args[i]));
    }
    PlainGateway g = new PlainGateway(Integer.parseInt(args[0]), replicas);
    System.out.println("epp4j gateway on :" + g.port() + " -> " + replicas);
  }
}
