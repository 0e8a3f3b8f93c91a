package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Each path takes the methods vLLM's route for it takes, and the rest are answered as vLLM's web
 * framework answers them: a path without a route is {@code 404 {"detail":"Not Found"}}, a method
 * the route does not take is {@code 405 {"detail":"Method Not Allowed"}} with {@code Allow}.
 * {@code /ping} is vLLM's alias of {@code /health} on GET and POST; {@code /metrics} answers any
 * method.
 */
@Timeout(60)
class ServeRoutesTest {
  private final OneReplica replica = new OneReplica();
  private final HttpClient http = HttpClient.newBuilder()
      .connectTimeout(Duration.ofSeconds(5)).build();

  @AfterEach
  void close() {
    replica.close();
  }

  private HttpResponse<String> send(int port, String method, String path) throws Exception {
    return http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path))
        .timeout(Duration.ofSeconds(30))
        .method(method, HttpRequest.BodyPublishers.ofString(method.equals("GET") ? "" : "{}"))
        .build(), HttpResponse.BodyHandlers.ofString());
  }

  private void assertMethodNotAllowed(int port, String method, String path, String allow)
      throws Exception {
    HttpResponse<String> res = send(port, method, path);
    assertThat(res.statusCode()).as(method + " " + path).isEqualTo(405);
    assertThat(res.body()).isEqualTo("{\"detail\":\"Method Not Allowed\"}");
    assertThat(res.headers().firstValue("allow")).hasValue(allow);
    assertThat(res.headers().firstValue("content-type")).hasValue("application/json");
  }

  @Test
  void aPathWithoutARouteIsNotFoundInTheFrameworksShape() throws Exception {
    int port = replica.start();
    for (String method : new String[] {"GET", "POST"}) {
      HttpResponse<String> res = send(port, method, "/v1/nowhere?x=1");
      assertThat(res.statusCode()).isEqualTo(404);
      assertThat(res.body()).isEqualTo("{\"detail\":\"Not Found\"}");
      assertThat(res.headers().firstValue("content-type")).hasValue("application/json");
    }
  }

  @Test
  void aMethodTheRouteDoesNotTakeIsRefusedNamingTheOnesItTakes() throws Exception {
    int port = replica.start();
    assertMethodNotAllowed(port, "GET", "/v1/completions", "POST");
    assertMethodNotAllowed(port, "PUT", "/v1/chat/completions", "POST");
    assertMethodNotAllowed(port, "GET", "/tokenize", "POST");
    assertMethodNotAllowed(port, "GET", "/detokenize", "POST");
    assertMethodNotAllowed(port, "POST", "/v1/models", "GET");
    assertMethodNotAllowed(port, "POST", "/health", "GET");
    assertMethodNotAllowed(port, "DELETE", "/health", "GET");
    assertMethodNotAllowed(port, "PUT", "/ping", "GET, POST");
  }

  @Test
  void versionIsServedOnGetInVllmsShapeNamingNoVllmRelease() throws Exception {
    // vLLM answers GET /version with {"version": "<its release>"}; the emulator answered 404
    int port = replica.start();
    HttpResponse<String> res = send(port, "GET", "/version");
    assertThat(res.statusCode()).isEqualTo(200);
    assertThat(res.headers().firstValue("content-type")).hasValue("application/json");
    assertThat(res.body()).isEqualTo("{\"version\":\"0.0.0+epp4j.serve\"}");
    assertMethodNotAllowed(port, "POST", "/version", "GET");
  }

  @Test
  void pingIsHealthOnGetAndPostAndMetricsAnswersAnyMethod() throws Exception {
    int port = replica.start();
    assertThat(send(port, "GET", "/ping").statusCode()).isEqualTo(200);
    assertThat(send(port, "POST", "/ping").statusCode()).isEqualTo(200);
    assertThat(send(port, "GET", "/health").statusCode()).isEqualTo(200);
    assertThat(send(port, "GET", "/v1/models").statusCode()).isEqualTo(200);
    HttpResponse<String> metrics = send(port, "POST", "/metrics");
    assertThat(metrics.statusCode()).isEqualTo(200);
    assertThat(metrics.body()).contains("vllm:num_requests_running");
  }

  /**
   * vLLM's {@code /health} (and {@code /ping}, its alias) answers 200 with an empty body and no
   * content type; the emulator sent {@code text/plain}.
   */
  @Test
  void healthAndPingAnswerWithoutABodyOrAContentTypeAsVllm() throws Exception {
    int port = replica.start();
    for (String[] call : new String[][] {{"GET", "/health"}, {"GET", "/ping"}, {"POST", "/ping"}}) {
      HttpResponse<String> res = send(port, call[0], call[1]);
      String what = call[0] + " " + call[1];
      assertThat(res.statusCode()).as(what).isEqualTo(200);
      assertThat(res.body()).as(what).isEmpty();
      assertThat(res.headers().firstValue("content-length")).as(what).hasValue("0");
      assertThat(res.headers().firstValue("content-type")).as(what).isEmpty();
    }
  }

  /**
   * vLLM serves {@code GET /load}, {@code {"server_load": n}}, whether or not it tracks the load;
   * by default it does not, and n stays 0. The emulator answered 404.
   */
  @Test
  void loadIsServedOnGetAsVllmServesItByDefault() throws Exception {
    int port = replica.start();
    HttpResponse<String> res = send(port, "GET", "/load");
    assertThat(res.statusCode()).isEqualTo(200);
    assertThat(res.headers().firstValue("content-type")).hasValue("application/json");
    assertThat(res.body()).isEqualTo("{\"server_load\":0}");
    assertMethodNotAllowed(port, "POST", "/load", "GET");
  }

  /**
   * vLLM's {@code /metrics} answers with prometheus_client's content type for its text format,
   * {@code text/plain; version=0.0.4; charset=utf-8}, on any method; the emulator left out the
   * charset.
   */
  @Test
  void metricsAnswerWithPrometheusClientsContentType() throws Exception {
    int port = replica.start();
    for (String method : new String[] {"GET", "POST"}) {
      HttpResponse<String> res = send(port, method, "/metrics");
      assertThat(res.statusCode()).as(method).isEqualTo(200);
      assertThat(res.headers().firstValue("content-type")).as(method)
          .hasValue("text/plain; version=0.0.4; charset=utf-8");
    }
  }
}
