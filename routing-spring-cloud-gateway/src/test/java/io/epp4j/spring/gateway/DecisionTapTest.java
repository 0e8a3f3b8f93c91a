package io.epp4j.spring.gateway;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RequestListener;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.Router;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.reactivestreams.Publisher;
import org.reactivestreams.Subscription;
import org.springframework.core.io.buffer.DataBuffer;
import org.springframework.core.io.buffer.DataBufferUtils;
import org.springframework.core.io.buffer.DefaultDataBufferFactory;
import org.springframework.http.HttpStatus;
import org.springframework.http.MediaType;
import org.springframework.mock.http.server.reactive.MockServerHttpResponse;
import reactor.core.publisher.BaseSubscriber;
import reactor.core.publisher.Flux;

/** The tap on its own, fed the way the gateway's response writer feeds it. */
class DecisionTapTest {
  final List<Usage> completed = new CopyOnWriteArrayList<>();
  final List<Throwable> failed = new CopyOnWriteArrayList<>();
  final Router router = Router.builder().endpoint(Endpoint.of("10.0.0.1", 8000))
      .listener(new RequestListener() {
        @Override
        public void onComplete(InferenceRequest request, Endpoint endpoint, Usage usage) {
          completed.add(usage);
        }

        @Override
        public void onFailure(InferenceRequest request, Endpoint endpoint, Throwable cause) {
          failed.add(cause);
        }
      }).build();

  @AfterEach
  void close() {
    router.close();
  }

  int inFlight() {
    return router.endpoints().stream().mapToInt(Candidate::inFlightRequests).sum();
  }

  static DataBuffer sse(String data) {
    return DefaultDataBufferFactory.sharedInstance.wrap(
        ("data: " + data + "\n\n").getBytes(StandardCharsets.UTF_8));
  }

  @Test
  void theUsageChunkOfAStreamIsReportedWhenTheWriterTakesChunksAheadOfWritingThem() {
    // SCG's NettyWriteResponseFilter hands a stream to writeAndFlushWith, one Flux.just(buffer)
    // per chunk; an application's own writer may hand chunks that are no constants
    usageOfAStreamWrittenSlowly(false);
    usageOfAStreamWrittenSlowly(true);
  }

  /** A routed streaming request's decision, watched on a 200 {@code text/event-stream} answer. */
  private DecisionTap tapOfAStream() {
    RoutingDecision d = router.route("/v1/completions", Map.of(),
        "{\"model\":\"m\",\"prompt\":\"hi\",\"stream\":true}".getBytes(StandardCharsets.UTF_8));
    MockServerHttpResponse response = new MockServerHttpResponse();
    response.setStatusCode(HttpStatus.OK);
    response.getHeaders().setContentType(MediaType.TEXT_EVENT_STREAM);
    return new DecisionTap(response, d);
  }

