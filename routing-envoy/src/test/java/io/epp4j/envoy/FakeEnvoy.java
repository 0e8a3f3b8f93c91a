package io.epp4j.envoy;

import static org.assertj.core.api.Assertions.assertThat;

import com.google.protobuf.ByteString;
import com.google.protobuf.ListValue;
import com.google.protobuf.Struct;
import com.google.protobuf.Value;
import io.envoyproxy.envoy.config.core.v3.HeaderMap;
import io.envoyproxy.envoy.config.core.v3.HeaderValue;
import io.envoyproxy.envoy.config.core.v3.Metadata;
import io.envoyproxy.envoy.extensions.filters.http.ext_proc.v3.ProcessingMode.BodySendMode;
import io.envoyproxy.envoy.service.ext_proc.v3.ExternalProcessorGrpc;
import io.envoyproxy.envoy.service.ext_proc.v3.HeaderMutation;
import io.envoyproxy.envoy.service.ext_proc.v3.HttpBody;
import io.envoyproxy.envoy.service.ext_proc.v3.HttpHeaders;
import io.envoyproxy.envoy.service.ext_proc.v3.HttpTrailers;
import io.envoyproxy.envoy.service.ext_proc.v3.ProcessingRequest;
import io.envoyproxy.envoy.service.ext_proc.v3.ProcessingResponse;
import io.envoyproxy.envoy.service.ext_proc.v3.ProtocolConfiguration;
import io.grpc.Channel;
import io.grpc.Status;
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientResponseObserver;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * Plays Envoy's part of one {@code Process} stream: sends what the ext_proc filter would send and
 * collects the server's answers, with timeouts on every wait.
 */
final class FakeEnvoy implements ClientResponseObserver<ProcessingRequest, ProcessingResponse> {
  private final LinkedBlockingQueue<ProcessingResponse> received = new LinkedBlockingQueue<>();
  /** The stream's end as the server closed it: OK or its error status. */
  final CompletableFuture<Status> closed = new CompletableFuture<>();
  private ClientCallStreamObserver<ProcessingRequest> requests;

  private FakeEnvoy() {}

  static FakeEnvoy open(Channel channel) {
    FakeEnvoy e = new FakeEnvoy();
    ExternalProcessorGrpc.newStub(channel).process(e);
    return e;
  }

  @Override
  public void beforeStart(ClientCallStreamObserver<ProcessingRequest> requestStream) {
    this.requests = requestStream;
  }

  @Override
  public void onNext(ProcessingResponse value) {
    received.add(value);
  }

  @Override
  public void onError(Throwable t) {
    closed.complete(Status.fromThrowable(t));
  }

  @Override
  public void onCompleted() {
    closed.complete(Status.OK);
  }

  FakeEnvoy send(ProcessingRequest r) {
    requests.onNext(r);
    return this;
  }

  void halfClose() {
    requests.onCompleted();
  }

  void cancel() {
    requests.cancel("client went away", null);
  }

  /**
   * The next answer, waiting up to 5 s; its header mutations must pass the checks Envoy makes
   * before applying them ({@link EnvoyMutationCheck}), as Envoy would reply 500 otherwise.
   */
  ProcessingResponse next() throws InterruptedException {
    ProcessingResponse r = received.poll(5, TimeUnit.SECONDS);
    assertThat(r).as("an answer from the ext_proc server within 5 s").isNotNull();
    assertThat(mutations(r)).allSatisfy(m -> assertThat(EnvoyMutationCheck.refusals(m))
        .as("what Envoy would refuse in %s", r).isEmpty());
    return r;
  }

  private static List<HeaderMutation> mutations(ProcessingResponse r) {
    return switch (r.getResponseCase()) {
      case REQUEST_HEADERS -> List.of(r.getRequestHeaders().getResponse().getHeaderMutation());
      case RESPONSE_HEADERS -> List.of(r.getResponseHeaders().getResponse().getHeaderMutation());
      case REQUEST_BODY -> List.of(r.getRequestBody().getResponse().getHeaderMutation());
      case RESPONSE_BODY -> List.of(r.getResponseBody().getResponse().getHeaderMutation());
      case REQUEST_TRAILERS -> List.of(r.getRequestTrailers().getHeaderMutation());
      case RESPONSE_TRAILERS -> List.of(r.getResponseTrailers().getHeaderMutation());
      case IMMEDIATE_RESPONSE -> List.of(r.getImmediateResponse().getHeaders());
      case RESPONSE_NOT_SET -> List.of();
    };
  }

