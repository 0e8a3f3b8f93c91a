package io.epp4j.sim;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.ThreadLocalRandom;

/**
 * For tests of the stand-in's HTTP API: one emulated replica (the default profile, speed 20) on
 * free-looking ports, started on demand, and a client posting JSON to it. Close it after the test.
 */
final class OneReplica implements AutoCloseable {
  private final HttpClient http = HttpClient.newBuilder()
      .connectTimeout(Duration.ofSeconds(5)).build();
  private Serve serve;

  /** Starts the replica; returns its HTTP port. */
  int start() {
    return start(List.of());
  }

  /** Starts the replica serving LoRA adapters {@code loraAdapters}; returns its HTTP port. */
  int start(List<String> loraAdapters) {
    return start(loraAdapters, 20);
  }

  /**
   * Starts the replica serving LoRA adapters {@code loraAdapters} at {@code speed} emulated
   * seconds per wall second; returns its HTTP port.
   */
  int start(List<String> loraAdapters, double speed) {
    return start(base -> new Serve.Options(1, base, base + 1_000, false, speed,
        HardwareProfile.qwen3H100Mps6(), 1, loraAdapters, null));
  }

  /**
   * Starts the replica with the options {@code options} gives for an HTTP port; returns that
   * port.
   */
  int start(java.util.function.IntFunction<Serve.Options> options) {
    IllegalStateException last = null;
    for (int attempt = 0; attempt < 20; attempt++) {
      // below the kernel's ephemeral range, so no client socket of another process holds them
      int base = ThreadLocalRandom.current().nextInt(20_000, 30_000);
      try {
        serve = new Serve(options.apply(base));
        return base;
      } catch (IllegalStateException e) {
        last = e;
      }
    }
    throw new AssertionError("no free ports found", last);
  }

  /** The replica's server, once started. */
  Serve serve() {
    if (serve == null) {
      throw new IllegalStateException("not started");
    }
    return serve;
  }

  HttpResponse<String> post(int port, String path, String body) throws Exception {
    return http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path))
        .timeout(Duration.ofSeconds(30))
        .header("Content-Type", "application/json")
        .POST(HttpRequest.BodyPublishers.ofString(body)).build(),
        HttpResponse.BodyHandlers.ofString());
  }

  /** Posts {@code body}, checks that the answer is a 400 and returns its {@code error} object. */
  com.fasterxml.jackson.databind.JsonNode refusal(int port, String path, String body)
      throws Exception {
    HttpResponse<String> res = post(port, path, body);
    org.assertj.core.api.Assertions.assertThat(res.statusCode()).as(res.body()).isEqualTo(400);
    return new com.fasterxml.jackson.databind.ObjectMapper().readTree(res.body()).get("error");
  }

  @Override
  public void close() {
    if (serve != null) {
      serve.close();
    }
  }
}
