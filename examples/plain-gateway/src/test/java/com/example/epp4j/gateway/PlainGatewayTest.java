package com.example.epp4j.gateway;

import static org.assertj.core.api.Assertions.assertThat;

import com.sun.net.httpserver.HttpServer;
import io.epp4j.api.Candidate;
import io.epp4j.api.Endpoint;
import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/** Two fake vLLM replicas on loopback behind the gateway. */
class PlainGatewayTest {
  final List<HttpServer> replicas = new ArrayList<>();
  final ConcurrentHashMap<Integer, AtomicInteger> served = new ConcurrentHashMap<>();
  final HttpClient client = HttpClient.newHttpClient();
  PlainGateway gateway;

  HttpServer fakeVllm() throws IOException {
    HttpServer s = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
    int port = s.getAddress().getPort();
    served.put(port, new AtomicInteger());
    s.createContext("/metrics", ex -> {
      byte[] b = ("vllm:num_requests_waiting 0\nvllm:num_requests_running 1\n"
          + "vllm:kv_cache_usage_perc 0.3\n"
          + "vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"4000\"} 1\n")
          .getBytes(StandardCharsets.UTF_8);
      ex.sendResponseHeaders(200, b.length);
      ex.getResponseBody().write(b);
      ex.close();
    });
    s.createContext("/v1/", ex -> {
      ex.getRequestBody().readAllBytes();
      served.get(port).incrementAndGet();
      byte[] b = ("{\"id\":\"x\",\"choices\":[{\"text\":\"ok\"}],\"usage\":{\"prompt_tokens\":700,"
          + "\"completion_tokens\":5,\"prompt_tokens_details\":{\"cached_tokens\":512}}}")
          .getBytes(StandardCharsets.UTF_8);
      ex.getResponseHeaders().set("content-type", "application/json");
      ex.sendResponseHeaders(200, b.length);
      ex.getResponseBody().write(b);
      ex.close();
    });
    s.start();
    replicas.add(s);
    return s;
  }

  @AfterEach
  void stop() {
    if (gateway != null) {
      gateway.close();
    }
    replicas.forEach(r -> r.stop(0));
  }

  HttpResponse<String> post(String path, String body) throws Exception {
    return client.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + gateway.port() + path))
        .POST(HttpRequest.BodyPublishers.ofString(body)).build(), HttpResponse.BodyHandlers.ofString());
  }

  @Test
  void routesProxiesAndLearnsPrefixes() throws Exception {
    HttpServer a = fakeVllm();
    HttpServer b = fakeVllm();
    gateway = new PlainGateway(0, List.of(
        Endpoint.of("127.0.0.1", a.getAddress().getPort()),
        Endpoint.of("127.0.0.1", b.getAddress().getPort())));
    String system = "You are the ACME assistant. Answer briefly and cite the manual. ".repeat(30);
    String first = null;
    for (int i = 0; i < 12; i++) {
      HttpResponse<String> r = post("/v1/completions",
          "{\"model\":\"qwen3\",\"prompt\":\"" + system + "Question " + i + "\",\"max_tokens\":5}");
      assertThat(r.statusCode()).isEqualTo(200);
      assertThat(r.body()).contains("\"usage\"");
      String dest = r.headers().firstValue("x-gateway-destination-endpoint").orElseThrow();
      if (first == null) {
        first = dest;
      }
      assertThat(dest).as("a shared prompt prefix keeps going where it is cached").isEqualTo(first);
    }
    int total = served.values().stream().mapToInt(AtomicInteger::get).sum();
    assertThat(total).isEqualTo(12);
    for (Candidate c : gateway.router().endpoints()) {
      assertThat(c.inFlightRequests()).as("every request was reported complete").isZero();
    }
  }

  @Test
  void badBodyIs400AndDeadReplicaIs502() throws Exception {
    HttpServer a = fakeVllm();
    int port = a.getAddress().getPort();
    a.stop(0); // nothing listens there any more
    gateway = new PlainGateway(0, List.of(Endpoint.of("127.0.0.1", port)));
    assertThat(post("/v1/completions", "{\"model\":").statusCode()).isEqualTo(400);
    HttpResponse<String> r = post("/v1/completions", "{\"model\":\"m\",\"prompt\":\"hi\"}");
    assertThat(r.statusCode()).isEqualTo(502);
    assertThat(gateway.router().endpoints().get(0).inFlightRequests()).isZero();
  }

  @Test
  void usageIsReadFromJsonAndFromTheLastStreamChunk() {
    assertThat(PlainGateway.usageOf(List.of(
        "{\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":8}}}"
            .getBytes(StandardCharsets.UTF_8))))
        .isEqualTo(new io.epp4j.api.Usage(10, 8, 2));
    String sse = "data: {\"choices\":[{\"text\":\"a\"}]}\n\n"
        + "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":30,\"completion_tokens\":4}}\n\ndata: [DONE]\n\n";
    assertThat(PlainGateway.usageOf(List.of(sse.getBytes(StandardCharsets.UTF_8))))
        .isEqualTo(new io.epp4j.api.Usage(30, 0, 4));
  }
}