  /** The last chunks of a stream: a token, the usage chunk, {@code data: [DONE]}. */
  private static Flux<DataBuffer> lastChunksOfAStream() {
    return Flux.just(
        sse("{\"choices\":[{\"text\":\"a\"}],\"usage\":null}"),
        sse("{\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":3}}"),
        sse("[DONE]"));
  }

  private void usageOfAStreamWrittenSlowly(boolean hidden) {
    completed.clear();
    DecisionTap tap = tapOfAStream();
    Flux<Publisher<DataBuffer>> body = lastChunksOfAStream()
        .<Publisher<DataBuffer>>map(b -> hidden ? Flux.just(b).hide() : Flux.just(b));
    // Reactor Netty's sendGroups: concatMap(chunk -> chunk, 32) into the channel, which asks for
    // more as it can write; a slow client: only the first buffer is asked for before the
    // replica's stream has ended (the later chunks wait in concatMap's prefetch queue)
    Flux<DataBuffer> written = Flux.from(tap.watchChunks(body)).concatMap(Flux::from, 32);
    BaseSubscriber<DataBuffer> channel = new BaseSubscriber<>() {
      @Override
      protected void hookOnSubscribe(Subscription s) {
        s.request(1);
      }

      @Override
      protected void hookOnNext(DataBuffer b) {
        DataBufferUtils.release(b);
      }
    };
    written.subscribe(channel);
    channel.request(Long.MAX_VALUE); // the client reads the rest
    assertThat(channel.isDisposed()).isTrue();
    assertThat(failed).isEmpty();
    assertThat(completed).as("hidden %s", hidden).containsExactly(new Usage(11, 0, 3));
    assertThat(inFlight()).isZero();
  }

  @Test
  void aReplicaBreakingOffAfterDoneWhileTheWriterStillHoldsTheLastChunksCompletesTheDecision() {
    DecisionTap tap = tapOfAStream();
    // the replica sends its last chunks and data: [DONE], then its connection breaks (no end of
    // the chunked body), while a slow client has been written only the first chunk
    Flux<Publisher<DataBuffer>> body = lastChunksOfAStream()
        .<Publisher<DataBuffer>>map(Flux::just)
        .concatWith(Flux.error(new java.io.IOException("Connection prematurely closed DURING response")));
    Flux<DataBuffer> written = Flux.from(tap.watchChunks(body)).concatMap(Flux::from, 32);
    List<String> client = new CopyOnWriteArrayList<>();
    List<Throwable> clientErrors = new CopyOnWriteArrayList<>();
    BaseSubscriber<DataBuffer> channel = new BaseSubscriber<>() {
      @Override
      protected void hookOnSubscribe(Subscription s) {
        s.request(1);
      }

      @Override
      protected void hookOnNext(DataBuffer b) {
        client.add(b.toString(StandardCharsets.UTF_8));
        DataBufferUtils.release(b);
      }

      @Override
      protected void hookOnError(Throwable t) {
        clientErrors.add(t);
      }
    };
    written.subscribe(channel);
    channel.request(Long.MAX_VALUE);
    assertThat(clientErrors).as("the client's answer ends cleanly").isEmpty();
    assertThat(client).hasSize(3).last().isEqualTo("data: [DONE]\n\n");
    assertThat(failed).isEmpty();
    assertThat(completed).containsExactly(new Usage(11, 0, 3));
    assertThat(inFlight()).isZero();
  }

  @Test
  void theUsageOfAGzipCompressedStreamIsRead() throws java.io.IOException {
    // a replica (or a proxy before it) that compresses its answers: the client gets the
    // compressed bytes as they came, the decision the usage inside them
    RoutingDecision d = router.route("/v1/completions", Map.of(),
        "{\"model\":\"m\",\"prompt\":\"hi\",\"stream\":true}".getBytes(StandardCharsets.UTF_8));
    MockServerHttpResponse response = new MockServerHttpResponse();
    response.setStatusCode(HttpStatus.OK);
    response.getHeaders().setContentType(MediaType.TEXT_EVENT_STREAM);
    response.getHeaders().set("Content-Encoding", "gzip");
    DecisionTap tap = new DecisionTap(response, d);
    String stream = "data: {\"choices\":[{\"text\":\"a\"}],\"usage\":null}\n\n"
        + "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":3}}\n\n"
        + "data: [DONE]\n\n";
    java.io.ByteArrayOutputStream packed = new java.io.ByteArrayOutputStream();
    try (java.util.zip.GZIPOutputStream z = new java.util.zip.GZIPOutputStream(packed, true)) {
      z.write(stream.getBytes(StandardCharsets.UTF_8));
    }
    byte[] bytes = packed.toByteArray();
    int third = bytes.length / 3;
    Flux<DataBuffer> body = Flux.just(
        DefaultDataBufferFactory.sharedInstance.wrap(java.util.Arrays.copyOfRange(bytes, 0, third)),
        DefaultDataBufferFactory.sharedInstance.wrap(
            java.util.Arrays.copyOfRange(bytes, third, 2 * third)),
        DefaultDataBufferFactory.sharedInstance.wrap(
            java.util.Arrays.copyOfRange(bytes, 2 * third, bytes.length)));
    java.io.ByteArrayOutputStream client = new java.io.ByteArrayOutputStream();
    tap.watch(body).doOnNext(b -> {
      byte[] c = new byte[b.readableByteCount()];
      b.read(c);
      client.writeBytes(c);
      DataBufferUtils.release(b);
    }).blockLast();
    assertThat(client.toByteArray()).isEqualTo(bytes);
    assertThat(failed).isEmpty();
    assertThat(completed).containsExactly(new Usage(11, 0, 3));
    assertThat(inFlight()).isZero();
  }
  /** Routes one request and writes the replica's answer {@code status} through the tap. */
  private void answer(HttpStatus status) {
    RoutingDecision d = router.route("/v1/completions", Map.of(),
        "{\"model\":\"m\",\"prompt\":\"hi\"}".getBytes(StandardCharsets.UTF_8));
    MockServerHttpResponse response = new MockServerHttpResponse();
    response.setStatusCode(status);
    response.getHeaders().setContentType(MediaType.APPLICATION_JSON);
    DecisionTap tap = new DecisionTap(response, d);
    tap.routed();
    tap.watch(Flux.just(DefaultDataBufferFactory.sharedInstance.wrap(
        "{\"error\":{}}".getBytes(StandardCharsets.UTF_8))))
        .doOnNext(DataBufferUtils::release).blockLast();
  }

  @Test
  void aClientErrorCompletesTheDecision() {
    // a 400 for a bad prompt is the client's fault: the replica served the request
    answer(HttpStatus.BAD_REQUEST);
    assertThat(failed).isEmpty();
    assertThat(completed).containsExactly(Usage.NONE);
    assertThat(inFlight()).isZero();
  }

  @Test
  void aTooManyRequestsAnswerFailsTheDecision() {
    // a 429 is the replica refusing under load, as a 503 is
    answer(HttpStatus.TOO_MANY_REQUESTS);
    assertThat(completed).isEmpty();
    assertThat(failed).singleElement().satisfies(
        e -> assertThat(e).hasMessage("upstream answered 429"));
    assertThat(inFlight()).isZero();
  }
}