  /** Asserts that no answer arrives within {@code millis}. */
  void expectNothingFor(long millis) throws InterruptedException {
    assertThat(received.poll(millis, TimeUnit.MILLISECONDS)).as("no answer yet").isNull();
  }

  Status awaitClosed() throws Exception {
    return closed.get(5, TimeUnit.SECONDS);
  }

  // ----------------------------------------------------------------------- message builders

  static ProtocolConfiguration modes(BodySendMode request, BodySendMode response) {
    return ProtocolConfiguration.newBuilder().setRequestBodyMode(request)
        .setResponseBodyMode(response).build();
  }

  static HeaderMap headerMap(Map<String, String> headers) {
    HeaderMap.Builder b = HeaderMap.newBuilder();
    headers.forEach((k, v) -> b.addHeaders(HeaderValue.newBuilder().setKey(k)
        .setRawValue(ByteString.copyFromUtf8(v))));
    return b.build();
  }

  static ProcessingRequest.Builder requestHeaders(String method, String path, boolean eos,
      Map<String, String> extra) {
    HeaderMap.Builder h = HeaderMap.newBuilder()
        .addHeaders(HeaderValue.newBuilder().setKey(":method").setRawValue(ByteString.copyFromUtf8(method)))
        .addHeaders(HeaderValue.newBuilder().setKey(":path").setRawValue(ByteString.copyFromUtf8(path)))
        .addHeaders(HeaderValue.newBuilder().setKey(":authority").setRawValue(ByteString.copyFromUtf8("gw")))
        .addHeaders(HeaderValue.newBuilder().setKey("content-type").setRawValue(ByteString.copyFromUtf8("application/json")));
    extra.forEach((k, v) -> h.addHeaders(HeaderValue.newBuilder().setKey(k).setRawValue(ByteString.copyFromUtf8(v))));
    return ProcessingRequest.newBuilder()
        .setRequestHeaders(HttpHeaders.newBuilder().setHeaders(h).setEndOfStream(eos));
  }

  static ProcessingRequest postHeaders(ProtocolConfiguration modes) {
    return requestHeaders("POST", "/v1/completions", false, Map.of()).setProtocolConfig(modes).build();
  }

  static ProcessingRequest requestBody(String text, boolean eos) {
    return requestBody(ByteString.copyFromUtf8(text), eos);
  }

  static ProcessingRequest requestBody(ByteString bytes, boolean eos) {
    return ProcessingRequest.newBuilder()
        .setRequestBody(HttpBody.newBuilder().setBody(bytes).setEndOfStream(eos)).build();
  }

  static ProcessingRequest requestTrailers() {
    return ProcessingRequest.newBuilder().setRequestTrailers(HttpTrailers.getDefaultInstance()).build();
  }

  static ProcessingRequest responseHeaders(int status, String contentType, boolean eos) {
    return ProcessingRequest.newBuilder().setResponseHeaders(HttpHeaders.newBuilder()
        .setHeaders(headerMap(Map.of(":status", String.valueOf(status), "content-type", contentType)))
        .setEndOfStream(eos)).build();
  }

  static ProcessingRequest responseBody(String text, boolean eos) {
    return ProcessingRequest.newBuilder().setResponseBody(HttpBody.newBuilder()
        .setBody(ByteString.copyFromUtf8(text)).setEndOfStream(eos)).build();
  }

  static ProcessingRequest responseBody(byte[] bytes, boolean eos) {
    return ProcessingRequest.newBuilder().setResponseBody(HttpBody.newBuilder()
        .setBody(ByteString.copyFrom(bytes)).setEndOfStream(eos)).build();
  }

  static Metadata subsetHint(List<String> endpoints) {
    ListValue.Builder list = ListValue.newBuilder();
    endpoints.forEach(e -> list.addValues(Value.newBuilder().setStringValue(e)));
    return Metadata.newBuilder().putFilterMetadata(ExtProcMessages.SUBSET_HINT_NAMESPACE,
        Struct.newBuilder().putFields(ExtProcMessages.SUBSET_KEY,
            Value.newBuilder().setListValue(list).build()).build()).build();
  }

  static Metadata served(String endpoint) {
    return Metadata.newBuilder().putFilterMetadata(ExtProcMessages.LB_NAMESPACE,
        Struct.newBuilder().putFields(ExtProcMessages.SERVED_KEY,
            Value.newBuilder().setStringValue(endpoint).build()).build()).build();
  }

  static String completion(String prompt) {
    return "{\"model\":\"m\",\"prompt\":\"" + prompt + "\",\"max_tokens\":5}";
  }

  static String utf8(ByteString b) {
    return b.toString(StandardCharsets.UTF_8);
  }
}
