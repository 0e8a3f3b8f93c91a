package io.epp4j.envoy;

import static io.envoyproxy.envoy.extensions.filters.http.ext_proc.v3.ProcessingMode.BodySendMode.FULL_DUPLEX_STREAMED;
import static io.epp4j.envoy.FakeEnvoy.completion;
import static io.epp4j.envoy.FakeEnvoy.modes;
import static io.epp4j.envoy.FakeEnvoy.postHeaders;
import static io.epp4j.envoy.FakeEnvoy.requestBody;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.epp4j.api.Endpoint;
import io.epp4j.core.Router;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.health.v1.HealthCheckRequest;
import io.grpc.health.v1.HealthCheckResponse;
import io.grpc.health.v1.HealthCheckResponse.ServingStatus;
import io.grpc.health.v1.HealthGrpc;
import io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder;
import io.grpc.stub.StreamObserver;
import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * The health-only port, as the upstream endpoint picker serves its probes on
 * {@code --grpc-health-port}: plaintext, beside the ext_proc port's own health service.
 */
class HealthPortTest extends MainProcessTest {
  static final List<String> SERVICES = List.of("", "envoy.service.ext_proc.v3.ExternalProcessor",
      "liveness", "readiness", "inference-extension");
  ManagedChannel plaintext(int port) {
    return channel(port, InsecureChannelCredentials.create());
  }

  static ServingStatus check(ManagedChannel ch, String service) {
    return HealthGrpc.newBlockingStub(ch).withDeadlineAfter(5, TimeUnit.SECONDS)
        .check(HealthCheckRequest.newBuilder().setService(service).build()).getStatus();
  }

  @Test
  void theHealthPortAnswersInPlaintextWhileExtProcIsServedOverTlsAndTurnsNotServingAtClose()
      throws Exception {
    Router router = Router.builder().endpoints(List.of(Endpoint.parse(A))).build();
    toClose.add(router);
    ExtProcServer server = ExtProcServer.builder(router).port(0).host("127.0.0.1").healthPort(0)
        .selfSignedTls().drainTimeout(Duration.ofSeconds(60)).start();
    toClose.add(server);
    int healthPort = server.healthPort();
    assertThat(healthPort).isPositive().isNotEqualTo(server.port());

    ManagedChannel health = plaintext(healthPort);
    for (String service : SERVICES) {
      assertThat(check(health, service)).as(service).isEqualTo(ServingStatus.SERVING);
    }
    // health only: ext_proc is not served there
    FakeEnvoy wrongPort = FakeEnvoy.open(health);
    wrongPort.send(postHeaders(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED)));
    assertThat(wrongPort.awaitClosed().getCode()).isEqualTo(Status.Code.UNIMPLEMENTED);
    // and the ext_proc port still wants TLS
    assertThatThrownBy(() -> check(plaintext(server.port()), ""))
        .isInstanceOf(StatusRuntimeException.class);

    // a stream still open holds close() in its drain: meanwhile probes hear NOT_SERVING
    ManagedChannel tls = NettyChannelBuilder.forAddress("127.0.0.1", server.port(),
        io.grpc.TlsChannelCredentials.newBuilder()
            .trustManager(new TlsServingTest.Trusting()).build()).build();
    toClose.add(() -> tls.shutdownNow().awaitTermination(5, TimeUnit.SECONDS));
    FakeEnvoy open = FakeEnvoy.open(tls);
    open.send(postHeaders(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED)));
    open.send(requestBody(completion("held"), true));
    assertThat(open.next().hasRequestHeaders()).isTrue();
    LinkedBlockingQueue<ServingStatus> watched = new LinkedBlockingQueue<>();
    HealthGrpc.newStub(health).watch(HealthCheckRequest.newBuilder().setService("").build(),
        new StreamObserver<HealthCheckResponse>() {
          @Override public void onNext(HealthCheckResponse r) { watched.add(r.getStatus()); }
          @Override public void onError(Throwable t) {}
          @Override public void onCompleted() {}
        });
    assertThat(watched.poll(5, TimeUnit.SECONDS)).isEqualTo(ServingStatus.SERVING);
    Thread closer = new Thread(server::close);
    closer.start();
    try {
      assertThat(watched.poll(5, TimeUnit.SECONDS)).isEqualTo(ServingStatus.NOT_SERVING);
      for (String service : SERVICES) {
        assertThat(check(health, service)).as(service).isEqualTo(ServingStatus.NOT_SERVING);
      }
      assertThat(closer.isAlive()).as("still draining the open stream").isTrue();
    } finally {
      open.cancel();
      closer.join(30_000);
    }
    assertThat(closer.isAlive()).isFalse();
    assertThatThrownBy(() -> check(plaintext(healthPort), ""))
        .isInstanceOfSatisfying(StatusRuntimeException.class,
            e -> assertThat(e.getStatus().getCode()).isEqualTo(Status.Code.UNAVAILABLE));
  }

  @Test
  void grpcHealthPortServesPlaintextHealthWithSecureServingToo() throws Exception {
    Main.Running r = main("--secure-serving", "--grpc-health-port", "0");
    int port = r.server.healthPort();
    assertThat(port).isPositive();
    assertThat(out.toString(StandardCharsets.UTF_8))
        .contains("gRPC health on :" + port + " (plaintext)");
    assertThat(check(plaintext(port), "readiness")).isEqualTo(ServingStatus.SERVING);
  }

  @Test
  void theSameHealthPortAsTheExtProcPortOpensNoSecondPort() throws Exception {
    int free;
    try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
      free = s.getLocalPort();
    }
    Main.Running r = mainOn(String.valueOf(free), "--grpc-health-port", String.valueOf(free));
    assertThat(r.server.port()).isEqualTo(free);
    assertThat(r.server.healthPort()).isEqualTo(-1);
    assertThat(check(plaintext(free), "")).isEqualTo(ServingStatus.SERVING);
  }

  @Test
  void theDefaultHealthPortIsUpstreamsAndATakenOneOnlyWarnsUnlessGiven() throws Exception {
    assertThat(ExtProcServer.DEFAULT_HEALTH_PORT).isEqualTo(9003);
    ServerSocket taken = null;
    try {
      try {
        taken = new ServerSocket();
        taken.bind(new InetSocketAddress("127.0.0.1", ExtProcServer.DEFAULT_HEALTH_PORT));
      } catch (IOException e) {
        // held by something else on this machine: taken all the same
      }
      Main.Running r = main();
      assertThat(r.server.healthPort()).isEqualTo(-1);
      assertThat(err.toString(StandardCharsets.UTF_8)).contains("warning: cannot listen on "
          + "127.0.0.1:9003 (gRPC health)").contains("ext_proc port only");
      assertThat(check(plaintext(r.server.port()), "")).isEqualTo(ServingStatus.SERVING);

      err.reset();
      try {
        main("--grpc-health-port", "9003");
        throw new AssertionError("started on a taken --grpc-health-port");
      } catch (Main.Exit e) {
        assertThat(e.code).isEqualTo(1);
      }
      assertThat(err.toString(StandardCharsets.UTF_8))
          .contains("routing-envoy: cannot listen on 127.0.0.1:9003 (gRPC health)");
    } finally {
      if (taken != null) {
        taken.close();
      }
    }
  }

  @Test
  void aBadHealthPortNamesTheOption() {
    try {
      main("--grpc-health-port", "70000");
      throw new AssertionError("started");
    } catch (Main.Exit e) {
      assertThat(e.code).isEqualTo(2);
    }
    assertThat(err.toString(StandardCharsets.UTF_8))
        .contains("--grpc-health-port: '70000' is not a port (0..65535)");
  }
}
