package io.epp4j.spring.gateway;

import io.epp4j.api.Candidate;
import io.epp4j.core.Router;
import io.netty.buffer.ByteBuf;
import io.netty.buffer.Unpooled;
import io.netty.handler.codec.http.HttpHeaders;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import org.reactivestreams.Publisher;
import reactor.core.publisher.Flux;
import reactor.core.publisher.Mono;
import reactor.netty.http.client.HttpClient;

/** What the gateway tests over HTTP/2 (h2c and h2) send, and the waits they share. */
final class Http2Requests {
  private Http2Requests() {}

  /** An answer as the client read it: status, protocol version, headers and body. */
  record Answer(int status, String version, HttpHeaders headers, String body) {}

  /**
   * POSTs a JSON {@code body} to {@code url}: with a declared length in one piece, else in 8 KiB
   * pieces without one, so that it arrives in several DATA frames.
   */
  static Answer post(HttpClient client, String url, String body, Map<String, String> headers,
      boolean declareLength) {
    byte[] bytes = body.getBytes(StandardCharsets.UTF_8);
    Publisher<ByteBuf> content = declareLength
        ? Mono.fromSupplier(() -> Unpooled.wrappedBuffer(bytes))
        : Flux.range(0, (bytes.length + 8191) / 8192).map(i -> Unpooled.wrappedBuffer(bytes,
            i * 8192, Math.min(8192, bytes.length - i * 8192)));
    return client.headers(h -> {
          h.set("content-type", "application/json");
          headers.forEach(h::set);
          if (declareLength) {
            h.set("content-length", bytes.length);
          }
        })
        .post().uri(url)
        .send(content)
        .responseSingle((r, b) -> b.asString(StandardCharsets.UTF_8).defaultIfEmpty("")
            .map(s -> new Answer(r.status().code(), r.version().text(), r.responseHeaders(), s)))
        .block(Duration.ofSeconds(20));
  }

  /** Waits until no endpoint of the router counts a request in flight. */
  static void awaitNoneInFlight(Router router) throws InterruptedException {
    await(() -> {
      int n = 0;
      for (Candidate c : router.endpoints()) {
        n += c.inFlightRequests();
      }
      return n == 0;
    });
  }

  /** Waits up to 10 s for {@code condition}, failing the test if it does not come true. */
  static void await(BooleanSupplier condition) throws InterruptedException {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    while (!condition.getAsBoolean()) {
      if (System.nanoTime() > deadline) {
        throw new AssertionError("condition not met within 10 s");
      }
      Thread.sleep(10);
    }
  }
}
