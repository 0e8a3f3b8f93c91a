package io.epp4j.jmh;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.google.protobuf.ByteString;
import io.envoyproxy.envoy.config.core.v3.HeaderMap;
import io.envoyproxy.envoy.config.core.v3.HeaderValue;
import io.envoyproxy.envoy.extensions.filters.http.ext_proc.v3.ProcessingMode.BodySendMode;
import io.envoyproxy.envoy.service.ext_proc.v3.ExternalProcessorGrpc;
import io.envoyproxy.envoy.service.ext_proc.v3.HttpBody;
import io.envoyproxy.envoy.service.ext_proc.v3.HttpHeaders;
import io.envoyproxy.envoy.service.ext_proc.v3.ProcessingRequest;
import io.envoyproxy.envoy.service.ext_proc.v3.ProcessingResponse;
import io.envoyproxy.envoy.service.ext_proc.v3.ProtocolConfiguration;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.Router;
import io.epp4j.envoy.ExtProcServer;
import io.grpc.ManagedChannel;
import io.grpc.health.v1.HealthCheckRequest;
import io.grpc.health.v1.HealthCheckResponse;
import io.grpc.health.v1.HealthGrpc;
import io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder;
import io.grpc.stub.StreamObserver;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import org.jspecify.annotations.Nullable;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;

