package io.epp4j.envoy;

import static io.envoyproxy.envoy.extensions.filters.http.ext_proc.v3.ProcessingMode.BodySendMode.BUFFERED;
import static io.envoyproxy.envoy.extensions.filters.http.ext_proc.v3.ProcessingMode.BodySendMode.NONE;
import static io.epp4j.envoy.FakeEnvoy.completion;
import static io.epp4j.envoy.FakeEnvoy.modes;
import static io.epp4j.envoy.FakeEnvoy.postHeaders;
import static io.epp4j.envoy.FakeEnvoy.requestBody;
import static io.epp4j.envoy.FakeEnvoy.responseHeaders;
import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Endpoint;
import io.epp4j.core.Router;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import org.jspecify.annotations.Nullable;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * Envoy ends every ext_proc stream as {@code ExternalProcessorStreamImpl::close()} does: END_STREAM
 * ({@code closeStream()}) and RST_STREAM CANCEL ({@code resetStream()}) right behind it; with
 * {@code response_body_mode: NONE} as soon as it has the answer to the response headers. gRPC may
 * deliver the cancellation first and then drop the half-close, most often when the server runs on
 * an executor of the user's; the server must then still take the stream's end as the answer's
 * end, as it does for the half-close. {@link RawEnvoy} writes the two frames as Envoy does (a
 * gRPC client cannot: its half-close and cancel sent together lose the END_STREAM frame).
 */
class EnvoyStreamCloseTest {
  static final String A = "10.0.0.1:8000";
  static final int STREAMS = 200;

  final ExtProcServerTest.Outcomes outcomes = new ExtProcServerTest.Outcomes();
  @Nullable Router router;
  @Nullable ExtProcServer server;
  @Nullable ExecutorService pool;

  @AfterEach
  void tearDown() throws Exception {
    if (server != null) {
      server.close();
    }
    if (router != null) {
      router.close();
    }
    if (pool != null) {
      pool.shutdownNow();
      pool.awaitTermination(5, TimeUnit.SECONDS);
    }
  }

  @Test
  void closeThenResetCompletesTheAnswersOfAServerOnAnExecutor() throws Exception {
    pool = Executors.newFixedThreadPool(4);
    closeThenReset(pool);
  }

  @Test
  void closeThenResetCompletesTheAnswersOfAServerOnTransportThreads() throws Exception {
    closeThenReset(null);
  }

  private void closeThenReset(@Nullable ExecutorService executor) throws Exception {
    Router r = Router.builder().endpoints(List.of(Endpoint.parse(A))).listener(outcomes).build();
    router = r;
    ExtProcServer.Builder b = ExtProcServer.builder(r).port(0).host("127.0.0.1")
        .drainTimeout(Duration.ofSeconds(1));
    if (executor != null) {
      b.executor(executor);
    }
    ExtProcServer s = b.start();
    server = s;
    try (RawEnvoy envoy = new RawEnvoy(s.port())) {
      for (int i = 0; i < STREAMS; i++) {
        RawEnvoy.Stream stream = envoy.open();
        stream.send(postHeaders(modes(BUFFERED, NONE)));
        stream.next(); // the request headers' answer
        stream.send(requestBody(completion("hi"), true));
        stream.next(); // the pick
        stream.send(responseHeaders(200, "application/json", false));
        assertThat(stream.next().hasResponseHeaders()).isTrue();
        stream.closeAndReset(); // the last answer Envoy expects in this mode: it closes
      }
      ExtProcServerTest.await(() -> s.openStreams() == 0);
    }
    ExtProcServerTest.await(() -> outcomes.completed.size() + outcomes.failed.size() == STREAMS);
    assertThat(outcomes.failed).as("decisions failed although their 2xx answers had ended")
        .isEmpty();
    assertThat(outcomes.completed).hasSize(STREAMS);
    assertThat(r.endpoints().get(0).inFlightRequests()).isZero();
  }
}
