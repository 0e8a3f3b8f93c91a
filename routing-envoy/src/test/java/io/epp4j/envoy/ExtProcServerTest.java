package io.epp4j.envoy;

import static io.envoyproxy.envoy.extensions.filters.http.ext_proc.v3.ProcessingMode.BodySendMode.BUFFERED;
import static io.envoyproxy.envoy.extensions.filters.http.ext_proc.v3.ProcessingMode.BodySendMode.FULL_DUPLEX_STREAMED;
import static io.envoyproxy.envoy.extensions.filters.http.ext_proc.v3.ProcessingMode.BodySendMode.BUFFERED_PARTIAL;
import static io.envoyproxy.envoy.extensions.filters.http.ext_proc.v3.ProcessingMode.BodySendMode.NONE;
import static io.envoyproxy.envoy.extensions.filters.http.ext_proc.v3.ProcessingMode.BodySendMode.STREAMED;
import static io.epp4j.envoy.FakeEnvoy.completion;
import static io.epp4j.envoy.FakeEnvoy.modes;
import static io.epp4j.envoy.FakeEnvoy.postHeaders;
import static io.epp4j.envoy.FakeEnvoy.requestBody;
import static io.epp4j.envoy.FakeEnvoy.requestHeaders;
import static io.epp4j.envoy.FakeEnvoy.responseBody;
import static io.epp4j.envoy.FakeEnvoy.responseHeaders;
import static io.epp4j.envoy.FakeEnvoy.utf8;
import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.google.protobuf.ByteString;
import com.google.protobuf.Struct;
import com.google.protobuf.Value;
import io.envoyproxy.envoy.config.core.v3.HeaderMap;
import io.envoyproxy.envoy.config.core.v3.HeaderValue;
import io.envoyproxy.envoy.config.core.v3.HeaderValueOption;
import io.envoyproxy.envoy.config.core.v3.Metadata;
import io.envoyproxy.envoy.extensions.filters.http.ext_proc.v3.ProcessingMode.BodySendMode;
import io.envoyproxy.envoy.service.ext_proc.v3.CommonResponse;
import io.envoyproxy.envoy.service.ext_proc.v3.ImmediateResponse;
import io.envoyproxy.envoy.service.ext_proc.v3.ProcessingRequest;
import io.envoyproxy.envoy.service.ext_proc.v3.ProcessingResponse;
import io.envoyproxy.envoy.service.ext_proc.v3.ProtocolConfiguration;
import io.envoyproxy.envoy.service.ext_proc.v3.StreamedBodyResponse;
import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RequestListener;
import io.epp4j.api.Usage;
import io.epp4j.core.Router;
import io.epp4j.testkit.CapturedLog;
import io.grpc.ManagedChannel;
import io.grpc.Status;
import io.grpc.health.v1.HealthCheckRequest;
import io.grpc.health.v1.HealthCheckResponse;
import io.grpc.health.v1.HealthCheckResponse.ServingStatus;
import io.grpc.health.v1.HealthGrpc;
import io.grpc.inprocess.InProcessChannelBuilder;
import io.grpc.inprocess.InProcessServerBuilder;
import io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder;
import io.grpc.stub.StreamObserver;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

class ExtProcServerTest {
  static final String A = "10.0.0.1:8000";
  static final String B = "10.0.0.2:8000";
  static final String C = "10.0.0.3:8000";
  /** The default profile's queue scorer, with a fallback behind the primary. */
  static final String TWO_PICKS = """
      apiVersion: inference.networking.x-k8s.io/v1alpha1
      kind: EndpointPickerConfig
      plugins:
      - type: queue-scorer
      - type: max-score-picker
        parameters: {maxNumOfEndpoints: 2}
      schedulingProfiles:
      - name: default
        plugins:
        - pluginRef: queue-scorer
        - pluginRef: max-score-picker
      """;
  private static final ObjectMapper JSON = new ObjectMapper();

  /** The router's configuration for {@link #start}. */
  String yaml = TWO_PICKS;
  /** A further listener of the router {@link #start} builds. */
  RequestListener extraListener = new RequestListener() { };
  final Outcomes outcomes = new Outcomes();
  final List<AutoCloseable> toClose = new ArrayList<>();
  Router router;
  ExtProcServer server;
  ManagedChannel channel;

  /** What the router heard back, through its request listener. */
  static final class Outcomes implements RequestListener {
    final List<String> events = new CopyOnWriteArrayList<>();
    final LinkedBlockingQueue<Usage> completed = new LinkedBlockingQueue<>();
    final LinkedBlockingQueue<InferenceRequest> completedRequests = new LinkedBlockingQueue<>();
    final LinkedBlockingQueue<Throwable> failed = new LinkedBlockingQueue<>();

    @Override
    public void onFirstToken(InferenceRequest request, Endpoint endpoint) {
      events.add("first:" + endpoint.id());
    }

    @Override
    public void onComplete(InferenceRequest request, Endpoint endpoint, Usage usage) {
      events.add("complete:" + endpoint.id());
      completedRequests.add(request);
      completed.add(usage);
    }

    @Override
    public void onFailure(InferenceRequest request, Endpoint endpoint, Throwable cause) {
      events.add("failure:" + endpoint.id());
      failed.add(cause);
    }
  }

  void start(List<String> endpoints) throws Exception {
    start(endpoints, ExtProcServer.DEFAULT_MAX_BODY_BYTES, null);
  }

  void start(List<String> endpoints, int maxBody,
      java.util.function.@org.jspecify.annotations.Nullable Consumer<ExtProcServer.Builder> custom) throws Exception {
    router = Router.builder()
        .endpoints(endpoints.stream().map(Endpoint::parse).toList())
        .configYaml(yaml, "two-picks")
        .listener(outcomes)
        .listener(extraListener)
        .build();
    String name = InProcessServerBuilder.generateName();
    ExtProcServer.Builder b = ExtProcServer.builder(router).maxBodyBytes(maxBody)
        .drainTimeout(Duration.ofSeconds(2))
        .transport(InProcessServerBuilder.forName(name));
    if (custom != null) {
      custom.accept(b);
    }
    server = b.start();
    channel = InProcessChannelBuilder.forName(name).build();
  }

  @AfterEach
  void tearDown() throws Exception {
    for (AutoCloseable c : toClose) {
      c.close();
    }
    if (channel != null) {
      channel.shutdownNow();
      channel.awaitTermination(5, TimeUnit.SECONDS);
    }
    if (server != null) {
      server.close();
    }
    if (router != null) {
      router.close();
    }
  }

  // ------------------------------------------------------------------------------ the pick

  @Test
  void theAnswerCarriesTheHeadersTheRoutingPluginsAskForAndOnlyThose() throws Exception {
    yaml = """
        plugins:
        - type: session-affinity-scorer
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: session-affinity-scorer
          - pluginRef: max-score-picker
        """;
    start(List.of(A));
    FakeEnvoy envoy = routedFullDuplex(completion("hello"));
    envoy.send(responseHeaders(200, "application/json", false));
    io.envoyproxy.envoy.config.core.v3.HeaderValueOption set = envoy.next().getResponseHeaders()
        .getResponse().getHeaderMutation().getSetHeaders(0);
    assertThat(set.getHeader().getKey()).isEqualTo("x-session-token");
    assertThat(utf8(set.getHeader().getRawValue())).isEqualTo(java.util.Base64.getEncoder()
        .encodeToString(A.getBytes(java.nio.charset.StandardCharsets.UTF_8)));
    envoy.halfClose();
  }