/**
 * What the Envoy ext_proc server adds to a routing decision: one whole {@code Process} stream as
 * Envoy runs it with FULL_DUPLEX_STREAMED bodies (request headers and body in, the pick and the
 * body back; response headers and a JSON body with usage in, both answered; the stream closed),
 * over gRPC on loopback TCP, against the same decision taken in process
 * ({@code Router.route(path, headers, body)}, first token, completion with the same usage).
 * Report {@code extProcStream / routeInProcess}; the difference is the protocol's and the
 * transport's cost per request, which a gateway pays on top of the route. {@code healthRoundTrip},
 * one unary call on the same connection, is the transport's floor: a stream makes five round
 * trips (the pick, the body, the two response messages, the close), so read {@code extProcStream}
 * against five of it.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MICROSECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(value = 1, jvmArgsAppend = {
    BenchmarkJvm.HEAP_MIN, BenchmarkJvm.HEAP_MAX, BenchmarkJvm.PRE_TOUCH, BenchmarkJvm.HUGE_PAGES})
public class ExtProcBenchmark {
  private static final int PROMPTS = 64;
  private static final String PATH = "/v1/completions";
  private static final Map<String, String> HEADERS = Map.of("content-type", "application/json");
  private static final byte[] ANSWER = ("{\"object\":\"text_completion\",\"choices\":[{\"text\":\"ok\"}],"
      + "\"usage\":{\"prompt_tokens\":300,\"completion_tokens\":16,\"total_tokens\":316}}")
      .getBytes(StandardCharsets.UTF_8);
  private static final Usage USAGE = new Usage(300, 0, 16);
  private static final HealthCheckRequest HEALTH_REQUEST = HealthCheckRequest.newBuilder()
      .setService(ExternalProcessorGrpc.SERVICE_NAME).build();

  @Param({"1024", "10240"})
  public int promptBytes;

  @Param({"16"})
  public int endpoints;

  /**
   * Where the server runs the streams' callbacks: {@code direct} (the transport's own threads,
   * the server's default) or {@code pool} (a cached thread pool, as gRPC's shared executor is,
   * given with {@code executor(...)}).
   */
  @Param({"direct", "pool"})
  public String serverExecutor;

  private Router router;
  private ExtProcServer server;
  private ManagedChannel channel;
  private ExternalProcessorGrpc.ExternalProcessorStub stub;
  private HealthGrpc.HealthBlockingStub health;
  private @Nullable ExecutorService pool;
  private byte[][] bodies;
  private ProcessingRequest[] requestBodies;
  private ProcessingRequest requestHeaders;
  private ProcessingRequest responseHeaders;
  private ProcessingRequest responseBody;
  private int next;

  @Setup(Level.Trial)
  public void setUp() throws IOException {
    SplittableRandom rnd = new SplittableRandom(42);
    router = Router.builder().endpoints(BenchmarkPrompts.endpoints(endpoints)).randomSeed(1)
        .build();
    BenchmarkPrompts.publishMetrics(router, rnd, "balanced");
    String[] prompts = BenchmarkPrompts.prompts(rnd, PROMPTS, 16, promptBytes);
    ObjectMapper json = new ObjectMapper();
    bodies = new byte[PROMPTS][];
    requestBodies = new ProcessingRequest[PROMPTS];
    for (int i = 0; i < PROMPTS; i++) {
      bodies[i] = json.writeValueAsBytes(Map.of("model", BenchmarkPrompts.MODEL,
          "prompt", prompts[i], "max_tokens", 16));
      requestBodies[i] = ProcessingRequest.newBuilder().setRequestBody(HttpBody.newBuilder()
          .setBody(ByteString.copyFrom(bodies[i])).setEndOfStream(true)).build();
    }
    requestHeaders = ProcessingRequest.newBuilder()
        .setRequestHeaders(HttpHeaders.newBuilder().setHeaders(headers(Map.of(
            ":method", "POST", ":path", PATH, ":authority", "gateway",
            "content-type", "application/json"))))
        .setProtocolConfig(ProtocolConfiguration.newBuilder()
            .setRequestBodyMode(BodySendMode.FULL_DUPLEX_STREAMED)
            .setResponseBodyMode(BodySendMode.FULL_DUPLEX_STREAMED))
        .build();
    responseHeaders = ProcessingRequest.newBuilder()
        .setResponseHeaders(HttpHeaders.newBuilder().setHeaders(headers(Map.of(
            ":status", "200", "content-type", "application/json"))))
        .build();
    responseBody = ProcessingRequest.newBuilder().setResponseBody(HttpBody.newBuilder()
        .setBody(ByteString.copyFrom(ANSWER)).setEndOfStream(true)).build();
    ExtProcServer.Builder sb = ExtProcServer.builder(router).host("127.0.0.1").port(0);
    if (serverExecutor.equals("pool")) {
      pool = Executors.newCachedThreadPool(r -> {
        Thread t = new Thread(r, "ext-proc-callbacks");
        t.setDaemon(true);
        return t;
      });
      sb.executor(pool);
    }
    server = sb.start();
    // the client stands in for Envoy, which is no Java program: its callbacks run where they
    // arrive, so that its own thread hand-offs add as little as they can to the figure
    channel = NettyChannelBuilder.forAddress("127.0.0.1", server.port()).usePlaintext()
        .directExecutor().build();
    stub = ExternalProcessorGrpc.newStub(channel);
    health = HealthGrpc.newBlockingStub(channel);
    // the index holds every family, as in RouteBenchmark
    for (int round = 0; round < 2; round++) {
      for (byte[] body : bodies) {
        router.route(PATH, HEADERS, body).onComplete(USAGE);
      }
    }
  }

  @TearDown(Level.Trial)
  public void tearDown() throws InterruptedException {
    channel.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    server.close();
    router.close();
    ExecutorService p = pool;
    if (p != null) {
      p.shutdownNow();
    }
  }

  /** The decision in process, with the lifecycle the stream below reports. */
  @Benchmark
  public RoutingDecision routeInProcess() {
    RoutingDecision d = router.route(PATH, HEADERS, bodies[next++ & (PROMPTS - 1)]);
    d.onFirstToken();
    d.onComplete(USAGE);
    return d;
  }

  /**
   * The transport's own floor, measured beside it: one unary call (the health service's
   * {@code Check}) over the same connection to the same server, a single round trip.
   */
  @Benchmark
  public HealthCheckResponse healthRoundTrip() {
    return health.check(HEALTH_REQUEST);
  }

  /** One request's whole ext_proc stream; returns the pick. */
  @Benchmark
  public String extProcStream() throws InterruptedException {
    Stream s = new Stream();
    StreamObserver<ProcessingRequest> out = stub.process(s);
    out.onNext(requestHeaders);
    out.onNext(requestBodies[next++ & (PROMPTS - 1)]);
    ProcessingResponse pick = s.take(); // the headers answer with the pick
    s.take(); // the body, sent back
    out.onNext(responseHeaders);
    out.onNext(responseBody);
    s.take();
    s.take();
    out.onCompleted();
    s.awaitEnd();
    return pick.getRequestHeaders().getResponse().getHeaderMutation().getSetHeaders(0)
        .getHeader().getRawValue().toStringUtf8();
  }

  private static HeaderMap headers(Map<String, String> h) {
    HeaderMap.Builder b = HeaderMap.newBuilder();
    h.forEach((k, v) -> b.addHeaders(HeaderValue.newBuilder().setKey(k)
        .setRawValue(ByteString.copyFromUtf8(v))));
    return b.build();
  }

  /** Envoy's side of one stream: the server's answers, in order, and the stream's end. */
  private static final class Stream implements StreamObserver<ProcessingResponse> {
    private static final ProcessingResponse END = ProcessingResponse.getDefaultInstance();
    private final BlockingQueue<ProcessingResponse> answers = new ArrayBlockingQueue<>(8);
    private volatile @Nullable Throwable error;

    @Override
    public void onNext(ProcessingResponse r) {
      answers.add(r);
    }

    @Override
    public void onError(Throwable t) {
      error = t;
      answers.add(END);
    }

    @Override
    public void onCompleted() {
      answers.add(END);
    }

    ProcessingResponse take() throws InterruptedException {
      ProcessingResponse r = answers.poll(10, TimeUnit.SECONDS);
      if (r == null || r == END) {
        throw new IllegalStateException("the ext_proc stream ended or stalled early", error);
      }
      if (r.hasImmediateResponse()) {
        throw new IllegalStateException("the server rejected the request: "
            + r.getImmediateResponse().getStatus().getCode());
      }
      return r;
    }

    void awaitEnd() throws InterruptedException {
      ProcessingResponse r = answers.poll(10, TimeUnit.SECONDS);
      if (r != END || error != null) {
        throw new IllegalStateException("the ext_proc stream did not end cleanly", error);
      }
    }
  }
}