  @Test
  void theRequestHeadersThePluginsAskForAreSetAndRemovedWithThePick() throws Exception {
    extraListener = new RequestListener() {
      @Override
      public void afterRouting(InferenceRequest request, io.epp4j.api.CycleState state,
          io.epp4j.api.RoutingDecision decision) {
        decision.setRequestHeader("x-kv-cache-source-host-port", B);
        decision.setRequestHeader("x-drop-me", null);
      }
    };
    start(List.of(A));
    FakeEnvoy envoy = FakeEnvoy.open(channel);
    envoy.send(postHeaders(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED)));
    envoy.send(requestBody(completion("hello"), true));
    io.envoyproxy.envoy.service.ext_proc.v3.HeaderMutation m = envoy.next().getRequestHeaders()
        .getResponse().getHeaderMutation();
    assertThat(m.getRemoveHeadersList()).contains("x-drop-me");
    assertThat(m.getSetHeadersList()).anySatisfy(h -> {
      assertThat(h.getHeader().getKey()).isEqualTo("x-kv-cache-source-host-port");
      assertThat(utf8(h.getHeader().getRawValue())).isEqualTo(B);
    });
    envoy.halfClose();
  }

  @Test
  void requestHeaderAsksEnvoyWouldRefuseAreLeftOutAndTheRequestIsRoutedWithTheRest()
      throws Exception {
    String secret = "my-bank-password-is-hunter2";
    extraListener = new RequestListener() {
      @Override
      public void afterRouting(InferenceRequest request, io.epp4j.api.CycleState state,
          io.epp4j.api.RoutingDecision decision) {
        decision.setRequestHeader("x-tag", secret + "\r\nx-injected: 1");
        decision.setRequestHeader("x-nul", "a\u0000b");
        decision.setRequestHeader("x tag", "fine");
        decision.setRequestHeader("x-drop\nme", null);
        decision.setRequestHeader("x-kept", "fine\tvalue \u00e9");
        decision.setRequestHeader("x-dropped", null);
      }
    };
    try (CapturedLog logged = CapturedLog.of("io.epp4j")) {
      start(List.of(A));
      for (int i = 0; i < 2; i++) {
        FakeEnvoy envoy = FakeEnvoy.open(channel);
        envoy.send(postHeaders(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED)));
        envoy.send(requestBody(completion("hello"), true));
        io.envoyproxy.envoy.service.ext_proc.v3.HeaderMutation m = envoy.next()
            .getRequestHeaders().getResponse().getHeaderMutation();
        // Envoy applies the mutation, so the request goes on to the pick instead of a 500
        assertThat(EnvoyMutationCheck.refusals(m)).isEmpty();
        assertThat(m.getSetHeadersList()).extracting(h -> h.getHeader().getKey())
            .containsExactly(io.epp4j.api.RoutingDecision.DESTINATION_HEADER, "content-length",
                "x-kept");
        assertThat(utf8(m.getSetHeaders(0).getHeader().getRawValue())).isEqualTo(A);
        assertThat(utf8(m.getSetHeaders(2).getHeader().getRawValue()))
            .isEqualTo("fine\tvalue \u00e9");
        assertThat(m.getRemoveHeadersList()).containsExactly("x-prefiller-host-port",
            "x-dropped");
        assertThat(envoy.next().hasRequestBody()).isTrue();
        envoy.send(responseHeaders(200, "application/json", false));
        envoy.next();
        envoy.send(responseBody("{}", true));
        envoy.next();
        envoy.halfClose();
        assertThat(envoy.awaitClosed().getCode()).isEqualTo(Status.Code.OK);
      }
      assertThat(outcomes.completed).hasSize(2);
      assertThat(server.refusedHeaders()).isEqualTo(8);
      // one record per header and minute, naming the header, never its value
      List<String> records = logged.records().stream()
          .filter(r -> r.contains("routing plugin asked")).toList();
      assertThat(records).hasSize(4);
      assertThat(logged.text()).doesNotContain(secret).doesNotContain("x-injected")
          .contains("'x-tag' has a value holding U+000D")
          .contains("'x-drop\\u000Ame' is not a valid header name (U+000A at index 6)");
    }
  }

  @Test
  void responseHeaderAsksEnvoyWouldRefuseAreLeftOutAndTheAnswerGoesThrough() throws Exception {
    extraListener = new RequestListener() {
      @Override
      public void afterRouting(InferenceRequest request, io.epp4j.api.CycleState state,
          io.epp4j.api.RoutingDecision decision) {
        decision.setResponseHeader("x-bad", d -> "token\n");
        decision.setResponseHeader("x-del", d -> "a\u007fb");
        decision.setResponseHeader("x-good", d -> "ok");
      }
    };
    try (CapturedLog logged = CapturedLog.of("io.epp4j")) {
      start(List.of(A));
      FakeEnvoy envoy = routedFullDuplex(completion("hello"));
      envoy.send(responseHeaders(200, "application/json", false));
      io.envoyproxy.envoy.service.ext_proc.v3.HeaderMutation m = envoy.next()
          .getResponseHeaders().getResponse().getHeaderMutation();
      // Envoy would have replaced the endpoint's answer with its 500
      assertThat(EnvoyMutationCheck.refusals(m)).isEmpty();
      assertThat(m.getSetHeadersList()).singleElement().satisfies(h -> {
        assertThat(h.getHeader().getKey()).isEqualTo("x-good");
        assertThat(utf8(h.getHeader().getRawValue())).isEqualTo("ok");
      });
      envoy.send(responseBody("{\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}",
          true));
      envoy.next();
      assertThat(outcomes.completed.poll(5, TimeUnit.SECONDS)).isEqualTo(new Usage(3, 0, 1));
      envoy.halfClose();
      assertThat(server.refusedHeaders()).isEqualTo(2);
      assertThat(logged.text()).contains("a response header a routing plugin asked to set: "
          + "'x-bad' has a value holding U+000A");
    }
  }

  @Test
  void pluginAsksForPseudoHeadersHostOrTheBodysFramingAreLeftOutOfBothMutations()
      throws Exception {
    extraListener = new RequestListener() {
      @Override
      public void afterRouting(InferenceRequest request, io.epp4j.api.CycleState state,
          io.epp4j.api.RoutingDecision decision) {
        decision.setRequestHeader(":path", "/v1/other");
        decision.setRequestHeader(":authority", "elsewhere");
        decision.setRequestHeader("Host", "elsewhere");
        decision.setRequestHeader("content-length", "1");
        decision.setRequestHeader(":method", null);
        decision.setRequestHeader("transfer-encoding", null);
        decision.setRequestHeader("x-kept", "yes");
        decision.setResponseHeader(":status", d -> "200");
        decision.setResponseHeader("content-length", d -> "5");
        decision.setResponseHeader("x-kept", d -> "yes");
      }
    };
    try (CapturedLog logged = CapturedLog.of("io.epp4j")) {
      start(List.of(A));
      FakeEnvoy envoy = FakeEnvoy.open(channel);
      envoy.send(postHeaders(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED)));
      String body = completion("hello");
      envoy.send(requestBody(body, true));
      io.envoyproxy.envoy.service.ext_proc.v3.HeaderMutation m = envoy.next()
          .getRequestHeaders().getResponse().getHeaderMutation();
      // the request goes to the pick's path and authority, framed by its own body's length
      assertThat(m.getSetHeadersList()).extracting(h -> h.getHeader().getKey() + "="
          + utf8(h.getHeader().getRawValue())).containsExactly(
              io.epp4j.api.RoutingDecision.DESTINATION_HEADER + "=" + A,
              "content-length=" + body.length(), "x-kept=yes");
      assertThat(m.getRemoveHeadersList()).containsExactly("x-prefiller-host-port");
      envoy.next();
      envoy.send(responseHeaders(502, "application/json", false));
      io.envoyproxy.envoy.service.ext_proc.v3.HeaderMutation answer = envoy.next()
          .getResponseHeaders().getResponse().getHeaderMutation();
      // the client sees the endpoint's status, which the decision was judged by
      assertThat(answer.getSetHeadersList()).extracting(h -> h.getHeader().getKey())
          .containsExactly("x-kept");
      envoy.send(responseBody("{}", true));
      envoy.next();
      envoy.halfClose();
      assertThat(outcomes.failed.poll(5, TimeUnit.SECONDS)).isNotNull();
      assertThat(server.refusedHeaders()).isEqualTo(8);
      assertThat(logged.text())
          .contains("a request header a routing plugin asked to set: ':path' is a pseudo-header")
          .contains("'host' is the request's authority")
          .contains("a request header a routing plugin asked to set: 'content-length' frames"
              + " the body")
          .contains("a response header a routing plugin asked to set: ':status' is a"
              + " pseudo-header");
    }
  }

  @Test
  void anEnvoySendingHeaderValuesInValueGetsItsAnswersValuesInValueWhereItReadsThem()
      throws Exception {
    extraListener = new RequestListener() {
      @Override
      public void afterRouting(InferenceRequest request, io.epp4j.api.CycleState state,
          io.epp4j.api.RoutingDecision decision) {
        decision.setRequestHeader("x-kv-cache-source-host-port", B);
        decision.setResponseHeader("x-session-token", d -> "t\u00e9");
      }
    };
    start(List.of(A));
    FakeEnvoy envoy = FakeEnvoy.open(channel);
    // send_header_raw_value off: Envoy writes every value to value, and reads a mutation's
    // values from value, so a value in raw_value alone would set the header empty
    envoy.send(inValueFields(postHeaders(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED))));
    String body = completion("hello");
    envoy.send(requestBody(body, true));
    io.envoyproxy.envoy.service.ext_proc.v3.HeaderMutation m = envoy.next().getRequestHeaders()
        .getResponse().getHeaderMutation();
    assertThat(EnvoyMutationCheck.refusals(m)).isEmpty();
    assertThat(m.getSetHeadersList()).extracting(h -> h.getHeader().getKey() + "="
        + h.getHeader().getValue() + "|" + utf8(h.getHeader().getRawValue())).containsExactly(
            io.epp4j.api.RoutingDecision.DESTINATION_HEADER + "=" + A + "|",
            "content-length=" + body.length() + "|", "x-kv-cache-source-host-port=" + B + "|");
    envoy.next();
    envoy.send(responseHeaders(200, "application/json", false));
    HeaderValue token = envoy.next().getResponseHeaders().getResponse().getHeaderMutation()
        .getSetHeaders(0).getHeader();
    assertThat(token.getValue()).isEqualTo("t\u00e9");
    assertThat(token.getRawValue()).isEmpty();
    envoy.halfClose();

    // and its local replies' headers
    FakeEnvoy refused = FakeEnvoy.open(channel);
    refused.send(inValueFields(postHeaders(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED))));
    refused.send(requestBody("{\"model\":\"m\",\"prompt\":\"x\" oops", true));
    ImmediateResponse r = refused.next().getImmediateResponse();
    assertThat(r.getStatus().getCodeValue()).isEqualTo(400);
    assertThat(r.getHeaders().getSetHeadersList()).singleElement().satisfies(h -> {
      assertThat(h.getHeader().getKey()).isEqualTo("content-type");
      assertThat(h.getHeader().getValue()).isEqualTo("application/json");
      assertThat(h.getHeader().getRawValue()).isEmpty();
    });
  }

  /** {@code r} as an Envoy with send_header_raw_value off sends it: values in value. */
  static ProcessingRequest inValueFields(ProcessingRequest r) {
    HeaderMap.Builder h = HeaderMap.newBuilder();
    for (HeaderValue v : r.getRequestHeaders().getHeaders().getHeadersList()) {
      h.addHeaders(HeaderValue.newBuilder().setKey(v.getKey())
          .setValue(v.getRawValue().toStringUtf8()));
    }
    return r.toBuilder().setRequestHeaders(r.getRequestHeaders().toBuilder().setHeaders(h))
        .build();
  }

  @Test
  void aPluginCannotSendTheRequestElsewhereThanThePickThroughTheDestinationHeaders()
      throws Exception {
    extraListener = new RequestListener() {
      @Override
      public void afterRouting(InferenceRequest request, io.epp4j.api.CycleState state,
          io.epp4j.api.RoutingDecision decision) {
        decision.setRequestHeader(io.epp4j.api.RoutingDecision.DESTINATION_HEADER, B);
        decision.setRequestHeader("X-Prefiller-Host-Port", B);
      }
    };
    start(List.of(A));
    FakeEnvoy envoy = FakeEnvoy.open(channel);
    envoy.send(postHeaders(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED)));
    envoy.send(requestBody(completion("hello"), true));
    io.envoyproxy.envoy.service.ext_proc.v3.HeaderMutation m = envoy.next().getRequestHeaders()
        .getResponse().getHeaderMutation();
    // the header, the dynamic metadata and the router's count all name the pick, A
    assertThat(m.getSetHeadersList())
        .filteredOn(h -> h.getHeader().getKey().equalsIgnoreCase(
            io.epp4j.api.RoutingDecision.DESTINATION_HEADER)
            || h.getHeader().getKey().equalsIgnoreCase("x-prefiller-host-port"))
        .singleElement().satisfies(h -> {
          assertThat(h.getHeader().getKey()).isEqualTo(
              io.epp4j.api.RoutingDecision.DESTINATION_HEADER);
          assertThat(utf8(h.getHeader().getRawValue())).isEqualTo(A);
        });
    assertThat(m.getRemoveHeadersList()).containsExactly("x-prefiller-host-port");
    assertThat(inFlightOn(A)).isEqualTo(1);
    envoy.halfClose();
  }

  @Test
  void aPluginExceptionQuotingThePromptIsLoggedWithItsTypeAndFramesButNotItsMessage()
      throws Exception {
    String secret = "my-bank-password-is-hunter2";
    extraListener = new RequestListener() {
      @Override
      public void afterRouting(InferenceRequest request, io.epp4j.api.CycleState state,
          io.epp4j.api.RoutingDecision decision) {
        String prompt = String.valueOf(request.prompt());
        decision.setRequestHeaderFor("x-broken", d -> {
          IllegalStateException e = new IllegalStateException("cannot tag '" + prompt + "'",
              new IllegalArgumentException("bad prompt " + prompt));
          e.addSuppressed(new UnsupportedOperationException(prompt));
          throw e;
        });
      }
    };
    // everything the log would show, formatted as a log file would: messages, causes, frames
    try (CapturedLog logged = CapturedLog.of("io.epp4j")) {
      start(List.of(A));
      FakeEnvoy envoy = FakeEnvoy.open(channel);
      envoy.send(postHeaders(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED)));
      envoy.send(requestBody(completion("please remember " + secret), true));
      Status s = envoy.awaitClosed();
      assertThat(s.getCode()).isEqualTo(Status.Code.INTERNAL);
      assertThat(s.getDescription()).contains("IllegalStateException").doesNotContain(secret);
      await(() -> logged.records().stream().anyMatch(l -> l.contains("ext_proc stream failed")));
      String all = logged.text();
      assertThat(all).doesNotContain(secret)
          .contains("java.lang.IllegalStateException")
          .contains("Caused by: java.lang.IllegalArgumentException")
          .contains("Suppressed: java.lang.UnsupportedOperationException")
          // the frame that threw, for the operator to find the bug
          .contains("ExtProcServerTest");
    }
  }

  @Test
  void aResponseHeaderAskThatThrowsLetsTheAnswerThroughWithoutItAndLogsNoPrompt()
      throws Exception {
    String secret = "my-bank-password-is-hunter2";
    extraListener = new RequestListener() {
      @Override
      public void afterRouting(InferenceRequest request, io.epp4j.api.CycleState state,
          io.epp4j.api.RoutingDecision decision) {
        String prompt = String.valueOf(request.prompt());
        decision.setResponseHeader("x-broken", d -> {
          throw new IllegalStateException("cannot tag '" + prompt + "'");
        });
      }
    };
    try (CapturedLog logged = CapturedLog.of("io.epp4j")) {
      start(List.of(A));
      FakeEnvoy envoy = routedFullDuplex(completion("please remember " + secret));
      envoy.send(responseHeaders(200, "application/json", false));
      // the endpoint served the request: its answer goes on, without the plugin's header,
      // rather than the stream failing and Envoy replying 500 in its place
      ProcessingResponse headers = envoy.next();
      assertThat(headers.hasResponseHeaders()).isTrue();
      assertThat(headers.getResponseHeaders().hasResponse()).isFalse();
      envoy.send(responseBody("{\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}",
          true));
      assertThat(envoy.next().hasResponseBody()).isTrue();
      assertThat(outcomes.completed.poll(5, TimeUnit.SECONDS)).isEqualTo(new Usage(3, 0, 1));
      envoy.halfClose();
      assertThat(envoy.awaitClosed().getCode()).isEqualTo(Status.Code.OK);
      assertThat(outcomes.failed).isEmpty();
      assertThat(logged.text()).contains("java.lang.IllegalStateException")
          .doesNotContain(secret);
    }
  }

  @Test
  void withoutSuchPluginsTheAnswersHeadersPassUnchanged() throws Exception {
    start(List.of(A));
    FakeEnvoy envoy = routedFullDuplex(completion("hello"));
    envoy.send(responseHeaders(200, "application/json", false));
    assertThat(envoy.next().getResponseHeaders().hasResponse()).isFalse();
    envoy.halfClose();
  }

  @Test
  void fullDuplexWaitsForTheWholeBodyThenSendsThePickAndTheBodyBack() throws Exception {
    start(List.of(A, B, C));
    FakeEnvoy envoy = FakeEnvoy.open(channel);
    String body = completion("tell me a story");
    envoy.send(postHeaders(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED)));
    envoy.send(requestBody(body.substring(0, 10), false));
    envoy.expectNothingFor(200); // the processor owns the body: nothing until it is whole
    envoy.send(requestBody(body.substring(10), true));

    ProcessingResponse headers = envoy.next();
    assertThat(headers.hasRequestHeaders()).isTrue();
    CommonResponse common = headers.getRequestHeaders().getResponse();
    String header = destinationHeader(common);
    assertThat(header.split(",")).hasSize(2).doesNotHaveDuplicates()
        .allSatisfy(id -> assertThat(List.of(A, B, C)).contains(id));
    assertThat(metadataDestination(headers)).isEqualTo(header);
    assertThat(common.getClearRouteCache()).isTrue();

    ProcessingResponse echoed = envoy.next();
    StreamedBodyResponse piece = echoed.getRequestBody().getResponse().getBodyMutation()
        .getStreamedResponse();
    assertThat(utf8(piece.getBody())).isEqualTo(body);
    assertThat(piece.getEndOfStream()).isTrue();
    assertThat(inFlightOn(header.split(",")[0])).isEqualTo(1);
    assertThat(inFlight()).isEqualTo(1); // the fallback is listed, not counted
  }

  /**
   * In FULL_DUPLEX_STREAMED and STREAMED body modes Envoy removes the request's content-length
   * when it sends the headers to the processor, since the processor could change the body. The
   * pick came without it, so a replica behind HTTP/1.1 got every request with chunked transfer
   * encoding instead of the length the client sent; upstream's endpoint picker sets it again.
   * The body goes on unchanged, so its length in bytes is set with the pick; not with trailers
   * (chunked on HTTP/1.1), nor in BUFFERED mode (Envoy keeps the header) or without a body.
   */
  @Test
  void theBodysLengthEnvoyRemovedIsSetAgainWithThePick() throws Exception {
    start(List.of(A));
    String body = completion("caf\u00e9 \u00fcber na\u00efve"); // more bytes than characters
    String bytes = Integer.toString(body.getBytes(java.nio.charset.StandardCharsets.UTF_8).length);
    assertThat(Integer.parseInt(bytes)).isGreaterThan(body.length());

    FakeEnvoy duplex = FakeEnvoy.open(channel);
    duplex.send(postHeaders(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED)));
    duplex.send(requestBody(body.substring(0, 9), false));
    duplex.send(requestBody(body.substring(9), true));
    CommonResponse d = duplex.next().getRequestHeaders().getResponse();
    assertThat(destinationHeader(d)).isEqualTo(A);
    assertThat(setHeader(d, "content-length")).isEqualTo(bytes);
    duplex.halfClose();

    FakeEnvoy streamed = FakeEnvoy.open(channel);
    streamed.send(requestHeaders("POST", "/v1/completions", false, Map.of())
        .setProtocolConfig(modes(STREAMED, STREAMED).toBuilder()
            .setSendBodyWithoutWaitingForHeaderResponse(true)).build());
    streamed.send(requestBody(body.substring(0, 9), false));
    streamed.send(requestBody(body.substring(9), true));
    assertThat(setHeader(streamed.next().getRequestHeaders().getResponse(), "content-length"))
        .isEqualTo(bytes);
    streamed.halfClose();

    FakeEnvoy trailers = FakeEnvoy.open(channel);
    trailers.send(postHeaders(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED)));
    trailers.send(requestBody(body, false));
    trailers.send(FakeEnvoy.requestTrailers());
    CommonResponse t = trailers.next().getRequestHeaders().getResponse();
    assertThat(destinationHeader(t)).isEqualTo(A);
    assertThat(setHeader(t, "content-length")).isNull();
    trailers.halfClose();

    FakeEnvoy buffered = FakeEnvoy.open(channel);
    buffered.send(postHeaders(modes(BUFFERED, FULL_DUPLEX_STREAMED)));
    buffered.next(); // the headers, answered at once
    buffered.send(requestBody(body, true));
    CommonResponse b = buffered.next().getRequestBody().getResponse();
    assertThat(destinationHeader(b)).isEqualTo(A);
    assertThat(setHeader(b, "content-length")).isNull();
    buffered.halfClose();

    FakeEnvoy bodiless = FakeEnvoy.open(channel);
    bodiless.send(requestHeaders("GET", "/v1/models", true, Map.of())
        .setProtocolConfig(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED)).build());
    CommonResponse g = bodiless.next().getRequestHeaders().getResponse();
    assertThat(destinationHeader(g)).isEqualTo(A);
    assertThat(setHeader(g, "content-length")).isNull();
    bodiless.halfClose();
  }

  @Test
  void anAnswerNotStreamedPastInFlightMaxAgeKeepsCountingWhileItsStreamIsOpen() throws Exception {
    // a completion with stream: false shows Envoy nothing until it is done: no chunk renews its
    // decision, so the router released it at inFlightMaxAge while the replica still worked on
    // it. The server's timer renews the decisions of the open streams.
    long[] now = {0};
    router = Router.builder().endpoints(List.of(Endpoint.parse(A)))
        .ticker(() -> now[0]).inFlightMaxAge(Duration.ofMinutes(10)).listener(outcomes).build();
    String name = InProcessServerBuilder.generateName();
    server = ExtProcServer.builder(router).drainTimeout(Duration.ofSeconds(2))
        .transport(InProcessServerBuilder.forName(name)).start();
    channel = InProcessChannelBuilder.forName(name).build();
    FakeEnvoy envoy = routedFullDuplex(completion("think hard"));
    for (int minute = 1; minute <= 30; minute++) {
      now[0] += Duration.ofMinutes(1).toNanos();
      if (minute % 2 == 0) {
        server.renewOpenStreams(); // what the timer does every quarter of inFlightMaxAge
      }
      io.epp4j.api.RoutingDecision other = router.route(InferenceRequest.builder().model("m")
          .prompt("x").build());
      assertThat(inFlightOn(A)).as("minute %d", minute).isEqualTo(2);
      other.onComplete(Usage.NONE);
    }
    envoy.send(responseHeaders(200, "application/json", false));
    envoy.next();
    envoy.send(responseBody("{\"choices\":[{\"text\":\" done\"}]}", true));
    envoy.next();
    assertThat(outcomes.completed.poll(5, TimeUnit.SECONDS)).isNotNull();
    assertThat(inFlightOn(A)).isZero();
    envoy.halfClose();
    assertThat(envoy.awaitClosed().isOk()).isTrue();
    // a stream that ended renews nothing: a decision it finished stays finished
    server.renewOpenStreams();
    assertThat(inFlightOn(A)).isZero();
  }

  @Test
  void anAnswerStillStreamingPastInFlightMaxAgeKeepsCountingOnItsEndpoint() throws Exception {
    // inFlightMaxAge is the net for decisions nobody finishes; a generation that streams for
    // longer (a long reasoning answer) is not one, and the server sees its chunks go by, but it
    // never said so (RoutingDecision.onActivity): its request was released half-way through and
    // its replica looked idler than it was for the rest of the answer
    long[] now = {0};
    router = Router.builder().endpoints(List.of(Endpoint.parse(A)))
        .ticker(() -> now[0]).inFlightMaxAge(Duration.ofMinutes(10)).listener(outcomes).build();
    String name = InProcessServerBuilder.generateName();
    server = ExtProcServer.builder(router).drainTimeout(Duration.ofSeconds(2))
        .transport(InProcessServerBuilder.forName(name)).start();
    channel = InProcessChannelBuilder.forName(name).build();
    FakeEnvoy envoy = routedFullDuplex(completion("think hard"));
    envoy.send(responseHeaders(200, "text/event-stream", false));
    envoy.next();
    for (int minute = 1; minute <= 30; minute++) {
      now[0] += Duration.ofMinutes(1).toNanos();
      envoy.send(responseBody("data: {\"choices\":[{\"text\":\" hm\"}]}\n\n", false));
      envoy.next();
      // another request's route sweeps the leases older than inFlightMaxAge
      io.epp4j.api.RoutingDecision other = router.route(InferenceRequest.builder().model("m")
          .prompt("x").build());
      assertThat(inFlightOn(A)).as("minute %d", minute).isEqualTo(2);
      other.onComplete(Usage.NONE);
    }
    envoy.send(responseBody("data: [DONE]\n\n", true));
    envoy.next();
    assertThat(outcomes.completed.poll(5, TimeUnit.SECONDS)).isNotNull();
    assertThat(inFlightOn(A)).isZero();
    envoy.halfClose();
    assertThat(envoy.awaitClosed().isOk()).isTrue();
  }

  @Test
  void aHashKeyFromTheQueryStringIsFoundInTheRequestPath() throws Exception {
    // hashOn / sessionKeyFrom query:<name> read the :path header, which the server kept to
    // itself without its query: every request hashed as one without a key (at random), so
    // stickiness by a query parameter did nothing behind Envoy
    String ring = """
        apiVersion: inference.networking.x-k8s.io/v1alpha1
        kind: EndpointPickerConfig
        plugins:
        - type: ring-hash-picker
          parameters: {hashOn: "query:user"}
        schedulingProfiles:
        - name: default
          plugins: [{pluginRef: ring-hash-picker}]
        """;
    router = Router.builder().endpoints(List.of(A, B, C).stream().map(Endpoint::parse).toList())
        .configYaml(ring, "ring").build();
    String name = InProcessServerBuilder.generateName();
    server = ExtProcServer.builder(router).drainTimeout(Duration.ofSeconds(2))
        .transport(InProcessServerBuilder.forName(name)).start();
    channel = InProcessChannelBuilder.forName(name).build();
    String path = "/v1/completions?api-version=1&user=alice";
    // where the ring puts alice: the picker's own answer for a request that carries the key
    io.epp4j.api.RoutingDecision direct = router.route(InferenceRequest.builder().model("m")
        .prompt("hi").headers(Map.of(":path", path)).build());
    String home = direct.primary().id();
    direct.onComplete(Usage.NONE);
    for (int i = 0; i < 20; i++) {
      FakeEnvoy envoy = FakeEnvoy.open(channel);
      envoy.send(requestHeaders("POST", path, false, Map.of())
          .setProtocolConfig(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED)).build());
      envoy.send(requestBody(completion("request " + i), true));
      assertThat(destinationHeader(envoy.next().getRequestHeaders().getResponse()))
          .as("request %d", i).isEqualTo(home);
      envoy.next();
      envoy.send(responseHeaders(200, "application/json", true));
      envoy.next();
      envoy.halfClose();
      assertThat(envoy.awaitClosed().isOk()).isTrue();
    }
  }

  @Test
  void aPrefillPickIsNamedToTheDecodeServerAndAClientsOwnPrefillerIsDropped() throws Exception {
    // prefill/decode disaggregation: the decode server's sidecar learns where to prefill from
    // x-prefiller-host-port, which only the gateway can write from the decision; the server
    // wrote none, so every request was prefilled where it was decoded while the router counted
    // it on the prefill pick too, and a client's own header went through
    String pd = """
        apiVersion: inference.networking.x-k8s.io/v1alpha1
        kind: EndpointPickerConfig
        plugins:
        - type: pd-profile-handler
        - type: prefill-header-handler
        - type: queue-scorer
        - type: max-score-picker
        schedulingProfiles:
        - name: decode
          plugins: [{pluginRef: queue-scorer}, {pluginRef: max-score-picker}]
        - name: prefill
          plugins: [{pluginRef: queue-scorer}, {pluginRef: max-score-picker}]
        """;
    List<io.epp4j.api.RoutingDecision> decisions = new CopyOnWriteArrayList<>();
    router = Router.builder().endpoints(List.of(A, B, C).stream().map(Endpoint::parse).toList())
        .configYaml(pd, "pd").listener(new RequestListener() {
          @Override
          public void afterRouting(InferenceRequest request, io.epp4j.api.CycleState state,
              io.epp4j.api.RoutingDecision decision) {
            decisions.add(decision);
          }
        }).build();
    String name = InProcessServerBuilder.generateName();
    server = ExtProcServer.builder(router).drainTimeout(Duration.ofSeconds(2))
        .transport(InProcessServerBuilder.forName(name)).start();
    channel = InProcessChannelBuilder.forName(name).build();

    FakeEnvoy envoy = FakeEnvoy.open(channel);
    envoy.send(requestHeaders("POST", "/v1/completions", false,
        Map.of(io.epp4j.scorers.PdProfileHandler.PREFILLER_HEADER, "10.9.9.9:1"))
        .setProtocolConfig(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED)).build());
    envoy.send(requestBody(completion("tell me a story"), true));
    ProcessingResponse headers = envoy.next();
    assertThat(decisions).hasSize(1);
    Endpoint prefill = io.epp4j.scorers.PdProfileHandler.prefillEndpoint(decisions.get(0));
    assertThat(prefill).isNotNull();
    List<HeaderValueOption> set = headers.getRequestHeaders().getResponse().getHeaderMutation()
        .getSetHeadersList();
    assertThat(set).filteredOn(o -> o.getHeader().getKey()
        .equals(io.epp4j.scorers.PdProfileHandler.PREFILLER_HEADER))
        .singleElement().satisfies(o -> {
          assertThat(utf8(o.getHeader().getRawValue())).isEqualTo(prefill.id());
          assertThat(o.getAppendAction())
              .isEqualTo(HeaderValueOption.HeaderAppendAction.OVERWRITE_IF_EXISTS_OR_ADD);
        });
    envoy.next(); // the body, sent back
    envoy.send(responseHeaders(200, "application/json", true));
    envoy.next();
    envoy.halfClose();
    assertThat(envoy.awaitClosed().isOk()).isTrue();

    // without a prefill pick the client's header must not reach the decode server either
    String single = TWO_PICKS;
    router.close();
    router = Router.builder().endpoints(List.of(Endpoint.parse(A))).configYaml(single, "one")
        .build();
    server.close();
    channel.shutdownNow();
    String other = InProcessServerBuilder.generateName();
    server = ExtProcServer.builder(router).drainTimeout(Duration.ofSeconds(2))
        .transport(InProcessServerBuilder.forName(other)).start();
    channel = InProcessChannelBuilder.forName(other).build();
    FakeEnvoy plain = FakeEnvoy.open(channel);
    plain.send(requestHeaders("POST", "/v1/completions", false,
        Map.of(io.epp4j.scorers.PdProfileHandler.PREFILLER_HEADER, "10.9.9.9:1"))
        .setProtocolConfig(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED)).build());
    plain.send(requestBody(completion("tell me a story"), true));
    CommonResponse routed = plain.next().getRequestHeaders().getResponse();
    assertThat(destinationHeader(routed)).isEqualTo(A);
    assertThat(routed.getHeaderMutation().getRemoveHeadersList())
        .contains(io.epp4j.scorers.PdProfileHandler.PREFILLER_HEADER);
    plain.next();
    plain.send(responseHeaders(200, "application/json", true));
    plain.next();
    plain.halfClose();
    assertThat(plain.awaitClosed().isOk()).isTrue();
  }

  @Test
  void aStreamedAnswerReportsFirstTokenAndItsUsageChunkThenNothingStaysInFlight()
      throws Exception {
    start(List.of(A, B));
    FakeEnvoy envoy = routedFullDuplex(completion("hello"));
    envoy.send(responseHeaders(200, "text/event-stream", false));
    assertThat(envoy.next().hasResponseHeaders()).isTrue();
    String sse = "data: {\"choices\":[{\"text\":\" lorem\"}]}\n\n"
        + "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":3,"
        + "\"prompt_tokens_details\":{\"cached_tokens\":8}}}\n\ndata: [DONE]\n\n";
    int[] cuts = {0, 17, 60, 61, 120, sse.length()};
    for (int i = 0; i + 1 < cuts.length; i++) {
      boolean last = i + 2 == cuts.length;
      envoy.send(responseBody(sse.substring(cuts[i], cuts[i + 1]), last));
      StreamedBodyResponse back = envoy.next().getResponseBody().getResponse().getBodyMutation()
          .getStreamedResponse();
      assertThat(utf8(back.getBody())).isEqualTo(sse.substring(cuts[i], cuts[i + 1]));
      assertThat(back.getEndOfStream()).isEqualTo(last);
    }
    assertThat(outcomes.completed.poll(5, TimeUnit.SECONDS)).isEqualTo(new Usage(12, 8, 3));
    assertThat(outcomes.events).hasSize(2);
    assertThat(outcomes.events.get(0)).startsWith("first:");
    assertThat(outcomes.events.get(1)).startsWith("complete:");
    assertThat(inFlight()).isZero();
    envoy.halfClose();
    assertThat(envoy.awaitClosed().getCode()).isEqualTo(Status.Code.OK);
    assertThat(outcomes.failed).isEmpty();
    await(() -> server.openStreams() == 0);
  }

  @Test
  void theUsageOfAGzipCompressedAnswerIsRead() throws Exception {
    // Envoy hands ext_proc the answer as the replica sent it; without a decompressor filter
    // before ext_proc that is the compressed body
    start(List.of(A, B));
    FakeEnvoy envoy = routedFullDuplex(completion("hello"));
    envoy.send(ProcessingRequest.newBuilder().setResponseHeaders(
        io.envoyproxy.envoy.service.ext_proc.v3.HttpHeaders.newBuilder()
            .setHeaders(FakeEnvoy.headerMap(Map.of(":status", "200",
                "content-type", "text/event-stream", "content-encoding", "gzip")))).build());
    assertThat(envoy.next().hasResponseHeaders()).isTrue();
    String sse = "data: {\"choices\":[{\"text\":\" lorem\"}]}\n\n"
        + "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":3,"
        + "\"prompt_tokens_details\":{\"cached_tokens\":8}}}\n\ndata: [DONE]\n\n";
    java.io.ByteArrayOutputStream packed = new java.io.ByteArrayOutputStream();
    try (java.util.zip.GZIPOutputStream z = new java.util.zip.GZIPOutputStream(packed)) {
      z.write(sse.getBytes(java.nio.charset.StandardCharsets.UTF_8));
    }
    byte[] bytes = packed.toByteArray();
    int half = bytes.length / 2;
    byte[][] chunks = {java.util.Arrays.copyOfRange(bytes, 0, half),
        java.util.Arrays.copyOfRange(bytes, half, bytes.length)};
    for (int i = 0; i < chunks.length; i++) {
      envoy.send(FakeEnvoy.responseBody(chunks[i], i == chunks.length - 1));
      envoy.next();
    }
    assertThat(outcomes.completed.poll(5, TimeUnit.SECONDS)).isEqualTo(new Usage(12, 8, 3));
    assertThat(inFlight()).isZero();
    envoy.halfClose();
    assertThat(envoy.awaitClosed().getCode()).isEqualTo(Status.Code.OK);
    assertThat(outcomes.failed).isEmpty();
  }

  /**
   * Envoy cuts an answer's body wherever its buffers do: inside {@code data:}, inside a JSON
   * number, between the bytes of one UTF-8 character, inside a gzip header. Sent one byte per
   * message, a streamed answer, a gzip-compressed JSON answer and a stream that carries no usage
   * each end their decision once, with the usage the whole answer holds (zero counts without it)
   * and one first token.
   */
  @Test
  void anAnswerCutIntoSingleBytesIsReadAsAWholeAndEndsItsDecisionOnce() throws Exception {
    start(List.of(A));
    String sse = "data: {\"choices\":[{\"text\":\" caf\u00e9 \u2603\"}]}\n\n"
        + "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":125,\"completion_tokens\":37,"
        + "\"prompt_tokens_details\":{\"cached_tokens\":64}}}\n\ndata: [DONE]\n\n";
    sendByteByByte(routedFullDuplex(completion("s")), "text/event-stream", null,
        sse.getBytes(java.nio.charset.StandardCharsets.UTF_8));
    assertThat(outcomes.completed.poll(5, TimeUnit.SECONDS)).isEqualTo(new Usage(125, 64, 37));

    String json = "{\"id\":\"c\",\"object\":\"chat.completion\",\"choices\":[{\"message\":"
        + "{\"content\":\"\u00fcber\"}}],\"usage\":{\"prompt_tokens\":42,"
        + "\"completion_tokens\":7,\"total_tokens\":49}}";
    java.io.ByteArrayOutputStream packed = new java.io.ByteArrayOutputStream();
    try (java.util.zip.GZIPOutputStream z = new java.util.zip.GZIPOutputStream(packed)) {
      z.write(json.getBytes(java.nio.charset.StandardCharsets.UTF_8));
    }
    sendByteByByte(routedFullDuplex(completion("j")), "application/json", "gzip",
        packed.toByteArray());
    assertThat(outcomes.completed.poll(5, TimeUnit.SECONDS)).isEqualTo(new Usage(42, 0, 7));

    // a stream that did not ask for include_usage: no usage chunk before [DONE]
    String bare = "data: {\"choices\":[{\"text\":\"x\"}]}\n\ndata: [DONE]\n\n";
    sendByteByByte(routedFullDuplex(completion("b")), "text/event-stream", null,
        bare.getBytes(java.nio.charset.StandardCharsets.UTF_8));
    assertThat(outcomes.completed.poll(5, TimeUnit.SECONDS)).isEqualTo(Usage.NONE);

    await(() -> server.openStreams() == 0);
    assertThat(outcomes.failed).isEmpty();
    assertThat(outcomes.completed).isEmpty(); // each decision ended once
    assertThat(outcomes.events).containsExactly("first:" + A, "complete:" + A,
        "first:" + A, "complete:" + A, "first:" + A, "complete:" + A);
    assertThat(inFlight()).isZero();
  }

  /**
   * Sends a 200 answer of {@code body} one byte per message, the last with end_of_stream,
   * checks that every byte is sent back as it came, and closes the stream.
   */
  static void sendByteByByte(FakeEnvoy envoy, String contentType,
      @org.jspecify.annotations.Nullable String encoding, byte[] body) throws Exception {
    Map<String, String> h = new java.util.HashMap<>(Map.of(":status", "200",
        "content-type", contentType));
    if (encoding != null) {
      h.put("content-encoding", encoding);
    }
    envoy.send(ProcessingRequest.newBuilder().setResponseHeaders(
        io.envoyproxy.envoy.service.ext_proc.v3.HttpHeaders.newBuilder()
            .setHeaders(FakeEnvoy.headerMap(h))).build());
    assertThat(envoy.next().hasResponseHeaders()).isTrue();
    for (int i = 0; i < body.length; i++) {
      boolean last = i == body.length - 1;
      envoy.send(FakeEnvoy.responseBody(new byte[] {body[i]}, last));
      StreamedBodyResponse back = envoy.next().getResponseBody().getResponse().getBodyMutation()
          .getStreamedResponse();
      assertThat(back.getBody().toByteArray()).containsExactly(body[i]);
      assertThat(back.getEndOfStream()).isEqualTo(last);
    }
    envoy.halfClose();
    assertThat(envoy.awaitClosed().getCode()).isEqualTo(Status.Code.OK);
  }

  @Test
  void bufferedModeAnswersHeadersAtOnceAndPutsThePickOnTheBodyAnswer() throws Exception {
    start(List.of(A));
    FakeEnvoy envoy = FakeEnvoy.open(channel);
    envoy.send(postHeaders(modes(BUFFERED, STREAMED)));
    ProcessingResponse h = envoy.next();
    assertThat(h.hasRequestHeaders()).isTrue();
    assertThat(h.getRequestHeaders().getResponse().hasHeaderMutation()).isFalse();
    envoy.send(requestBody(completion("hi"), true));
    ProcessingResponse b = envoy.next();
    assertThat(b.hasRequestBody()).isTrue();
    assertThat(destinationHeader(b.getRequestBody().getResponse())).isEqualTo(A);
    assertThat(metadataDestination(b)).isEqualTo(A);
    assertThat(b.getRequestBody().getResponse().hasBodyMutation()).isFalse(); // passes through

    // a plain JSON answer in STREAMED mode: each chunk answered without a mutation
    envoy.send(responseHeaders(200, "application/json", false));
    assertThat(envoy.next().hasResponseHeaders()).isTrue();
    String json = "{\"id\":\"x\",\"object\":\"text_completion\",\"choices\":[{\"text\":\"hey\"}],"
        + "\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":2,\"total_tokens\":9}}";
    envoy.send(responseBody(json.substring(0, 30), false));
    envoy.send(responseBody(json.substring(30), true));
    for (int i = 0; i < 2; i++) {
      ProcessingResponse r = envoy.next();
      assertThat(r.hasResponseBody()).isTrue();
      assertThat(r.getResponseBody().getResponse().hasBodyMutation()).isFalse();
    }
    assertThat(outcomes.completed.poll(5, TimeUnit.SECONDS)).isEqualTo(new Usage(7, 0, 2));
    assertThat(inFlight()).isZero();
  }

  @Test
  void streamedModeHoldsTheHeadersAnswerUntilTheBodyEndsThenAnswersEveryChunk()
      throws Exception {
    start(List.of(A));
    FakeEnvoy envoy = FakeEnvoy.open(channel);
    envoy.send(requestHeaders("POST", "/v1/completions", false, Map.of())
        .setProtocolConfig(modes(STREAMED, STREAMED).toBuilder()
            .setSendBodyWithoutWaitingForHeaderResponse(true)).build());
    String body = completion("chunked");
    envoy.send(requestBody(body.substring(0, 5), false));
    envoy.send(requestBody(body.substring(5, 20), false));
    envoy.expectNothingFor(200);
    envoy.send(requestBody(body.substring(20), true));
    ProcessingResponse h = envoy.next();
    assertThat(destinationHeader(h.getRequestHeaders().getResponse())).isEqualTo(A);
    assertThat(metadataDestination(h)).isEqualTo(A);
    for (int i = 0; i < 3; i++) {
      ProcessingResponse r = envoy.next();
      assertThat(r.hasRequestBody()).as("answer to chunk " + i).isTrue();
      assertThat(r.getRequestBody().getResponse()).isEqualTo(CommonResponse.getDefaultInstance());
    }
    envoy.expectNothingFor(100);
  }

  @Test
  void streamedModeWithoutSendingTheBodyEarlyIsRefusedNamingTheSetting() throws Exception {
    start(List.of(A));
    FakeEnvoy envoy = FakeEnvoy.open(channel);
    envoy.send(postHeaders(modes(STREAMED, STREAMED)));
    Status s = envoy.awaitClosed();
    assertThat(s.getCode()).isEqualTo(Status.Code.FAILED_PRECONDITION);
    assertThat(s.getDescription()).contains("send_body_without_waiting_for_header_response");
    await(() -> server.openStreams() == 0);
  }

  @Test
  void aLargeBodyGoesBackInPiecesOfAtMost64KiB() throws Exception {
    start(List.of(A));
    FakeEnvoy envoy = FakeEnvoy.open(channel);
    String prompt = "x".repeat(150_000);
    ByteString body = ByteString.copyFromUtf8(completion(prompt));
    envoy.send(postHeaders(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED)));
    for (int from = 0; from < body.size(); from += 16_000) {
      int to = Math.min(body.size(), from + 16_000);
      envoy.send(requestBody(body.substring(from, to), to == body.size()));
    }
    assertThat(envoy.next().hasRequestHeaders()).isTrue();
    ByteString back = ByteString.EMPTY;
    int pieces = 0;
    while (true) {
      StreamedBodyResponse p = envoy.next().getRequestBody().getResponse().getBodyMutation()
          .getStreamedResponse();
      assertThat(p.getBody().size()).isLessThanOrEqualTo(64 * 1024);
      back = back.concat(p.getBody());
      pieces++;
      if (p.getEndOfStream()) {
        break;
      }
    }
    assertThat(back).isEqualTo(body);
    assertThat(pieces).isEqualTo((body.size() + 65535) / 65536);
  }

  @Test
  void requestTrailersEndTheBodyAndAreAnsweredAfterIt() throws Exception {
    start(List.of(A));
    FakeEnvoy envoy = FakeEnvoy.open(channel);
    envoy.send(postHeaders(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED)));
    envoy.send(requestBody(completion("t"), false));
    envoy.send(FakeEnvoy.requestTrailers());
    assertThat(envoy.next().hasRequestHeaders()).isTrue();
    StreamedBodyResponse p = envoy.next().getRequestBody().getResponse().getBodyMutation()
        .getStreamedResponse();
    assertThat(utf8(p.getBody())).isEqualTo(completion("t"));
    assertThat(p.getEndOfStream()).isFalse(); // the trailers end this request
    assertThat(envoy.next().hasRequestTrailers()).isTrue();
  }

  @Test
  void bufferedTrailersWithoutABodyAre400AndCountNothing() throws Exception {
    start(List.of(A));
    FakeEnvoy envoy = FakeEnvoy.open(channel);
    envoy.send(requestHeaders("GET", "/v1/models", false, Map.of())
        .setProtocolConfig(modes(BUFFERED, FULL_DUPLEX_STREAMED)).build());
    assertThat(envoy.next().hasRequestHeaders()).isTrue(); // BUFFERED: answered at once
    // no body to buffer: Envoy sends the trailers and waits for their answer, the headers gone
    envoy.send(FakeEnvoy.requestTrailers());
    ProcessingResponse r = envoy.next();
    assertThat(r.hasImmediateResponse()).as("answer to the trailers: %s", r).isTrue();
    assertThat(r.getImmediateResponse().getStatus().getCodeValue()).isEqualTo(400);
    assertThat(error(r.getImmediateResponse()).path("type").asText())
        .isEqualTo("routing_invalid_request");
    assertThat(envoy.awaitClosed().getCode()).isEqualTo(Status.Code.OK);
    assertThat(inFlight()).isZero();
    assertThat(outcomes.events).isEmpty(); // no decision counted on an endpoint it never reached
    await(() -> server.openStreams() == 0);
  }

  @Test
  void withoutProtocolConfigTheAssumedModesApply() throws Exception {
    start(List.of(A), ExtProcServer.DEFAULT_MAX_BODY_BYTES,
        b -> b.assumedBodyModes(BUFFERED, NONE));
    FakeEnvoy envoy = FakeEnvoy.open(channel);
    envoy.send(requestHeaders("POST", "/v1/completions", false, Map.of()).build());
    assertThat(envoy.next().hasRequestHeaders()).isTrue(); // BUFFERED: headers first
    envoy.send(requestBody(completion("hi"), true));
    assertThat(destinationHeader(envoy.next().getRequestBody().getResponse())).isEqualTo(A);
    // response body mode NONE: the stream's end is the answer's end
    envoy.send(responseHeaders(200, "application/json", false));
    assertThat(envoy.next().hasResponseHeaders()).isTrue();
    envoy.halfClose();
    assertThat(envoy.awaitClosed().getCode()).isEqualTo(Status.Code.OK);
    assertThat(outcomes.completed.poll(5, TimeUnit.SECONDS)).isEqualTo(Usage.NONE);
    assertThat(inFlight()).isZero();
  }

  /**
   * Envoy sends a STREAMED body before the headers are answered only with
   * send_body_without_waiting_for_header_response: true; without it Envoy holds the body until
   * the headers are answered, and this server answers them after the body, so the request waited
   * for message_timeout and failed. protocol_config says whether it is set, and the server refuses
   * STREAMED without it; an assumed STREAMED was taken as if it were set, unchecked.
   */
  @Test
  void anAssumedStreamedRequestBodyNeedsTheSettingThatSendsTheBodyEarly() throws Exception {
    try (Router plain = Router.builder().endpoints(List.of(Endpoint.parse(A))).build()) {
      ExtProcServer.Builder b = ExtProcServer.builder(plain);
      org.assertj.core.api.Assertions.assertThatThrownBy(() -> b.assumedBodyModes(STREAMED, NONE))
          .isInstanceOf(IllegalArgumentException.class)
          .hasMessageStartingWith("assumedBodyModes(request, response): request is STREAMED")
          .hasMessageContaining("send_body_without_waiting_for_header_response: true")
          .hasMessageContaining("assumedBodyModes(STREAMED, NONE, true)");
      org.assertj.core.api.Assertions.assertThatThrownBy(
          () -> b.assumedBodyModes(STREAMED, STREAMED, false))
          .isInstanceOf(IllegalArgumentException.class)
          .hasMessageStartingWith("assumedBodyModes(request, response, "
              + "sendBodyWithoutWaitingForHeaderResponse): request is STREAMED");
      // the setting changes nothing in the other modes (Envoy ignores it there)
      assertThat(b.assumedBodyModes(BUFFERED, STREAMED)).isSameAs(b);
      assertThat(b.assumedBodyModes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED, false))
          .isSameAs(b);
    }

    // stated, it is served as an announced one is: the body comes before the headers' answer
    start(List.of(A), ExtProcServer.DEFAULT_MAX_BODY_BYTES,
        c -> c.assumedBodyModes(STREAMED, STREAMED, true));
    FakeEnvoy envoy = FakeEnvoy.open(channel);
    envoy.send(requestHeaders("POST", "/v1/completions", false, Map.of()).build());
    String body = completion("early");
    envoy.send(requestBody(body.substring(0, 7), false));
    envoy.expectNothingFor(100);
    envoy.send(requestBody(body.substring(7), true));
    assertThat(destinationHeader(envoy.next().getRequestHeaders().getResponse())).isEqualTo(A);
    for (int i = 0; i < 2; i++) {
      assertThat(envoy.next().getRequestBody().getResponse())
          .as("answer to chunk " + i).isEqualTo(CommonResponse.getDefaultInstance());
    }
    envoy.send(responseHeaders(200, "application/json", false));
    assertThat(envoy.next().hasResponseHeaders()).isTrue();
    envoy.send(responseBody("{}", true));
    assertThat(envoy.next().getResponseBody().getResponse())
        .isEqualTo(CommonResponse.getDefaultInstance()); // STREAMED answer: unchanged
    assertThat(outcomes.completed.poll(5, TimeUnit.SECONDS)).isNotNull();
    assertThat(inFlight()).isZero();
  }

  @Test
  void aRequestWithoutBodyIsRoutedOnItsHeaders() throws Exception {
    start(List.of(A));
    FakeEnvoy envoy = FakeEnvoy.open(channel);
    envoy.send(requestHeaders("GET", "/v1/models?x=1", true, Map.of())
        .setProtocolConfig(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED)).build());
    ProcessingResponse h = envoy.next();
    assertThat(destinationHeader(h.getRequestHeaders().getResponse())).isEqualTo(A);
    assertThat(metadataDestination(h)).isEqualTo(A);
    envoy.expectNothingFor(100); // no body to send back
    envoy.send(responseHeaders(200, "application/json", true));
    assertThat(envoy.next().hasResponseHeaders()).isTrue();
    assertThat(outcomes.completed.poll(5, TimeUnit.SECONDS)).isEqualTo(Usage.NONE);
    assertThat(inFlight()).isZero();
  }

  /**
   * vLLM takes some POSTs without a body ({@code /reset_prefix_cache}, {@code /sleep},
   * {@code /wake_up}): such a request is routed on its headers as a GET is, as the upstream
   * endpoint picker routes any request whose headers end the stream. Before, it was a 400 (an
   * empty body is no OpenAI request).
   */
  @Test
  void aPostWithoutBodyIsRoutedOnItsHeaders() throws Exception {
    start(List.of(A));
    FakeEnvoy envoy = FakeEnvoy.open(channel);
    envoy.send(requestHeaders("POST", "/reset_prefix_cache", true, Map.of())
        .setProtocolConfig(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED)).build());
    ProcessingResponse h = envoy.next();
    assertThat(h.hasImmediateResponse()).as("answered locally").isFalse();
    assertThat(destinationHeader(h.getRequestHeaders().getResponse())).isEqualTo(A);
    envoy.send(responseHeaders(200, "application/json", true));
    assertThat(envoy.next().hasResponseHeaders()).isTrue();
    assertThat(outcomes.completed.poll(5, TimeUnit.SECONDS)).isEqualTo(Usage.NONE);
    assertThat(inFlight()).isZero();
  }

  @Test
  void aSheddableRequestWithoutBodyIs429AsAPostIs() throws Exception {
    // before, a request that is not a POST skipped the request parser: its x-request-priority
    // was never read, so a sheddable GET was routed to a saturated pool
    start(List.of(A)); // no metrics yet: the endpoint counts as saturated for shedding
    FakeEnvoy envoy = FakeEnvoy.open(channel);
    envoy.send(requestHeaders("GET", "/v1/models", true, Map.of("x-request-priority", "-1"))
        .setProtocolConfig(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED)).build());
    ImmediateResponse r = envoy.next().getImmediateResponse();
    assertThat(r.getStatus().getCodeValue()).isEqualTo(429);
    assertThat(error(r).path("type").asText()).isEqualTo("routing_shed");
    assertThat(envoy.awaitClosed().getCode()).isEqualTo(Status.Code.OK);
    assertThat(inFlight()).isZero();
  }

  @Test
  void aMalformedPriorityWithoutBodyIs400AsAPostIs() throws Exception {
    // before, a GET with 'x-request-priority: high' was routed as if the header were absent
    start(List.of(A));
    FakeEnvoy envoy = FakeEnvoy.open(channel);
    envoy.send(requestHeaders("GET", "/v1/models", true, Map.of("x-request-priority", "high"))
        .setProtocolConfig(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED)).build());
    ImmediateResponse r = envoy.next().getImmediateResponse();
    assertThat(r.getStatus().getCodeValue()).isEqualTo(400);
    assertThat(error(r).path("type").asText()).isEqualTo("routing_invalid_request");
    assertThat(error(r).path("message").asText()).contains("x-request-priority");
    assertThat(envoy.awaitClosed().getCode()).isEqualTo(Status.Code.OK);
    assertThat(outcomes.events).isEmpty();
  }

  @Test
  void aRequestWithoutBodyCarriesItsSessionKeyAndPriority() throws Exception {
    // before, the session headers of a request that is not a POST were ignored: no session key
    start(List.of(A));
    FakeEnvoy envoy = FakeEnvoy.open(channel);
    envoy.send(requestHeaders("DELETE", "/v1/files/f1", true,
        Map.of("x-session-id", "s-42", "x-request-priority", "3"))
        .setProtocolConfig(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED)).build());
    assertThat(destinationHeader(envoy.next().getRequestHeaders().getResponse())).isEqualTo(A);
    envoy.send(responseHeaders(200, "application/json", true));
    assertThat(envoy.next().hasResponseHeaders()).isTrue();
    InferenceRequest seen = outcomes.completedRequests.poll(5, TimeUnit.SECONDS);
    assertThat(seen).isNotNull();
    assertThat(seen.sessionKey()).isEqualTo("s-42");
    assertThat(seen.priority()).isEqualTo(3);
    assertThat(inFlight()).isZero();
  }

  /** The session key the router read from a request without body carrying {@code header}. */
  private String sessionKeyOf(HeaderValue... header) throws Exception {
    FakeEnvoy envoy = FakeEnvoy.open(channel);
    ProcessingRequest.Builder r = requestHeaders("GET", "/v1/models", true, Map.of())
        .setProtocolConfig(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED));
    for (HeaderValue h : header) {
      r.getRequestHeadersBuilder().getHeadersBuilder().addHeaders(h);
    }
    envoy.send(r.build());
    assertThat(destinationHeader(envoy.next().getRequestHeaders().getResponse())).isEqualTo(A);
    envoy.send(responseHeaders(200, "application/json", true));
    assertThat(envoy.next().hasResponseHeaders()).isTrue();
    InferenceRequest seen = outcomes.completedRequests.poll(5, TimeUnit.SECONDS);
    assertThat(seen).isNotNull();
    return seen.sessionKey();
  }

  private static HeaderValue rawHeader(String name, byte... value) {
    return HeaderValue.newBuilder().setKey(name).setRawValue(ByteString.copyFrom(value)).build();
  }

  @Test
  void sessionTokensThatDifferOnlyInBytesThatAreNotUtf8AreTwoSessions() throws Exception {
    // before, raw_value was read as UTF-8: 0xFF and 0xFE both became U+FFFD, one session key
    start(List.of(A));
    String ff = sessionKeyOf(rawHeader("x-session-id", (byte) 's', (byte) '-', (byte) 0xFF));
    String fe = sessionKeyOf(rawHeader("x-session-id", (byte) 's', (byte) '-', (byte) 0xFE));
    assertThat(ff).isNotEqualTo(fe);
    // one character per byte, as the JDK's HTTP server and Netty read header bytes
    assertThat(ff).isEqualTo("s-\u00ff");
    assertThat(fe).isEqualTo("s-\u00fe");
  }

  @Test
  void aHeaderSentAsValueReadsAsTheSameStringAsItsBytesSentAsRawValue() throws Exception {
    // an Envoy with send_header_raw_value off sends value; the key must not depend on the field
    start(List.of(A));
    String asRaw = sessionKeyOf(rawHeader("x-session-id",
        "caf\u00e9".getBytes(java.nio.charset.StandardCharsets.UTF_8)));
    String asValue = sessionKeyOf(HeaderValue.newBuilder().setKey("x-session-id")
        .setValue("caf\u00e9").build());
    assertThat(asValue).isEqualTo(asRaw).isEqualTo("caf\u00c3\u00a9");
  }

  @Test
  void aHeaderSentTwiceIsReadAsItsValuesJoinedNotAsTheFirst() throws Exception {
    // Envoy sends a repeated header as one entry per line; before, the router saw the first
    // line alone: a request carrying two session ids was silently routed as the first one's
    start(List.of(A));
    FakeEnvoy envoy = FakeEnvoy.open(channel);
    ProcessingRequest.Builder r = requestHeaders("GET", "/v1/models", true, Map.of())
        .setProtocolConfig(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED));
    HeaderMap.Builder h = r.getRequestHeadersBuilder().getHeadersBuilder();
    h.addHeaders(rawHeader("x-session-id", "s-1".getBytes(java.nio.charset.StandardCharsets.UTF_8)));
    h.addHeaders(rawHeader("cookie", "a=1".getBytes(java.nio.charset.StandardCharsets.UTF_8)));
    h.addHeaders(rawHeader("X-Session-Id", "s-2".getBytes(java.nio.charset.StandardCharsets.UTF_8)));
    h.addHeaders(rawHeader("cookie", "sid=7".getBytes(java.nio.charset.StandardCharsets.UTF_8)));
    h.addHeaders(rawHeader("x-session-id", "s-3".getBytes(java.nio.charset.StandardCharsets.UTF_8)));
    envoy.send(r.build());
    assertThat(destinationHeader(envoy.next().getRequestHeaders().getResponse())).isEqualTo(A);
    envoy.send(responseHeaders(200, "application/json", true));
    assertThat(envoy.next().hasResponseHeaders()).isTrue();
    InferenceRequest seen = outcomes.completedRequests.poll(5, TimeUnit.SECONDS);
    assertThat(seen).isNotNull();
    // in the order sent, as Envoy joins the headers it keeps as one; cookies as HTTP/2 joins them
    assertThat(seen.sessionKey()).isEqualTo("s-1,s-2,s-3");
    assertThat(seen.header("x-session-id")).isEqualTo("s-1,s-2,s-3");
    assertThat(seen.header("cookie")).isEqualTo("a=1; sid=7");
  }

  @Test
  void aRepeatedPriorityIsRefusedNamingTheHeaderRatherThanOneOfItsValuesTaken() throws Exception {
    start(List.of(A));
    FakeEnvoy envoy = FakeEnvoy.open(channel);
    ProcessingRequest.Builder r = requestHeaders("GET", "/v1/models", true, Map.of())
        .setProtocolConfig(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED));
    r.getRequestHeadersBuilder().getHeadersBuilder()
        .addHeaders(rawHeader("x-request-priority", (byte) '5'))
        .addHeaders(rawHeader("x-request-priority", (byte) '-', (byte) '1'));
    envoy.send(r.build());
    ImmediateResponse answer = envoy.next().getImmediateResponse();
    assertThat(answer.getStatus().getCodeValue()).isEqualTo(400);
    assertThat(error(answer).path("message").asText()).contains("x-request-priority");
    assertThat(envoy.awaitClosed().getCode()).isEqualTo(Status.Code.OK);
    assertThat(outcomes.events).isEmpty();
  }

  @Test
  void aPathSentTwiceIsInvalidArgumentNamingIt() throws Exception {
    // before, the first :path was routed and the second dropped
    assertSentTwiceIsInvalidArgument("POST", "/v1/completions", false, ":path",
        "/v1/chat/completions");
  }

  @Test
  void aMethodSentTwiceIsInvalidArgumentNamingIt() throws Exception {
    // before, the last :method counted: a GET that also said POST was parsed as a POST
    assertSentTwiceIsInvalidArgument("GET", "/v1/models", true, ":method", "POST");
  }

  /** Request headers with {@code name} given again as {@code second} end the stream. */
  private void assertSentTwiceIsInvalidArgument(String method, String path, boolean endOfStream,
      String name, String second) throws Exception {
    start(List.of(A));
    FakeEnvoy envoy = FakeEnvoy.open(channel);
    ProcessingRequest.Builder r = requestHeaders(method, path, endOfStream, Map.of())
        .setProtocolConfig(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED));
    r.getRequestHeadersBuilder().getHeadersBuilder()
        .addHeaders(rawHeader(name, second.getBytes(java.nio.charset.StandardCharsets.UTF_8)));
    envoy.send(r.build());
    Status s = envoy.awaitClosed();
    assertThat(s.getCode()).isEqualTo(Status.Code.INVALID_ARGUMENT);
    assertThat(s.getDescription()).contains(name);
    assertThat(outcomes.events).isEmpty();
  }

  // ------------------------------------------------------------------------------ the subset

  @Test
  void theSubsetHintLimitsThePickAndTheFallbacks() throws Exception {
    start(List.of(A, B, C));
    for (int i = 0; i < 5; i++) {
      FakeEnvoy envoy = FakeEnvoy.open(channel);
      envoy.send(postHeaders(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED)).toBuilder()
          .setMetadataContext(FakeEnvoy.subsetHint(List.of(B, "10.9.9.9:1"))).build());
      envoy.send(requestBody(completion("p" + i), true));
      ProcessingResponse h = envoy.next();
      assertThat(destinationHeader(h.getRequestHeaders().getResponse())).isEqualTo(B);
      assertThat(metadataDestination(h)).isEqualTo(B);
    }
    assertThat(inFlightOn(B)).isEqualTo(5);
  }

  @Test
  void anIpv6EndpointSpelledOtherwiseThanByTheProxyIsStillHintedAndServed() throws Exception {
    // the endpoints list writes IPv6 addresses as configured (here upper case, and in the JDK's
    // uncompressed form); the proxy writes them compressed and in lower case. Before, the hint
    // named no endpoint of the pool (a 503) and the served fallback went unheard
    String one = "[2001:DB8::1]:8000";
    String two = "[2001:db8:0:0:0:0:0:2]:8000";
    start(List.of(one, two));
    FakeEnvoy hinted = FakeEnvoy.open(channel);
    hinted.send(postHeaders(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED)).toBuilder()
        .setMetadataContext(FakeEnvoy.subsetHint(List.of("[2001:db8::2]:8000"))).build());
    hinted.send(requestBody(completion("p"), true));
    ProcessingResponse h = hinted.next();
    assertThat(h.hasRequestHeaders()).as("the pick, not a local reply: %s", h).isTrue();
    assertThat(destinationHeader(h.getRequestHeaders().getResponse())).isEqualTo(two);
    hinted.cancel();
    await(() -> inFlight() == 0);

    FakeEnvoy envoy = routedFullDuplex(completion("x"));
    String primary = inFlightOn(one) == 1 ? one : two;
    String fallback = primary.equals(one) ? two : one;
    String proxySpelling = fallback.equals(one) ? "[2001:db8::1]:8000" : "[2001:db8::2]:8000";
    envoy.send(responseHeaders(200, "application/json", false).toBuilder()
        .setMetadataContext(FakeEnvoy.served(proxySpelling)).build());
    assertThat(envoy.next().hasResponseHeaders()).isTrue();
    assertThat(inFlightOn(primary)).isZero();
    assertThat(inFlightOn(fallback)).isEqualTo(1);
  }

  @Test
  void anEmptyOrForeignSubsetIs503WithRetryAfter() throws Exception {
    start(List.of(A, B));
    for (List<String> subset : List.of(List.<String>of(), List.of("10.9.9.9:1"))) {
      FakeEnvoy envoy = FakeEnvoy.open(channel);
      envoy.send(postHeaders(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED)).toBuilder()
          .setMetadataContext(FakeEnvoy.subsetHint(subset)).build());
      envoy.send(requestBody(completion("p"), true));
      ImmediateResponse r = envoy.next().getImmediateResponse();
      assertThat(r.getStatus().getCodeValue()).isEqualTo(503);
      assertThat(header(r, "retry-after")).isEqualTo("1");
      assertThat(error(r).path("type").asText()).isEqualTo("routing_no_endpoints");
      assertThat(envoy.awaitClosed().getCode()).isEqualTo(Status.Code.OK);
    }
    assertThat(inFlight()).isZero();
  }

  @Test
  void aMalformedSubsetHintIsInvalidArgumentNamingTheField() throws Exception {
    start(List.of(A));
    FakeEnvoy envoy = FakeEnvoy.open(channel);
    Metadata bad = Metadata.newBuilder().putFilterMetadata(ExtProcMessages.SUBSET_HINT_NAMESPACE,
        Struct.newBuilder().putFields(ExtProcMessages.SUBSET_KEY,
            Value.newBuilder().setNumberValue(3).build()).build()).build();
    envoy.send(postHeaders(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED)).toBuilder()
        .setMetadataContext(bad).build());
    Status s = envoy.awaitClosed();
    assertThat(s.getCode()).isEqualTo(Status.Code.INVALID_ARGUMENT);
    assertThat(s.getDescription()).contains("x-gateway-destination-endpoint-subset")
        .contains("a number");
  }

  // ---------------------------------------------------------------------------- rejections

  @Test
  void anInvalidBodyIs400WithAnOpenAiErrorThatQuotesNoPrompt() throws Exception {
    start(List.of(A));
    FakeEnvoy envoy = FakeEnvoy.open(channel);
    envoy.send(postHeaders(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED)));
    envoy.send(requestBody("{\"model\":\"m\",\"prompt\":\"secret-words\" oops", true));
    ImmediateResponse r = envoy.next().getImmediateResponse();
    assertThat(r.getStatus().getCodeValue()).isEqualTo(400);
    assertThat(header(r, "content-type")).isEqualTo("application/json");
    assertThat(header(r, "retry-after")).isNull();
    JsonNode err = error(r);
    assertThat(err.path("type").asText()).isEqualTo("routing_invalid_request");
    assertThat(err.path("code").asInt()).isEqualTo(400);
    assertThat(err.path("message").asText()).isNotEmpty().doesNotContain("secret-words");
    assertThat(envoy.awaitClosed().getCode()).isEqualTo(Status.Code.OK);
    assertThat(inFlight()).isZero();
    await(() -> server.openStreams() == 0);
  }

  @Test
  void aBodyPastTheLimitIs413AsSoonAsItPassesIt() throws Exception {
    start(List.of(A), 1000, null);
    FakeEnvoy envoy = FakeEnvoy.open(channel);
    envoy.send(postHeaders(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED)));
    envoy.send(requestBody("x".repeat(600), false));
    envoy.send(requestBody("x".repeat(600), false)); // not the end: 413 comes anyway
    ImmediateResponse r = envoy.next().getImmediateResponse();
    assertThat(r.getStatus().getCodeValue()).isEqualTo(413);
    assertThat(error(r).path("type").asText()).isEqualTo("request_too_large");
    assertThat(error(r).path("message").asText()).contains("1000 bytes");
    assertThat(envoy.awaitClosed().getCode()).isEqualTo(Status.Code.OK);
  }

  @Test
  void aMissingDrainTimeoutIsRefusedNamingIt() {
    router = Router.builder().endpoints(List.of(Endpoint.parse(A))).build();
    ExtProcServer.Builder b = ExtProcServer.builder(router);
    org.assertj.core.api.Assertions.assertThatThrownBy(() -> b.drainTimeout(null))
        .isInstanceOf(NullPointerException.class).hasMessageContaining("drainTimeout");
  }

  @Test
  void aLimitAboveTheRoutersParserIsRefusedAtStartAndABodyWithinBothIsRouted() throws Exception {
    // the router would answer a body between its parser's limit (16 MiB by default) and the
    // server's a 400 "above the limit": the server's limit would promise what it cannot keep
    router = Router.builder().endpoints(List.of(Endpoint.parse(A))).listener(outcomes).build();
    ExtProcServer.Builder refused = ExtProcServer.builder(router).maxBodyBytes(32 << 20)
        .transport(InProcessServerBuilder.forName(InProcessServerBuilder.generateName()));
    org.assertj.core.api.Assertions.assertThatThrownBy(refused::start)
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("maxBodyBytes (33554432)")
        .hasMessageContaining("request parser limit (16777216)");
    router.close();

    // with the router's parser raised to match, a 17 MiB body is routed
    router = Router.builder().endpoints(List.of(Endpoint.parse(A))).listener(outcomes)
        .requestParser(io.epp4j.core.OpenAiRequestParser.of(32 << 20, List.of())).build();
    String name = InProcessServerBuilder.generateName();
    server = ExtProcServer.builder(router).maxBodyBytes(32 << 20)
        .transport(InProcessServerBuilder.forName(name)).drainTimeout(Duration.ofSeconds(2))
        .start();
    channel = InProcessChannelBuilder.forName(name).build();
    ByteString body = ByteString.copyFromUtf8(completion("x".repeat(17 << 20)));
    FakeEnvoy envoy = FakeEnvoy.open(channel);
    envoy.send(postHeaders(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED)));
    for (int from = 0; from < body.size(); from += 1 << 20) {
      int to = Math.min(body.size(), from + (1 << 20));
      envoy.send(requestBody(body.substring(from, to), to == body.size()));
    }
    ProcessingResponse r = envoy.next();
    assertThat(r.hasImmediateResponse()).as("answered locally: %s", r).isFalse();
    assertThat(destinationHeader(r.getRequestHeaders().getResponse())).isEqualTo(A);
  }

  @Test
  void aSheddableRequestOnASaturatedPoolIs429() throws Exception {
    start(List.of(A)); // no metrics yet: the endpoint counts as saturated for shedding
    FakeEnvoy envoy = FakeEnvoy.open(channel);
    envoy.send(requestHeaders("POST", "/v1/completions", false, Map.of("x-request-priority", "-1"))
        .setProtocolConfig(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED)).build());
    envoy.send(requestBody(completion("p"), true));
    ImmediateResponse r = envoy.next().getImmediateResponse();
    assertThat(r.getStatus().getCodeValue()).isEqualTo(429);
    assertThat(header(r, "retry-after")).isEqualTo("1");
    assertThat(error(r).path("type").asText()).isEqualTo("routing_shed");
  }

  @Test
  void aBufferedPartialAnswerCutAtEnvoysLimitCompletesWhenTheStreamEnds() throws Exception {
    // with response_body_mode BUFFERED_PARTIAL Envoy sends an answer longer than its buffer
    // limit as its first part (end_of_stream false) and streams the rest to the client unseen;
    // the stream's end is then the answer's end. Before, that end failed the decision ("closed
    // the ext_proc stream in phase RESPONSE_BODY"), so every long good answer counted as failed
    start(List.of(A));
    Routed routed = routedAnswer(BUFFERED_PARTIAL, "text/event-stream");
    assertThat(routed.destination()).isEqualTo(A);
    assertThat(routed.headersAnswer().hasResponseHeaders()).isTrue();
    FakeEnvoy envoy = routed.envoy();
    envoy.send(responseBody("data: {\"choices\":[{\"text\":\"a\"}]}\n\n", false));
    assertThat(envoy.next().hasResponseBody()).isTrue();
    envoy.halfClose();
    assertThat(envoy.awaitClosed().getCode()).isEqualTo(Status.Code.OK);
    assertThat(outcomes.completed.poll(5, TimeUnit.SECONDS)).isEqualTo(Usage.NONE);
    assertThat(outcomes.failed).isEmpty();
    assertThat(outcomes.events).containsExactly("first:" + A, "complete:" + A);
    assertThat(inFlight()).isZero();

    // a whole answer within the limit comes with end_of_stream and completes at once, as before
    FakeEnvoy whole = routedAnswer(BUFFERED_PARTIAL, "application/json").envoy();
    whole.send(responseBody("{\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}", true));
    whole.next();
    assertThat(outcomes.completed.poll(5, TimeUnit.SECONDS)).isEqualTo(new Usage(3, 0, 1));
    whole.halfClose();
    assertThat(whole.awaitClosed().getCode()).isEqualTo(Status.Code.OK);
    assertThat(outcomes.failed).isEmpty();
  }

  @Test
  void aBufferedAnswerWithTrailersEnvoyDoesNotSendCompletesWithItsBody() throws Exception {
    // BUFFERED: Envoy sends the body once it is whole, with end_of_stream false when trailers end
    // the answer; with response_trailer_mode SKIP (Envoy's default) no trailers message follows.
    // Before, the stream's end then failed the decision of a complete, good answer
    start(List.of(A));
    Routed routed = routedAnswer(BUFFERED, "application/json");
    assertThat(routed.destination()).isEqualTo(A);
    assertThat(routed.headersAnswer().hasResponseHeaders()).isTrue();
    FakeEnvoy envoy = routed.envoy();
    envoy.send(responseBody("{\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}", false));
    assertThat(envoy.next().hasResponseBody()).isTrue();
    assertThat(outcomes.completed.poll(5, TimeUnit.SECONDS)).isEqualTo(new Usage(5, 0, 2));
    envoy.halfClose();
    assertThat(envoy.awaitClosed().getCode()).isEqualTo(Status.Code.OK);
    assertThat(outcomes.failed).isEmpty();
    assertThat(outcomes.events).containsExactly("first:" + A, "complete:" + A);
    assertThat(inFlight()).isZero();

    // trailer mode SEND: the trailers still come, and are answered
    FakeEnvoy sent = routedAnswer(BUFFERED, "application/json").envoy();
    sent.send(responseBody("{}", false));
    sent.next();
    sent.send(ProcessingRequest.newBuilder().setResponseTrailers(
        io.envoyproxy.envoy.service.ext_proc.v3.HttpTrailers.getDefaultInstance()).build());
    assertThat(sent.next().hasResponseTrailers()).isTrue();
    assertThat(outcomes.completed.poll(5, TimeUnit.SECONDS)).isEqualTo(Usage.NONE);
    sent.halfClose();
    assertThat(sent.awaitClosed().getCode()).isEqualTo(Status.Code.OK);
    assertThat(outcomes.failed).isEmpty();
  }

  /** Opens a stream, routes a BUFFERED request and passes the answer's headers, STREAMED body. */
  FakeEnvoy routedStreamedAnswer(Map<String, String> responseHeaders) throws Exception {
    Routed routed = routedAnswer(STREAMED, ProcessingRequest.newBuilder().setResponseHeaders(
        io.envoyproxy.envoy.service.ext_proc.v3.HttpHeaders.newBuilder()
            .setHeaders(FakeEnvoy.headerMap(responseHeaders))).build());
    assertThat(routed.destination()).isEqualTo(A);
    assertThat(routed.headersAnswer().hasResponseHeaders()).isTrue();
    return routed.envoy();
  }

  /** {@link #routedStreamedAnswer(Map)} of a 200 answer of {@code contentType}. */
  FakeEnvoy routedStreamedAnswer(String contentType) throws Exception {
    return routedStreamedAnswer(Map.of(":status", "200", "content-type", contentType));
  }

  /** {@link #routedStreamedAnswer(Map)} of a 200 JSON answer declaring its content-length. */
  FakeEnvoy routedStreamedAnswer(int contentLength) throws Exception {
    return routedStreamedAnswer(Map.of(":status", "200", "content-type", "application/json",
        "content-length", String.valueOf(contentLength)));
  }

  /**
   * Passes {@code chunks} as the answer's STREAMED body, none with end_of_stream (as when
   * trailers end the answer), then ends the stream from Envoy's side.
   */
  static void sendChunksAndClose(FakeEnvoy envoy, String... chunks)
      throws InterruptedException {
    for (String chunk : chunks) {
      envoy.send(responseBody(chunk, false));
      envoy.next();
    }
    envoy.halfClose();
  }

  /** Sends {@code chunks} and ends the stream: it closes OK and the decision completes. */
  void assertCompletes(FakeEnvoy envoy, Usage usage, String... chunks) throws Exception {
    sendChunksAndClose(envoy, chunks);
    assertThat(envoy.awaitClosed().getCode()).isEqualTo(Status.Code.OK);
    assertThat(outcomes.completed.poll(5, TimeUnit.SECONDS)).isEqualTo(usage);
    assertThat(outcomes.failed).isEmpty();
  }

  /** Sends {@code chunks} and ends the stream: the decision fails as cut short. */
  void assertFailsCutShort(FakeEnvoy envoy, String... chunks) throws Exception {
    sendChunksAndClose(envoy, chunks);
    assertThat(outcomes.failed.poll(5, TimeUnit.SECONDS))
        .hasMessageContaining("before the answer ended");
  }

  @Test
  void aStreamedAnswerEndedByTrailersEnvoyDoesNotSendCompletesWhenItIsProvablyWhole()
      throws Exception {
    // STREAMED: when trailers end the answer, its last chunk comes without end_of_stream, and
    // with response_trailer_mode SKIP (Envoy's default) nothing follows until Envoy closes the
    // stream, as it closes a cut one. An answer whose own framing says it is whole, an SSE
    // stream that reached data: [DONE] or a body of its declared content-length, completes
    // then; before, every such answer failed its decision
    start(List.of(A));
    assertCompletes(routedStreamedAnswer("text/event-stream"), new Usage(4, 0, 1),
        "data: {\"choices\":[{\"text\":\"a\"}]}\n\n",
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":4,"
            + "\"completion_tokens\":1}}\n\ndata: [DONE]\n\n");
    assertThat(outcomes.events).containsExactly("first:" + A, "complete:" + A);

    String json = "{\"usage\":{\"prompt_tokens\":6,\"completion_tokens\":2}}";
    assertCompletes(routedStreamedAnswer(json.length()), new Usage(6, 0, 2),
        json.substring(0, 10), json.substring(10));
    assertThat(inFlight()).isZero();

    // an answer cut short still fails: an SSE stream before data: [DONE], a body short of its
    // length, and a body of unknown length
    assertFailsCutShort(routedStreamedAnswer("text/event-stream"),
        "data: {\"choices\":[{\"text\":\"a\"}]}\n\n");
    assertFailsCutShort(routedStreamedAnswer(json.length() + 1), json);
    assertFailsCutShort(routedStreamedAnswer("application/json"), json);
    await(() -> inFlight() == 0);
    assertThat(outcomes.completed).isEmpty();
  }

  @Test
  void aStreamedAnswerWhoseLastLineIsAnUnterminatedDataDoneIsWhole() throws Exception {
    // the answer's last bytes are data: [DONE] without a line end; the stream's end ends that
    // line, so the answer is provably whole; before, the decision failed
    start(List.of(A));
    assertCompletes(routedStreamedAnswer("text/event-stream"), new Usage(4, 0, 1),
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":4,"
            + "\"completion_tokens\":1}}\n\ndata: [DONE]");
    // a last line cut inside the marker is no marker
    assertFailsCutShort(routedStreamedAnswer("text/event-stream"),
        "data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: [DON");
    await(() -> inFlight() == 0);
    assertThat(outcomes.completed).isEmpty();
  }

  @Test
  void anEmptyPoolIs503() throws Exception {
    start(List.of());
    FakeEnvoy envoy = FakeEnvoy.open(channel);
    envoy.send(postHeaders(modes(BUFFERED, BUFFERED)));
    envoy.next(); // headers
    envoy.send(requestBody(completion("p"), true));
    ImmediateResponse r = envoy.next().getImmediateResponse();
    assertThat(r.getStatus().getCodeValue()).isEqualTo(503);
    assertThat(header(r, "retry-after")).isEqualTo("1");
    assertThat(error(r).path("message").asText()).isEqualTo("no endpoints in the pool");
  }

  // ------------------------------------------------------------------------ failures, ends

  @Test
  void anErrorStatusFailsTheDecisionNamingTheEndpointThatServed() throws Exception {
    start(List.of(A, B));
    FakeEnvoy envoy = routedFullDuplex(completion("x"));
    envoy.send(responseHeaders(503, "application/json", false).toBuilder()
        .setMetadataContext(FakeEnvoy.served(B)).build());
    assertThat(envoy.next().hasResponseHeaders()).isTrue();
    Throwable cause = outcomes.failed.poll(5, TimeUnit.SECONDS);
    assertThat(cause).hasMessage(B + " answered 503");
    assertThat(inFlight()).isZero();
    envoy.send(responseBody("{\"error\":{}}", true)); // still passed through
    assertThat(utf8(envoy.next().getResponseBody().getResponse().getBodyMutation()
        .getStreamedResponse().getBody())).isEqualTo("{\"error\":{}}");
    assertThat(outcomes.events).noneMatch(e -> e.startsWith("first:") || e.startsWith("complete:"));
  }

  @Test
  void aClientErrorCompletesTheDecisionWithoutUsageOrFirstToken() throws Exception {
    // a 400 for a bad prompt is the client's fault: the endpoint served the request
    start(List.of(A, B));
    FakeEnvoy envoy = routedFullDuplex(completion("x"));
    envoy.send(responseHeaders(400, "application/json", false).toBuilder()
        .setMetadataContext(FakeEnvoy.served(B)).build());
    assertThat(envoy.next().hasResponseHeaders()).isTrue();
    envoy.send(responseBody("{\"error\":{},\"usage\":{\"prompt_tokens\":5}}", true));
    envoy.next();
    assertThat(outcomes.completed.poll(5, TimeUnit.SECONDS)).isEqualTo(Usage.NONE);
    assertThat(outcomes.events).containsExactly("complete:" + B);
    assertThat(outcomes.failed).isEmpty();
    assertThat(inFlight()).isZero();
  }

  @Test
  void aTooManyRequestsAnswerFailsTheDecision() throws Exception {
    // a 429 is the endpoint refusing under load, as a 503 is
    start(List.of(A, B));
    FakeEnvoy envoy = routedFullDuplex(completion("x"));
    envoy.send(responseHeaders(429, "application/json", false).toBuilder()
        .setMetadataContext(FakeEnvoy.served(B)).build());
    assertThat(envoy.next().hasResponseHeaders()).isTrue();
    assertThat(outcomes.failed.poll(5, TimeUnit.SECONDS)).hasMessage(B + " answered 429");
    envoy.send(responseBody("{\"error\":{}}", true));
    envoy.next();
    assertThat(outcomes.events).containsExactly("failure:" + B);
    assertThat(inFlight()).isZero();
  }

  @Test
  void aStatusOrContentLengthInDigitsOtherThanAsciiIsMalformed() throws Exception {
    // HTTP writes a status code and a content-length in the ASCII digits 0-9 only; read with
    // Integer.parseInt, Arabic-Indic "٢٠٠" was a 200 that completed the decision, "+200" too,
    // and a full-width length declared a body of that length whole
    start(List.of(A));
    routedStreamedAnswer(Map.of(":status", "\u0662\u0660\u0660",
        "content-type", "application/json"));
    assertThat(outcomes.failed.poll(5, TimeUnit.SECONDS))
        .hasMessage("the endpoint answered without a valid :status");
    routedStreamedAnswer(Map.of(":status", "+200", "content-type", "application/json"));
    assertThat(outcomes.failed.poll(5, TimeUnit.SECONDS))
        .hasMessage("the endpoint answered without a valid :status");

    // a body of the length a malformed content-length would give is of unknown length: cut
    String json = "{\"usage\":{\"prompt_tokens\":6,\"completion_tokens\":2}}";
    String fullWidth = String.valueOf(json.length()).chars()
        .mapToObj(c -> String.valueOf((char) (c - '0' + '\uff10')))
        .collect(java.util.stream.Collectors.joining());
    assertFailsCutShort(routedStreamedAnswer(Map.of(":status", "200",
        "content-type", "application/json", "content-length", fullWidth)), json);
    assertFailsCutShort(routedStreamedAnswer(Map.of(":status", "200",
        "content-type", "application/json", "content-length", "+" + json.length())), json);
    // the ASCII spelling, blanks around it as Envoy may pass them, still declares it whole
    assertCompletes(routedStreamedAnswer(Map.of(":status", " 200 ",
        "content-type", "application/json", "content-length", json.length() + "\t")),
        new Usage(6, 0, 2), json);
    await(() -> inFlight() == 0);
  }

  @Test
  void aFallbackEnvoyReportsAsServedTakesTheRequestsCountsAndLifecycle() throws Exception {
    start(List.of(A, B));
    FakeEnvoy envoy = routedFullDuplex(completion("x"));
    String primary = inFlightOn(A) == 1 ? A : B;
    String fallback = primary.equals(A) ? B : A;
    assertThat(inFlightOn(fallback)).isZero();
    // Envoy could not reach the primary and says so in the served-endpoint metadata
    envoy.send(responseHeaders(200, "application/json", false).toBuilder()
        .setMetadataContext(FakeEnvoy.served(fallback)).build());
    assertThat(envoy.next().hasResponseHeaders()).isTrue();
    assertThat(inFlightOn(primary)).isZero();
    assertThat(inFlightOn(fallback)).isEqualTo(1);
    envoy.send(responseBody("{\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":1}}", true));
    envoy.next();
    assertThat(outcomes.completed.poll(5, TimeUnit.SECONDS)).isEqualTo(new Usage(2, 0, 1));
    assertThat(outcomes.events).containsExactly("first:" + fallback, "complete:" + fallback);
    assertThat(inFlight()).isZero();
  }

  static ProcessingRequest responseTrailers() {
    return ProcessingRequest.newBuilder().setResponseTrailers(
        io.envoyproxy.envoy.service.ext_proc.v3.HttpTrailers.getDefaultInstance()).build();
  }

  /** The router's listener heard exactly {@code events}, and nothing else comes within 200 ms. */
  void assertEventsSettleAs(String... events) throws Exception {
    await(() -> outcomes.events.size() >= events.length);
    Thread.sleep(200); // a second end would be reported by now: callbacks run on the transport
    assertThat(outcomes.events).containsExactly(events);
  }

  /**
   * Trailers end an answer in FULL_DUPLEX_STREAMED (its last chunk then has no end_of_stream), a
   * failed answer's trailers and the stream's end come after its decision already failed, an
   * answer may have trailers and no body, or no body at all: each decision ends exactly once, as
   * what the answer was, and the stream's end afterwards adds nothing.
   */
  @Test
  void answersEndedByTrailersOrWithoutABodyEndTheirDecisionOnce() throws Exception {
    start(List.of(A));
    // a streamed answer ended by its trailers: completed with the usage its chunks carried
    FakeEnvoy trailed = routedFullDuplex(completion("t"));
    trailed.send(responseHeaders(200, "text/event-stream", false));
    trailed.next();
    trailed.send(responseBody("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,"
        + "\"completion_tokens\":4}}\n\n", false));
    assertThat(trailed.next().getResponseBody().getResponse().getBodyMutation()
        .getStreamedResponse().getEndOfStream()).isFalse();
    trailed.send(responseTrailers());
    assertThat(trailed.next().hasResponseTrailers()).isTrue();
    assertThat(outcomes.completed.poll(5, TimeUnit.SECONDS)).isEqualTo(new Usage(3, 0, 4));
    trailed.halfClose();
    assertThat(trailed.awaitClosed().getCode()).isEqualTo(Status.Code.OK);
    assertEventsSettleAs("first:" + A, "complete:" + A);
    assertThat(inFlight()).isZero();

    // a 503 with a body and trailers: failed at its headers, and only then
    outcomes.events.clear();
    FakeEnvoy failed = routedFullDuplex(completion("f"));
    failed.send(responseHeaders(503, "application/json", false));
    failed.next();
    assertThat(outcomes.failed.poll(5, TimeUnit.SECONDS)).hasMessageContaining("503");
    failed.send(responseBody("{\"error\":\"overloaded\"}", false));
    failed.next();
    failed.send(responseTrailers());
    assertThat(failed.next().hasResponseTrailers()).isTrue();
    failed.halfClose();
    assertThat(failed.awaitClosed().getCode()).isEqualTo(Status.Code.OK);
    assertEventsSettleAs("failure:" + A);
    assertThat(outcomes.completed).isEmpty();
    assertThat(inFlight()).isZero();

    // trailers and no body: completed, no first token, usage unknown
    outcomes.events.clear();
    FakeEnvoy bare = routedFullDuplex(completion("b"));
    bare.send(responseHeaders(200, "application/json", false));
    bare.next();
    bare.send(responseTrailers());
    assertThat(bare.next().hasResponseTrailers()).isTrue();
    assertThat(outcomes.completed.poll(5, TimeUnit.SECONDS)).isEqualTo(Usage.NONE);
    bare.halfClose();
    assertThat(bare.awaitClosed().getCode()).isEqualTo(Status.Code.OK);
    assertEventsSettleAs("complete:" + A);

    // trailers after an answer that ended with its last chunk: answered, nothing more reported
    outcomes.events.clear();
    FakeEnvoy late = routedFullDuplex(completion("l"));
    late.send(responseHeaders(200, "application/json", false));
    late.next();
    late.send(responseBody("{}", true));
    late.next();
    assertThat(outcomes.completed.poll(5, TimeUnit.SECONDS)).isEqualTo(Usage.NONE);
    late.send(responseTrailers());
    assertThat(late.next().hasResponseTrailers()).isTrue();
    late.halfClose();
    assertThat(late.awaitClosed().getCode()).isEqualTo(Status.Code.OK);
    assertEventsSettleAs("first:" + A, "complete:" + A);

    // the stream ends after headers that announce an empty body, none sent: the answer is whole
    outcomes.events.clear();
    FakeEnvoy empty = routedFullDuplex(completion("e"));
    empty.send(ProcessingRequest.newBuilder().setResponseHeaders(
        io.envoyproxy.envoy.service.ext_proc.v3.HttpHeaders.newBuilder().setHeaders(
            FakeEnvoy.headerMap(Map.of(":status", "200", "content-length", "0")))).build());
    empty.next();
    empty.halfClose();
    assertThat(empty.awaitClosed().getCode()).isEqualTo(Status.Code.OK);
    assertThat(outcomes.completed.poll(5, TimeUnit.SECONDS)).isEqualTo(Usage.NONE);
    assertEventsSettleAs("complete:" + A);

    // and after headers of an answer of unknown length with no body seen: cut short, failed once
    outcomes.events.clear();
    FakeEnvoy cut = routedFullDuplex(completion("c"));
    cut.send(responseHeaders(200, "application/json", false));
    cut.next();
    cut.halfClose();
    assertThat(cut.awaitClosed().getCode()).isEqualTo(Status.Code.OK);
    assertThat(outcomes.failed.poll(5, TimeUnit.SECONDS))
        .hasMessageContaining("before the answer ended");
    assertEventsSettleAs("failure:" + A);
    assertThat(outcomes.failed).isEmpty();
    assertThat(inFlight()).isZero();
    await(() -> server.openStreams() == 0);
  }

  @Test
  void aCancelledStreamFailsItsDecisionOnce() throws Exception {
    start(List.of(A));
    FakeEnvoy envoy = routedFullDuplex(completion("x"));
    envoy.send(responseHeaders(200, "text/event-stream", false));
    envoy.next();
    envoy.send(responseBody("data: {\"choices\":[]}\n\n", false));
    envoy.next();
    assertThat(inFlight()).isEqualTo(1);
    envoy.cancel();
    assertThat(outcomes.failed.poll(5, TimeUnit.SECONDS)).isNotNull();
    await(() -> inFlight() == 0);
    await(() -> server.openStreams() == 0);
    assertThat(outcomes.failed.poll(200, TimeUnit.MILLISECONDS)).isNull(); // once
    assertThat(outcomes.events).containsExactly("first:" + A, "failure:" + A);
  }

  /**
   * The client goes away while its body is still coming: Envoy ends the ext_proc stream after
   * some body chunks, in every body mode. Nothing was picked, so nothing is reported and no
   * in-flight count moves (another request's stays), and the stream is let go with the body it
   * held.
   */
  @Test
  void aStreamCancelledMidBodyReportsNothingAndLeavesOtherPicksCounted() throws Exception {
    start(List.of(A));
    FakeEnvoy routed = routedFullDuplex(completion("kept"));
    String body = completion("y".repeat(10_000));
    for (BodySendMode mode : List.of(FULL_DUPLEX_STREAMED, STREAMED, BUFFERED)) {
      FakeEnvoy envoy = FakeEnvoy.open(channel);
      envoy.send(requestHeaders("POST", "/v1/completions", false, Map.of())
          .setProtocolConfig(modes(mode, FULL_DUPLEX_STREAMED).toBuilder()
              .setSendBodyWithoutWaitingForHeaderResponse(true)).build());
      if (mode == BUFFERED) {
        assertThat(envoy.next().hasRequestHeaders()).isTrue(); // Envoy buffers, then resets
      } else {
        envoy.send(requestBody(body.substring(0, 4_000), false));
        envoy.send(requestBody(body.substring(4_000, 8_000), false));
      }
      await(() -> server.openStreams() == 2);
      envoy.cancel();
      await(() -> server.openStreams() == 1);
      assertThat(inFlight()).as(mode.name()).isEqualTo(1);
    }
    assertThat(outcomes.events).isEmpty();
    routed.send(responseHeaders(200, "application/json", true));
    assertThat(routed.next().hasResponseHeaders()).isTrue();
    assertThat(outcomes.completed.poll(5, TimeUnit.SECONDS)).isEqualTo(Usage.NONE);
    assertThat(inFlight()).isZero();
  }

  @Test
  void aStreamClosedBeforeTheAnswerFailsItsDecision() throws Exception {
    start(List.of(A));
    FakeEnvoy envoy = routedFullDuplex(completion("x"));
    envoy.halfClose();
    assertThat(envoy.awaitClosed().getCode()).isEqualTo(Status.Code.OK);
    assertThat(outcomes.failed.poll(5, TimeUnit.SECONDS))
        .hasMessageContaining("before the answer ended");
    assertThat(inFlight()).isZero();
  }

  @Test
  void messagesOutOfOrderAreInvalidArgumentAndFreeTheDecision() throws Exception {
    start(List.of(A));
    FakeEnvoy second = routedFullDuplex(completion("y"));
    second.send(requestBody("more", true)); // a request body after the request ended
    Status s2 = second.awaitClosed();
    assertThat(s2.getCode()).isEqualTo(Status.Code.INVALID_ARGUMENT);
    assertThat(s2.getDescription()).contains("request_body").contains("AWAIT_RESPONSE")
        .contains("request_body_mode: FULL_DUPLEX_STREAMED");
    assertThat(outcomes.failed.poll(5, TimeUnit.SECONDS)).isNotNull();
    assertThat(inFlight()).isZero();
    await(() -> server.openStreams() == 0);

    FakeEnvoy third = FakeEnvoy.open(channel);
    third.send(ProcessingRequest.getDefaultInstance());
    assertThat(third.awaitClosed().getCode()).isEqualTo(Status.Code.INVALID_ARGUMENT);
  }

  @Test
  void envoysOwnReplyBeforeThePickIsAnsweredUnchangedAndRoutesNothing() throws Exception {
    // Envoy answers some requests itself while the body is still coming: a BUFFERED body past its
    // buffer limit gets its 413, a stalled upload its 408. That local reply passes through the
    // ext_proc filter's response path like any answer, so its headers reach this stream before
    // the pick was made. Before, they were "not expected in phase REQUEST_BODY": the stream ended
    // with INVALID_ARGUMENT and Envoy replaced its own 413 with a 500
    start(List.of(A));
    FakeEnvoy buffered = FakeEnvoy.open(channel);
    buffered.send(postHeaders(modes(BUFFERED, BUFFERED)));
    assertThat(buffered.next().hasRequestHeaders()).isTrue();
    buffered.send(responseHeaders(413, "text/plain", false));
    ProcessingResponse h = buffered.next();
    assertThat(h.hasResponseHeaders()).as("answer to the local reply's headers: %s", h).isTrue();
    assertThat(h.getResponseHeaders()).isEqualTo(
        io.envoyproxy.envoy.service.ext_proc.v3.HeadersResponse.getDefaultInstance());
    buffered.send(responseBody("Payload Too Large", true));
    assertThat(buffered.next().hasResponseBody()).isTrue();
    buffered.halfClose();
    assertThat(buffered.awaitClosed().getCode()).isEqualTo(Status.Code.OK);

    // FULL_DUPLEX_STREAMED: the request headers stay unanswered (Envoy no longer waits for them)
    // and the local reply's body goes back as the processor's own
    FakeEnvoy duplex = FakeEnvoy.open(channel);
    duplex.send(postHeaders(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED)));
    duplex.send(requestBody("{\"model\":", false));
    duplex.send(responseHeaders(408, "text/plain", false));
    assertThat(duplex.next().hasResponseHeaders()).isTrue();
    duplex.send(responseBody("request timeout", true));
    StreamedBodyResponse back = duplex.next().getResponseBody().getResponse().getBodyMutation()
        .getStreamedResponse();
    assertThat(utf8(back.getBody())).isEqualTo("request timeout");
    assertThat(back.getEndOfStream()).isTrue();
    duplex.halfClose();
    assertThat(duplex.awaitClosed().getCode()).isEqualTo(Status.Code.OK);

    assertThat(outcomes.events).isEmpty(); // nothing was routed, so nothing is reported
    assertThat(inFlight()).isZero();
    await(() -> server.openStreams() == 0);
  }

  /** Response headers with the {@code response.code_details} attribute Envoy sends with them. */
  static ProcessingRequest withCodeDetails(ProcessingRequest headers, String details) {
    return headers.toBuilder().putAttributes("envoy.filters.http.ext_proc", Struct.newBuilder()
        .putFields("response.code_details", Value.newBuilder().setStringValue(details).build())
        .build()).build();
  }

  @Test
  void envoysOwnReplyAfterThePickFailsTheDecisionAndCarriesNoPluginHeaders() throws Exception {
    // the pick was made, but the connection to the endpoint failed (a replica that went down):
    // Envoy replies 503 itself, and that reply runs through this filter's response path. Its
    // code details tell it from the replica's answer: the decision fails naming Envoy's reason,
    // and the session token a plugin asked for (naming the replica that was down) is not set
    yaml = """
        plugins:
        - type: session-affinity-scorer
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: session-affinity-scorer
          - pluginRef: max-score-picker
        """;
    start(List.of(A));
    FakeEnvoy envoy = routedFullDuplex(completion("hello"));
    envoy.send(withCodeDetails(responseHeaders(503, "text/plain", false),
        "upstream_reset_before_response_started{connection_failure}"));
    ProcessingResponse h = envoy.next();
    assertThat(h.getResponseHeaders()).as("answered unchanged: %s", h).isEqualTo(
        io.envoyproxy.envoy.service.ext_proc.v3.HeadersResponse.getDefaultInstance());
    Throwable cause = outcomes.failed.poll(5, TimeUnit.SECONDS);
    assertThat(cause).hasMessage("Envoy replied 503 itself "
        + "(upstream_reset_before_response_started{connection_failure}) instead of an answer from "
        + A);
    envoy.send(responseBody("upstream connect error", true));
    assertThat(envoy.next().hasResponseBody()).isTrue();
    envoy.halfClose();
    assertThat(envoy.awaitClosed().getCode()).isEqualTo(Status.Code.OK);
    assertThat(outcomes.events).containsExactly("failure:" + A);
    assertThat(inFlight()).isZero();

    // a local reply whose status alone would complete the decision (a filter's 200 or 404) is
    // no answer of the endpoint either: it fails, with no first token and no usage
    FakeEnvoy local = routedFullDuplex(completion("hello"));
    local.send(withCodeDetails(responseHeaders(200, "application/json", false),
        "direct_response"));
    assertThat(local.next().getResponseHeaders()).isEqualTo(
        io.envoyproxy.envoy.service.ext_proc.v3.HeadersResponse.getDefaultInstance());
    local.send(responseBody("{\"usage\":{\"prompt_tokens\":5}}", true));
    local.next();
    local.halfClose();
    assertThat(local.awaitClosed().getCode()).isEqualTo(Status.Code.OK);
    assertThat(outcomes.failed.poll(5, TimeUnit.SECONDS)).hasMessageContaining("(direct_response)");
    assertThat(outcomes.events).containsExactly("failure:" + A, "failure:" + A);
    assertThat(outcomes.completed).isEmpty();

    // the replica's own answer says via_upstream: served as before, token set
    FakeEnvoy served = routedFullDuplex(completion("hello"));
    served.send(withCodeDetails(responseHeaders(200, "application/json", false), "via_upstream"));
    assertThat(served.next().getResponseHeaders().getResponse().getHeaderMutation()
        .getSetHeaders(0).getHeader().getKey()).isEqualTo("x-session-token");
    served.send(responseBody("{}", true));
    served.next();
    served.halfClose();
    assertThat(outcomes.completed.poll(5, TimeUnit.SECONDS)).isNotNull();
    assertThat(inFlight()).isZero();
  }

  @Test
  void envoysOwnReplyBeforeTheRequestReachedThisFilterIsAnsweredUnchanged() throws Exception {
    // A filter ahead of ext_proc that refuses the request (a local rate limit's 429, RBAC's 403),
    // or Envoy failing to read the request, sends a local reply that runs through the response
    // path of every filter, ext_proc's too, although its request path never ran: the stream
    // opens with the reply's headers. Before, those were "not expected in phase
    // REQUEST_HEADERS": the stream ended with INVALID_ARGUMENT and, with failure_mode_allow:
    // false, Envoy replaced its 429 with a 500
    start(List.of(A));
    FakeEnvoy envoy = FakeEnvoy.open(channel);
    envoy.send(responseHeaders(429, "text/plain", false).toBuilder()
        .setProtocolConfig(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED)).build());
    ProcessingResponse h = envoy.next();
    assertThat(h.hasResponseHeaders()).as("answer to the local reply's headers: %s", h).isTrue();
    assertThat(h.getResponseHeaders()).isEqualTo(
        io.envoyproxy.envoy.service.ext_proc.v3.HeadersResponse.getDefaultInstance());
    envoy.send(responseBody("local_rate_limited", true));
    StreamedBodyResponse back = envoy.next().getResponseBody().getResponse().getBodyMutation()
        .getStreamedResponse();
    assertThat(utf8(back.getBody())).isEqualTo("local_rate_limited");
    assertThat(back.getEndOfStream()).isTrue();
    envoy.halfClose();
    assertThat(envoy.awaitClosed().getCode()).isEqualTo(Status.Code.OK);

    // BUFFERED answers: the body is answered unchanged
    FakeEnvoy buffered = FakeEnvoy.open(channel);
    buffered.send(responseHeaders(403, "text/plain", false).toBuilder()
        .setProtocolConfig(modes(BUFFERED, BUFFERED)).build());
    assertThat(buffered.next().hasResponseHeaders()).isTrue();
    buffered.send(responseBody("RBAC: access denied", true));
    ProcessingResponse b = buffered.next();
    assertThat(b.getResponseBody()).isEqualTo(
        io.envoyproxy.envoy.service.ext_proc.v3.BodyResponse.getDefaultInstance());
    buffered.halfClose();
    assertThat(buffered.awaitClosed().getCode()).isEqualTo(Status.Code.OK);

    assertThat(outcomes.events).isEmpty(); // nothing was routed, so nothing is reported
    assertThat(inFlight()).isZero();
    await(() -> server.openStreams() == 0);
  }

  /**
   * With request_header_mode SKIP, Envoy's first message is the request body, carrying the
   * protocol_config Envoy puts on a stream's first message. The stream ended with
   * INVALID_ARGUMENT "request_body is not expected in phase REQUEST_HEADERS (request body mode
   * NONE)", naming a body mode that was not the one configured and not the setting at fault.
   */
  @Test
  void requestHeadersSkippedAreRefusedNamingTheSetting() throws Exception {
    start(List.of(A));
    for (boolean trailersFirst : List.of(false, true)) {
      // an Envoy that sends no protocol_config skips the headers the same way; its stream was
      // INVALID_ARGUMENT "request_body is not expected in phase REQUEST_HEADERS", which named
      // nothing to change
      for (boolean announced : List.of(true, false)) {
        FakeEnvoy envoy = FakeEnvoy.open(channel);
        ProcessingRequest.Builder first = trailersFirst
            ? ProcessingRequest.newBuilder().setRequestTrailers(
                io.envoyproxy.envoy.service.ext_proc.v3.HttpTrailers.getDefaultInstance())
            : requestBody(completion("x"), true).toBuilder();
        if (announced) {
          first.setProtocolConfig(modes(BUFFERED, BUFFERED));
        }
        envoy.send(first.build());
        Status s = envoy.awaitClosed();
        assertThat(s.getCode()).as("announced: " + announced)
            .isEqualTo(Status.Code.FAILED_PRECONDITION);
        assertThat(s.getDescription()).contains("request_header_mode SKIP")
            .contains("request_header_mode: SEND")
            .contains(trailersFirst ? "request_trailers" : "request_body")
            .doesNotContain("\"prompt\"");
      }
    }
    assertThat(outcomes.events).isEmpty();
    await(() -> server.openStreams() == 0);
  }

  /**
   * A body mode newer than the Envoy API classes here (Envoy 1.37's GRPC is 5) reads as
   * UNRECOGNIZED: the refusal said "request_body_mode UNRECOGNIZED", and a response mode was
   * named by its number alone.
   */
  @Test
  void bodyModesTheServerCannotServeAreRefusedNamedAsEnvoysConfigurationSpellsThem()
      throws Exception {
    start(List.of(A));
    record Case(int request, int response, String named) {}
    for (Case c : List.of(
        new Case(5, FULL_DUPLEX_STREAMED.getNumber(), "request_body_mode: GRPC"),
        new Case(FULL_DUPLEX_STREAMED.getNumber(), 5, "response_body_mode: GRPC"),
        new Case(9, FULL_DUPLEX_STREAMED.getNumber(), "request_body_mode: the mode numbered 9"),
        new Case(BUFFERED.getNumber(), 9, "response_body_mode: the mode numbered 9"),
        new Case(NONE.getNumber(), FULL_DUPLEX_STREAMED.getNumber(), "request_body_mode: NONE"))) {
      FakeEnvoy envoy = FakeEnvoy.open(channel);
      envoy.send(postHeaders(ProtocolConfiguration.newBuilder()
          .setRequestBodyModeValue(c.request()).setResponseBodyModeValue(c.response()).build()));
      Status s = envoy.awaitClosed();
      assertThat(s.getCode()).as(c.named()).isEqualTo(Status.Code.FAILED_PRECONDITION);
      assertThat(s.getDescription()).as(c.named()).contains(c.named())
          .doesNotContain("UNRECOGNIZED");
    }
    assertThat(outcomes.events).isEmpty();
    await(() -> server.openStreams() == 0);
  }

  /**
   * With response_header_mode SKIP and a response body mode, Envoy sends the answer's body (or
   * trailers) without its headers. The stream ended with INVALID_ARGUMENT "response_body is not
   * expected in phase AWAIT_RESPONSE (request_body_mode: FULL_DUPLEX_STREAMED)", which named a
   * setting that was not at fault, and the README said the server could not tell this setup
   * apart.
   */
  @Test
  void responseHeadersSkippedAreRefusedNamingTheSetting() throws Exception {
    start(List.of(A));
    for (boolean trailers : List.of(false, true)) {
      FakeEnvoy envoy = routedFullDuplex(completion("r"));
      envoy.send(trailers ? responseTrailers() : responseBody("data: x\n", false));
      Status s = envoy.awaitClosed();
      assertThat(s.getCode()).isEqualTo(Status.Code.FAILED_PRECONDITION);
      assertThat(s.getDescription()).contains("response_header_mode SKIP")
          .contains("response_header_mode: SEND")
          .contains(trailers ? "response_trailers" : "response_body");
      assertThat(outcomes.failed.poll(5, TimeUnit.SECONDS)).isNotNull();
      assertThat(inFlight()).isZero();
    }
    assertThat(outcomes.events).containsExactly("failure:" + A, "failure:" + A);
    // Envoy's own reply before the request reached the filter, its headers skipped: the body
    // opens the stream, before any body mode is known, and none is named
    FakeEnvoy first = FakeEnvoy.open(channel);
    first.send(responseBody("local_rate_limited", true));
    Status s = first.awaitClosed();
    assertThat(s.getCode()).isEqualTo(Status.Code.FAILED_PRECONDITION);
    assertThat(s.getDescription()).contains("response_header_mode SKIP").doesNotContain("NONE");
    assertThat(outcomes.events).hasSize(2);
    await(() -> server.openStreams() == 0);
  }

  @Test
  void observabilityModeIsRefused() throws Exception {
    start(List.of(A));
    FakeEnvoy envoy = FakeEnvoy.open(channel);
    envoy.send(postHeaders(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED)).toBuilder()
        .setObservabilityMode(true).build());
    Status s = envoy.awaitClosed();
    assertThat(s.getCode()).isEqualTo(Status.Code.FAILED_PRECONDITION);
    assertThat(s.getDescription()).contains("observability_mode");
  }

  // -------------------------------------------------------------------- health and closing

  @Test
  void healthIsServingUntilCloseThenNotServing() throws Exception {
    // a drain long enough that a close waiting for it cannot be mistaken for a slow machine
    start(List.of(A), ExtProcServer.DEFAULT_MAX_BODY_BYTES,
        b -> b.drainTimeout(Duration.ofSeconds(60)));
    HealthGrpc.HealthBlockingStub health = HealthGrpc.newBlockingStub(channel)
        .withDeadlineAfter(5, TimeUnit.SECONDS);
    // the names upstream's chart probes: liveness and readiness, or with one replica
    // inference-extension (upstream answers any name there)
    for (String service : List.of("", "envoy.service.ext_proc.v3.ExternalProcessor", "liveness",
        "readiness", "inference-extension")) {
      assertThat(health.check(HealthCheckRequest.newBuilder().setService(service).build())
          .getStatus()).as(service).isEqualTo(ServingStatus.SERVING);
    }
    LinkedBlockingQueue<ServingStatus> watched = new LinkedBlockingQueue<>();
    HealthGrpc.newStub(channel).watch(HealthCheckRequest.newBuilder()
        .setService("envoy.service.ext_proc.v3.ExternalProcessor").build(),
        new StreamObserver<HealthCheckResponse>() {
          @Override public void onNext(HealthCheckResponse r) { watched.add(r.getStatus()); }
          @Override public void onError(Throwable t) {}
          @Override public void onCompleted() {}
        });
    assertThat(watched.poll(5, TimeUnit.SECONDS)).isEqualTo(ServingStatus.SERVING);
    long t0 = System.nanoTime();
    server.close(); // no Process stream open: the watch must not hold the drain up
    assertThat(Duration.ofNanos(System.nanoTime() - t0)).isLessThan(Duration.ofSeconds(30));
    assertThat(watched.poll(5, TimeUnit.SECONDS)).isEqualTo(ServingStatus.NOT_SERVING);
  }

  @Test
  void closeLetsAnOpenStreamFinishWithinTheDrainThenCancelsWhatIsLeft() throws Exception {
    start(List.of(A));
    FakeEnvoy finishing = routedFullDuplex(completion("x"));
    FakeEnvoy hanging = routedFullDuplex(completion("y"));
    Thread closer = new Thread(server::close);
    closer.start();
    await(() -> closer.getState() == Thread.State.TIMED_WAITING);
    finishing.send(responseHeaders(200, "application/json", true));
    assertThat(finishing.next().hasResponseHeaders()).isTrue();
    assertThat(outcomes.completed.poll(5, TimeUnit.SECONDS)).isEqualTo(Usage.NONE);
    closer.join(10_000); // the 2 s drain ends, the hanging stream is cancelled
    assertThat(closer.isAlive()).isFalse();
    assertThat(hanging.awaitClosed().getCode()).isEqualTo(Status.Code.UNAVAILABLE);
    await(() -> inFlight() == 0);
    assertThat(outcomes.failed).hasSize(1);
  }

  /**
   * With the server on an executor of the user's, the cancellations that end the streams still
   * open after the drain are run by that executor, after close() has returned; an application
   * that then shuts its pool down (or a pool that is busy) never runs them. The decisions of
   * those streams stayed in flight on their replicas until inFlightMaxAge, although the server
   * had stopped and no answer could come back through it.
   */
  @Test
  void closeReleasesThePicksOfTheStreamsItCutsBeforeItReturns() throws Exception {
    java.util.concurrent.ExecutorService pool = java.util.concurrent.Executors.newSingleThreadExecutor();
    java.util.concurrent.CountDownLatch hold = new java.util.concurrent.CountDownLatch(1);
    try {
      start(List.of(A, B), ExtProcServer.DEFAULT_MAX_BODY_BYTES,
          b -> b.executor(pool).drainTimeout(Duration.ofMillis(200)));
      FakeEnvoy streaming = routedFullDuplex(completion("x"));
      streaming.send(responseHeaders(200, "text/event-stream", false));
      streaming.next();
      FakeEnvoy waiting = routedFullDuplex(completion("y"));
      FakeEnvoy collecting = FakeEnvoy.open(channel); // still sending its body: nothing picked
      collecting.send(postHeaders(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED)));
      collecting.send(requestBody("{\"model\":", false));
      await(() -> server.openStreams() == 3);
      assertThat(inFlight()).isEqualTo(2);
      pool.execute(() -> {
        try {
          hold.await(30, TimeUnit.SECONDS); // the pool is busy while the server stops
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
        }
      });
      server.close();
      assertThat(server.streamsCutAtClose()).isEqualTo(3);
      assertThat(inFlight()).as("picks of the streams close() cut, once it has returned").isZero();
      assertThat(outcomes.failed).hasSize(2);
      hold.countDown();
      for (FakeEnvoy e : List.of(streaming, waiting, collecting)) {
        assertThat(e.awaitClosed().getCode()).isEqualTo(Status.Code.UNAVAILABLE);
      }
      await(() -> server.openStreams() == 0);
      assertThat(outcomes.failed).as("each decision failed once").hasSize(2);
      assertThat(inFlight()).isZero();
    } finally {
      hold.countDown();
      pool.shutdownNow();
      pool.awaitTermination(5, TimeUnit.SECONDS);
    }
  }

  @Test
  void streamsCutAtTheEndOfTheDrainAreLoggedWithTheirCount() throws Exception {
    java.util.logging.Logger log = java.util.logging.Logger.getLogger(ExtProcServer.class.getName());
    List<java.util.logging.LogRecord> records = new CopyOnWriteArrayList<>();
    java.util.logging.Handler handler = new java.util.logging.Handler() {
      @Override
      public void publish(java.util.logging.LogRecord r) {
        records.add(r);
      }

      @Override
      public void flush() {}

      @Override
      public void close() {}
    };
    log.addHandler(handler);
    try {
      start(List.of(A), ExtProcServer.DEFAULT_MAX_BODY_BYTES,
          b -> b.drainTimeout(Duration.ofMillis(200)));
      routedFullDuplex(completion("x"));
      routedFullDuplex(completion("y"));
      server.close();
      assertThat(records).as("a warning that the drain cut open streams")
          .anySatisfy(r -> {
            assertThat(r.getLevel()).isEqualTo(java.util.logging.Level.WARNING);
            assertThat(r.getMessage()).startsWith("2 ext_proc stream(s) still open");
          });
    } finally {
      log.removeHandler(handler);
    }
  }

  @Test
  void aDrainTimeoutBeyondNanosecondsWaitsForTheOpenStreamThenStops() throws Exception {
    start(List.of(A), ExtProcServer.DEFAULT_MAX_BODY_BYTES,
        b -> b.drainTimeout(Duration.ofSeconds(Long.MAX_VALUE))); // "as long as it takes"
    FakeEnvoy open = routedFullDuplex(completion("x"));
    CompletableFuture<Void> closing = CompletableFuture.runAsync(server::close);
    Thread.sleep(200);
    assertThat(closing).as("close() waits for the open stream").isNotDone();
    open.send(responseHeaders(200, "application/json", true));
    assertThat(open.next().hasResponseHeaders()).isTrue();
    open.halfClose();
    closing.get(10, TimeUnit.SECONDS); // returns, and without an exception
    assertThat(outcomes.completed.poll(5, TimeUnit.SECONDS)).isEqualTo(Usage.NONE);
    assertThat(outcomes.failed).isEmpty();
  }

  @Test
  void overNettyTcpOnAnEphemeralPort() throws Exception {
    router = Router.builder().endpoints(List.of(Endpoint.parse(A))).listener(outcomes).build();
    server = ExtProcServer.builder(router).port(0).host("127.0.0.1")
        .drainTimeout(Duration.ofSeconds(1)).start();
    assertThat(server.port()).isPositive();
    channel = NettyChannelBuilder.forAddress("127.0.0.1", server.port()).usePlaintext().build();
    FakeEnvoy envoy = routedFullDuplex(completion("over tcp"));
    envoy.send(responseHeaders(200, "application/json", false));
    envoy.next();
    envoy.send(responseBody("{\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":1}}", true));
    envoy.next();
    assertThat(outcomes.completed.poll(5, TimeUnit.SECONDS)).isEqualTo(new Usage(4, 0, 1));
    assertThat(HealthGrpc.newBlockingStub(channel).withDeadlineAfter(5, TimeUnit.SECONDS)
        .check(HealthCheckRequest.getDefaultInstance()).getStatus())
        .isEqualTo(ServingStatus.SERVING);
    envoy.halfClose();
    assertThat(envoy.awaitClosed().getCode()).isEqualTo(Status.Code.OK);
  }

  @Test
  void aBufferedAnswerLargerThanTheRequestLimitIsTakenOverTcp() throws Exception {
    // Envoy buffers an answer up to its own buffer limit (per_connection_buffer_limit_bytes,
    // per_request_buffer_limit_bytes), which has nothing to do with the request body limit, and
    // sends it as one message. Before, the largest message taken was maxBodyBytes + 1 MiB, so a
    // longer answer Envoy had legitimately buffered ended the stream RESOURCE_EXHAUSTED (a 500
    // for the client); and a BUFFERED request body past that size got the same instead of 413
    router = Router.builder().endpoints(List.of(Endpoint.parse(A))).listener(outcomes).build();
    int maxBody = 1 << 20;
    server = ExtProcServer.builder(router).port(0).host("127.0.0.1").maxBodyBytes(maxBody)
        .drainTimeout(Duration.ofSeconds(1)).start();
    channel = NettyChannelBuilder.forAddress("127.0.0.1", server.port()).usePlaintext().build();
    Routed routed = routedAnswer(BUFFERED, "application/json");
    assertThat(routed.destination()).isEqualTo(A);
    FakeEnvoy envoy = routed.envoy();
    String answer = "{\"choices\":[{\"text\":\"" + "x".repeat(3 * maxBody) + "\"}],"
        + "\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":3}}";
    envoy.send(responseBody(answer, true));
    assertThat(envoy.next().hasResponseBody()).isTrue();
    assertThat(outcomes.completed.poll(5, TimeUnit.SECONDS)).isEqualTo(new Usage(9, 0, 3));
    envoy.halfClose();
    assertThat(envoy.awaitClosed().getCode()).isEqualTo(Status.Code.OK);

    FakeEnvoy big = FakeEnvoy.open(channel);
    big.send(postHeaders(modes(BUFFERED, BUFFERED)));
    big.next(); // headers
    big.send(requestBody(completion("y".repeat(3 * maxBody)), true));
    ImmediateResponse r = big.next().getImmediateResponse();
    assertThat(r.getStatus().getCodeValue()).isEqualTo(413);
    assertThat(outcomes.failed).isEmpty();
  }

  @Test
  void anEmptyHostIsRefusedRatherThanBindingLoopback() {
    // before, host("") resolved to the loopback address: a server meant for every interface, or
    // for one, listened where no other machine could reach it
    router = Router.builder().endpoints(List.of(Endpoint.parse(A))).build();
    for (String empty : new String[] {"", " "}) {
      org.assertj.core.api.Assertions.assertThatThrownBy(
          () -> ExtProcServer.builder(router).host(empty))
          .as("'%s'", empty).isInstanceOf(IllegalArgumentException.class)
          .hasMessageContaining("host");
    }
  }

  @Test
  void assumedBodyModesRefusalsNameTheSettingAndItsArgument() {
    // before, they said "request body mode NONE cannot be served" (or only "request" for null):
    // nothing pointed at assumedBodyModes, and "request body mode" reads like Envoy's
    // request_body_mode, which the server reports for a filter's own configuration
    router = Router.builder().endpoints(List.of(Endpoint.parse(A))).build();
    ExtProcServer.Builder b = ExtProcServer.builder(router);
    org.assertj.core.api.Assertions.assertThatThrownBy(() -> b.assumedBodyModes(NONE, BUFFERED))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageStartingWith("assumedBodyModes(request, response): request is NONE")
        .hasMessageContaining("FULL_DUPLEX_STREAMED, BUFFERED or STREAMED")
        .hasMessageNotContaining("request_body_mode");
    org.assertj.core.api.Assertions.assertThatThrownBy(
        () -> b.assumedBodyModes(BodySendMode.UNRECOGNIZED, BUFFERED))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageStartingWith("assumedBodyModes(request, response): request is UNRECOGNIZED");
    org.assertj.core.api.Assertions.assertThatThrownBy(
        () -> b.assumedBodyModes(BUFFERED, BodySendMode.UNRECOGNIZED))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageStartingWith("assumedBodyModes(request, response): response is UNRECOGNIZED")
        .hasMessageContaining("BUFFERED_PARTIAL or NONE");
    org.assertj.core.api.Assertions.assertThatThrownBy(() -> b.assumedBodyModes(null, BUFFERED))
        .isInstanceOf(NullPointerException.class)
        .hasMessage("assumedBodyModes(request, response): request is null");
    org.assertj.core.api.Assertions.assertThatThrownBy(() -> b.assumedBodyModes(BUFFERED, null))
        .isInstanceOf(NullPointerException.class)
        .hasMessage("assumedBodyModes(request, response): response is null");
    // NONE is a response mode that is served: Envoy then sends no answer body
    assertThat(b.assumedBodyModes(BUFFERED, NONE)).isSameAs(b);
  }

  @Test
  void maxMessageBytesBoundsWhatIsTakenAndMustLeaveRoomForARequestBody() throws Exception {
    router = Router.builder().endpoints(List.of(Endpoint.parse(A))).listener(outcomes).build();
    ExtProcServer.Builder tooSmall = ExtProcServer.builder(router).port(0).host("127.0.0.1")
        .maxBodyBytes(4 << 20).maxMessageBytes(4 << 20);
    org.assertj.core.api.Assertions.assertThatThrownBy(tooSmall::start)
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("maxMessageBytes").hasMessageContaining("maxBodyBytes");
    org.assertj.core.api.Assertions.assertThatThrownBy(
        () -> ExtProcServer.builder(router).maxMessageBytes(0))
        .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("maxMessageBytes");
    server = ExtProcServer.builder(router).port(0).host("127.0.0.1").maxBodyBytes(1 << 20)
        .maxMessageBytes(2 << 20).drainTimeout(Duration.ofSeconds(1)).start();
    channel = NettyChannelBuilder.forAddress("127.0.0.1", server.port()).usePlaintext().build();
    FakeEnvoy envoy = routedAnswer(BUFFERED, "application/json").envoy();
    envoy.send(responseBody("x".repeat(3 << 20), true));
    // gRPC refuses the message and resets the stream (RESOURCE_EXHAUSTED on the server's side)
    assertThat(envoy.awaitClosed().getCode()).isNotEqualTo(Status.Code.OK);
    assertThat(outcomes.failed.poll(5, TimeUnit.SECONDS)).isNotNull();
    await(() -> inFlight() == 0);
  }

  // ------------------------------------------------------------------------------- helpers

  /**
   * A stream whose request was routed, with the server's answers to the request body (which
   * carries the pick) and to the response headers.
   */
  record Routed(FakeEnvoy envoy, ProcessingResponse bodyAnswer,
      ProcessingResponse headersAnswer) {
    /** The destination header set in the answer to the request body. */
    String destination() {
      return destinationHeader(bodyAnswer.getRequestBody().getResponse());
    }
  }

  /**
   * Opens a stream whose request body is BUFFERED and response body {@code responseMode},
   * routes a completion and passes the answer's {@code headers}.
   */
  Routed routedAnswer(BodySendMode responseMode, ProcessingRequest headers) throws Exception {
    FakeEnvoy envoy = FakeEnvoy.open(channel);
    envoy.send(postHeaders(modes(BUFFERED, responseMode)));
    envoy.next(); // headers
    envoy.send(requestBody(completion("hi"), true));
    ProcessingResponse bodyAnswer = envoy.next();
    envoy.send(headers);
    return new Routed(envoy, bodyAnswer, envoy.next());
  }

  /** {@link #routedAnswer(BodySendMode, ProcessingRequest)} of a 200 {@code contentType} answer. */
  Routed routedAnswer(BodySendMode responseMode, String contentType) throws Exception {
    return routedAnswer(responseMode, responseHeaders(200, contentType, false));
  }

  /** Opens a stream and routes a FULL_DUPLEX_STREAMED request, consuming the server's answers. */
  FakeEnvoy routedFullDuplex(String body) throws Exception {
    FakeEnvoy envoy = FakeEnvoy.open(channel);
    envoy.send(postHeaders(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED)));
    envoy.send(requestBody(body, true));
    assertThat(envoy.next().hasRequestHeaders()).isTrue();
    assertThat(envoy.next().getRequestBody().getResponse().getBodyMutation()
        .getStreamedResponse().getEndOfStream()).isTrue();
    return envoy;
  }

  /**
   * The pick's header, which must be set once, replacing the client's; beside it only the
   * restored {@code content-length} may be set (no plugin here asks for a header).
   */
  static String destinationHeader(CommonResponse common) {
    List<HeaderValueOption> set = common.getHeaderMutation().getSetHeadersList();
    assertThat(set).extracting(o -> o.getHeader().getKey())
        .containsOnlyOnce("x-gateway-destination-endpoint")
        .allMatch(k -> k.equals("x-gateway-destination-endpoint") || k.equals("content-length"));
    HeaderValueOption o = set.get(0);
    assertThat(o.getHeader().getKey()).isEqualTo("x-gateway-destination-endpoint");
    assertThat(o.getAppendAction())
        .isEqualTo(HeaderValueOption.HeaderAppendAction.OVERWRITE_IF_EXISTS_OR_ADD);
    return utf8(o.getHeader().getRawValue());
  }

  /** The value {@code common} sets {@code name} to, replacing any; null when it sets none. */
  static @org.jspecify.annotations.Nullable String setHeader(CommonResponse common, String name) {
    List<HeaderValueOption> set = common.getHeaderMutation().getSetHeadersList().stream()
        .filter(o -> o.getHeader().getKey().equals(name)).toList();
    if (set.isEmpty()) {
      return null;
    }
    assertThat(set).hasSize(1);
    assertThat(set.get(0).getAppendAction())
        .isEqualTo(HeaderValueOption.HeaderAppendAction.OVERWRITE_IF_EXISTS_OR_ADD);
    return utf8(set.get(0).getHeader().getRawValue());
  }

  static String metadataDestination(ProcessingResponse r) {
    return r.getDynamicMetadata().getFieldsOrThrow("envoy.lb").getStructValue()
        .getFieldsOrThrow("x-gateway-destination-endpoint").getStringValue();
  }

  static @org.jspecify.annotations.Nullable String header(ImmediateResponse r, String name) {
    for (HeaderValueOption o : r.getHeaders().getSetHeadersList()) {
      if (o.getHeader().getKey().equals(name)) {
        return utf8(o.getHeader().getRawValue());
      }
    }
    return null;
  }

  static JsonNode error(ImmediateResponse r) throws Exception {
    return JSON.readTree(r.getBody().toByteArray()).path("error");
  }

  int inFlight() {
    int n = 0;
    for (var c : router.endpoints()) {
      n += c.inFlightRequests();
    }
    return n;
  }

  int inFlightOn(String id) {
    for (var c : router.endpoints()) {
      if (c.id().equals(id)) {
        return c.inFlightRequests();
      }
    }
    throw new AssertionError("no endpoint " + id);
  }

  static void await(BooleanSupplier condition) throws InterruptedException {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
    while (!condition.getAsBoolean()) {
      assertThat(System.nanoTime()).as("condition within 5 s").isLessThan(deadline);
      Thread.sleep(10);
    }
  }

}
