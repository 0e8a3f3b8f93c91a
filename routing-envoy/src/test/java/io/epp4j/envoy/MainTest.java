package io.epp4j.envoy;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.epp4j.api.Endpoint;
import io.grpc.ManagedChannel;
import io.grpc.health.v1.HealthCheckRequest;
import io.grpc.health.v1.HealthCheckResponse.ServingStatus;
import io.grpc.health.v1.HealthGrpc;
import io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class MainTest extends MainWithCapturedOutput {

  @Test
  void mistakesNameTheOptionAndExitWith2() {
    assertThat(exitOf("--port", "0")).isEqualTo(2);
    assertThat(err()).contains("--endpoints is required").contains("usage: routing-envoy");
    err.reset();
    assertThat(exitOf("--endpoints", "10.0.0.1")).isEqualTo(2);
    assertThat(err()).contains("--endpoints: '10.0.0.1' is not host:port");
    err.reset();
    assertThat(exitOf("--endpoints=10.0.0.1:80", "--max-body-size", "3TB")).isEqualTo(2);
    assertThat(err()).contains("--max-body-size: '3TB'");
    err.reset();
    assertThat(exitOf("--endpoints=10.0.0.1:80", "--max-message-size", "none")).isEqualTo(2);
    assertThat(err()).contains("--max-message-size: 'none'");
    err.reset();
    assertThat(exitOf("--endpoints=10.0.0.1:80", "--max-body-size", "16MB",
        "--max-message-size", "16MB")).isEqualTo(2);
    assertThat(err()).contains("--max-message-size").contains("--max-body-size");
    err.reset();
    assertThat(exitOf("--endpoints=10.0.0.1:80", "--colour", "red")).isEqualTo(2);
    assertThat(err()).contains("unknown option '--colour'");
    err.reset();
    assertThat(exitOf("--endpoints=10.0.0.1:80", "--preset", "fastest")).isEqualTo(2);
    assertThat(err()).contains("--preset: unknown preset 'fastest'");
    err.reset();
    assertThat(exitOf("--endpoints=10.0.0.1:80", "--config", "epp.yaml", "--preset", "epp4j"))
        .isEqualTo(2);
    assertThat(err()).contains("--config and --preset are both given");
    err.reset();
    assertThat(exitOf("--endpoints=10.0.0.1:80", "--drain-timeout", "-1s")).isEqualTo(2);
    assertThat(err()).contains("--drain-timeout");
  }

  /**
   * An option whose value was left out took the next argument as its value, whatever it was:
   * {@code --session-headers --secure-serving} read a session header named
   * {@code --secure-serving} and served plaintext, {@code --config -x} looked for a file named
   * {@code -x}.
   */
  @Test
  void anOptionFollowedByAnotherOptionInsteadOfItsValueIsAUsageErrorNamingBoth() {
    String[][] cases = {
        {"--session-headers", "--secure-serving"}, {"--config", "-x"},
        {"--config-file", "-h"}, {"--host", "-v"}, {"--metrics-path", "-q"}};
    for (String[] c : cases) {
      err.reset();
      assertThat(exitOf("--endpoints=10.0.0.1:80", "--port=0", "--metrics-enabled=false",
          c[0], c[1])).as(String.join(" ", c)).isEqualTo(2);
      assertThat(err()).as(String.join(" ", c)).contains(c[0] + " needs a value, but is "
          + "followed by the option " + c[1] + " (a value that begins with a dash and is not a "
          + "number is given as " + c[0] + "=VALUE)");
    }
    // a negative number is a value, for the option to refuse
    err.reset();
    assertThat(exitOf("--endpoints=10.0.0.1:80", "--port", "-1")).isEqualTo(2);
    assertThat(err()).contains("--port: '-1' is not a port");
    assertThat(Main.parse(new String[] {"--zap-log-level", "-2", "--cert-path=-x"}))
        .containsEntry("zap-log-level", "-2").containsEntry("cert-path", "-x");
  }

  /**
   * An empty item in a list option ({@code a,,b}, a trailing comma) was dropped unseen: it is
   * more likely an item lost in an edit than meant, and the simulator's lists refuse it.
   */
  @Test
  void anEmptyItemInAListOptionIsAUsageErrorNamingTheOption() {
    err.reset();
    assertThat(exitOf("--endpoints=10.0.0.1:80,,10.0.0.2:80", "--port=0")).isEqualTo(2);
    assertThat(err()).contains("--endpoints: item 2 of '10.0.0.1:80,,10.0.0.2:80' is empty");
    err.reset();
    assertThat(exitOf("--endpoints=10.0.0.1:80,", "--port=0")).isEqualTo(2);
    assertThat(err()).contains("--endpoints: item 2 of '10.0.0.1:80,' is empty");
    err.reset();
    assertThat(exitOf("--endpoints=10.0.0.1:80", "--port=0", "--session-headers", "x-a,,x-b"))
        .isEqualTo(2);
    assertThat(err()).contains("--session-headers: item 2 of 'x-a,,x-b' is empty");
  }

  /** Integer.parseInt read the digits of other scripts: {@code --port ٩٠٠٢} listened on 9002. */
  @Test
  void numbersTakeOnlyTheDigits0To9() {
    String arabic = "\u0669\u0660\u0660\u0662";
    String[][] cases = {{"--port", arabic}, {"--grpc-health-port", arabic},
        {"--model-server-metrics-port", "\uff18\uff10\uff18\uff10"},
        {"--metrics-port", "\u0663"}, {"--v", "\u0663"}, {"--zap-log-level", "\u0663"}};
    for (String[] c : cases) {
      err.reset();
      // accepted, the server would start: on a free port unless the port is the case
      String port = c[0].equals("--port") ? "--grpc-health-port=0" : "--port=0";
      assertThat(exitOf("--endpoints=10.0.0.1:80", "--metrics-enabled=false",
          "--host=127.0.0.1", port, c[0], c[1])).as(c[0]).isEqualTo(2);
      assertThat(err()).as(c[0]).contains(c[0] + ": '" + c[1] + "'");
    }
  }

  @Test
  void endpointsWithoutAnyEndpointAreRefused() {
    // before, commas and blanks alone passed the "required" check and the server started with an
    // empty pool, answering every request 503
    for (String none : new String[] {",", " , ", ",,"}) {
      err.reset();
      assertThat(exitOf("--endpoints", none, "--port=0", "--metrics-enabled=false")).isEqualTo(2);
      assertThat(err()).contains("--endpoints");
    }
  }

  @Test
  void endpointsMustBeIpAddressesAsEnvoysOriginalDstClusterReadsThePick() {
    // Envoy's ORIGINAL_DST cluster takes x-gateway-destination-endpoint only as a resolved
    // ip:port; before, a host name was accepted and Envoy then failed every request
    for (String named : new String[] {"vllm-0:8000", "10.0.0.1:8000,vllm.svc.local:8000",
        "localhost:8000", "10.0.0.256:8000", "[fd00::zz]:8000"}) {
      err.reset();
      assertThat(exitOf("--endpoints", named, "--port=0", "--metrics-enabled=false"))
          .as(named).isEqualTo(2);
      assertThat(err()).as(named).contains("--endpoints").contains("IP address");
    }
    try (Main.Running r = Main.start(new String[] {"--endpoints", "10.0.0.1:8000,[fd00::1]:8000",
        "--port=0", "--host=127.0.0.1", "--metrics-enabled=false", "--drain-timeout=1s"},
        new PrintStream(out, true, StandardCharsets.UTF_8),
        new PrintStream(err, true, StandardCharsets.UTF_8))) {
      assertThat(r.router.endpoints()).hasSize(2);
    } catch (Main.Exit e) {
      throw new AssertionError("IP endpoints refused: " + err(), e);
    }
  }

  @Test
  void anEndpointsRoleBecomesItsRoleLabelAndAnUnknownRoleIsAUsageError() throws Exception {
    // prefill/decode disaggregation needs the replicas' roles: without a way to give them on the
    // command line every replica was unlabelled, prefill-filter kept none, and nothing split
    try (Main.Running r = Main.start(new String[] {"--endpoints",
        "10.0.0.1:8000=prefill,10.0.0.2:8000=decode;zone=b,10.0.0.3:8000", "--port=0",
        "--host=127.0.0.1", "--metrics-enabled=false", "--drain-timeout=1s"},
        new PrintStream(out, true, StandardCharsets.UTF_8),
        new PrintStream(err, true, StandardCharsets.UTF_8))) {
      Map<String, Map<String, String>> labels = new java.util.TreeMap<>();
      r.router.endpoints().forEach(c -> labels.put(c.id(), c.endpoint().labels()));
      assertThat(labels).containsExactly(
          Map.entry("10.0.0.1:8000", Map.of(Endpoint.ROLE_LABEL, "prefill")),
          Map.entry("10.0.0.2:8000", Map.of(Endpoint.ROLE_LABEL, "decode", "zone", "b")),
          Map.entry("10.0.0.3:8000", Map.of()));
    } catch (Main.Exit e) {
      throw new AssertionError("roles refused: " + err(), e);
    }
    err.reset();
    assertThat(exitOf("--endpoints", "10.0.0.1:8000=prefil", "--port=0")).isEqualTo(2);
    assertThat(err()).contains("--endpoints: '10.0.0.1:8000=prefil'").contains("'prefil'");
  }

  @Test
  void anEmptyOrUnresolvableHostIsAUsageError() {
    // before, an empty --host bound loopback without a word, and a host that does not resolve
    // exited 1 ("cannot listen on ...") as if the machine, not the command line, were at fault
    for (String host : new String[] {"", " ", "no-such-host.invalid"}) {
      err.reset();
      assertThat(exitOf("--endpoints=10.0.0.1:80", "--port=0", "--metrics-enabled=false",
          "--host=" + host)).as("'%s'", host).isEqualTo(2);
      assertThat(err()).as("'%s'", host).contains("--host: '" + host + "'");
    }
  }

  @Test
  void aPortInUseStillExitsWith1() throws Exception {
    try (java.net.ServerSocket taken = new java.net.ServerSocket(0, 1,
        java.net.InetAddress.getByName("127.0.0.1"))) {
      assertThat(exitOf("--endpoints=10.0.0.1:80", "--metrics-enabled=false", "--host=127.0.0.1",
          "--port=" + taken.getLocalPort())).isEqualTo(1);
      assertThat(err()).contains("cannot listen on 127.0.0.1:" + taken.getLocalPort());
    }
  }

  @Test
  void sessionHeadersNamingNoHeaderAreRefused() {
    // before, commas and blanks alone gave an empty header list and session affinity went off
    // unseen
    for (String none : new String[] {",", " , ", ""}) {
      err.reset();
      assertThat(exitOf("--endpoints=10.0.0.1:80", "--port=0", "--metrics-enabled=false",
          "--session-headers=" + none)).as("'%s'", none).isEqualTo(2);
      assertThat(err()).as("'%s'", none).contains("--session-headers: ")
          .contains("'" + none + "'");
    }
  }

  @Test
  void duplicateEndpointsAreRefusedNamingTheDuplicate() {
    // before, the router merged them silently: one replica where the command line named two
    for (String[] dup : new String[][] {{"10.0.0.1:80,10.0.0.1:80", "10.0.0.1:80"},
        {"10.0.0.2:80, 10.0.0.1:80 ,10.0.0.1:80", "10.0.0.1:80"},
        {"[fd00::1]:80,[fd00:0:0::1]:80", "[fd00:0:0::1]:80"}}) {
      err.reset();
      assertThat(exitOf("--endpoints", dup[0], "--port=0", "--metrics-enabled=false"))
          .as(dup[0]).isEqualTo(2);
      assertThat(err()).as(dup[0]).contains("--endpoints").contains("'" + dup[1] + "'")
          .contains("more than once");
    }
  }

  @Test
  void aDrainTimeoutOfZeroIsTakenAsTheBuilderTakesIt() {
    // the builder takes zero (close() cancels open streams at once); before, the CLI refused it
    try (Main.Running r = Main.start(new String[] {"--endpoints=10.0.0.1:80", "--port=0",
        "--host=127.0.0.1", "--metrics-enabled=false", "--drain-timeout=0"},
        new PrintStream(out, true, StandardCharsets.UTF_8),
        new PrintStream(err, true, StandardCharsets.UTF_8))) {
      assertThat(r.server.port()).isPositive();
    } catch (Main.Exit e) {
      throw new AssertionError("--drain-timeout=0 refused: " + err(), e);
    }
    // the other durations stay positive
    assertThat(exitOf("--endpoints=10.0.0.1:80", "--port=0", "--metrics-enabled=false",
        "--metrics-interval=0")).isEqualTo(2);
  }

  @Test
  void aMetricsPathThatIsNoUriPathIsRefused() {
    // before, only the leading '/' was checked: '/a b' started, then every scrape failed
    for (String metrics : new String[] {"true", "false"}) {
      for (String path : new String[] {"/a b", "/metrics%", "/a\\b", "/m{x}"}) {
        err.reset();
        assertThat(exitOf("--endpoints=10.0.0.1:80", "--port=0", "--metrics-enabled=" + metrics,
            "--metrics-path", path)).as(path).isEqualTo(2);
        assertThat(err()).as(path).contains("--metrics-path: '" + path + "'");
      }
    }
  }

  @Test
  void metricsOptionsNameTheOptionAndAreCheckedEvenWithScrapingOff() {
    // before, the scraper's own messages reached the user ("scheme must be http or https, got
    // 'ftp'"), naming no option, and with --metrics-enabled=false the mistakes passed unseen
    for (String metrics : new String[] {"true", "false"}) {
      err.reset();
      assertThat(exitOf("--endpoints=10.0.0.1:80", "--port=0", "--metrics-enabled=" + metrics,
          "--scheme", "ftp")).isEqualTo(2);
      assertThat(err()).contains("--scheme: 'ftp'");
      err.reset();
      assertThat(exitOf("--endpoints=10.0.0.1:80", "--port=0", "--metrics-enabled=" + metrics,
          "--metrics-path", "metrics")).isEqualTo(2);
      assertThat(err()).contains("--metrics-path: 'metrics'");
      err.reset();
      assertThat(exitOf("--endpoints=10.0.0.1:80", "--port=0", "--metrics-enabled=" + metrics,
          "--metrics-interval", "often")).isEqualTo(2);
      assertThat(err()).contains("--metrics-interval: 'often'");
    }
  }

  @Test
  void anInvalidConfigFileListsItsErrors(@TempDir Path dir) throws Exception {
    Path bad = dir.resolve("bad.yaml");
    Files.writeString(bad, """
        apiVersion: inference.networking.x-k8s.io/v1alpha1
        kind: EndpointPickerConfig
        plugins:
        - type: no-such-scorer
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: no-such-scorer
        """);
    assertThat(exitOf("--endpoints", "10.0.0.1:80", "--config-file", bad.toString())).isEqualTo(2);
    assertThat(err()).contains("is not valid").contains("no-such-scorer");
  }

  @Test
  void helpPrintsEveryOption() {
    assertThat(exitOf("--help")).isZero();
    String help = out.toString(StandardCharsets.UTF_8);
    for (String option : new String[] {"--endpoints", "--port", "--host", "--config",
        "--config-text", "--preset",
        "--max-body-size", "--max-message-size", "--session-headers", "--in-flight-max-age", "--scheme",
        "--metrics-enabled", "--metrics-interval", "--metrics-path", "--drain-timeout"}) {
      assertThat(help).contains(option);
    }
  }

  @Test
  void itServesHealthOnTheChosenPortUntilClosed() throws Exception {
    Main.Running r = Main.start(new String[] {"--endpoints", "10.0.0.1:8000,10.0.0.2:8000",
        "--port", "0", "--host", "127.0.0.1", "--preset", "epp4j", "--metrics-enabled=false",
        "--drain-timeout", "1s", "--max-body-size", "1MB"},
        new PrintStream(out, true, StandardCharsets.UTF_8),
        new PrintStream(err, true, StandardCharsets.UTF_8));
    ManagedChannel ch = NettyChannelBuilder.forAddress("127.0.0.1", r.server.port())
        .usePlaintext().build();
    try {
      assertThat(out.toString(StandardCharsets.UTF_8))
          .contains("on :" + r.server.port()).contains("10.0.0.1:8000, 10.0.0.2:8000")
          .contains("the epp4j preset").contains("metrics scraping off");
      assertThat(r.router.endpoints()).hasSize(2);
      assertThat(r.scraper).isNull();
      assertThat(HealthGrpc.newBlockingStub(ch).withDeadlineAfter(5, TimeUnit.SECONDS)
          .check(HealthCheckRequest.newBuilder()
              .setService("envoy.service.ext_proc.v3.ExternalProcessor").build()).getStatus())
          .isEqualTo(ServingStatus.SERVING);
    } finally {
      r.close();
      ch.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
    assertThat(r.server.openStreams()).isZero();
    assertThat(r.router.route(io.epp4j.api.InferenceRequest.completion("m", "p")).rejection()
        .message()).isEqualTo("router is closed");
  }

  @Test
  void streamsTheDrainTimeoutCutArePrintedWithTheirCount() throws Exception {
    // on SIGTERM the JDK's logging is shut down by its own shutdown hook well before a drain
    // timeout passes, so the program says it on stderr
    Main.Running r = Main.start(new String[] {"--endpoints", "10.0.0.1:8000", "--port", "0",
        "--host", "127.0.0.1", "--metrics-enabled=false", "--drain-timeout", "200ms"},
        new PrintStream(out, true, StandardCharsets.UTF_8),
        new PrintStream(err, true, StandardCharsets.UTF_8));
    ManagedChannel ch = NettyChannelBuilder.forAddress("127.0.0.1", r.server.port())
        .usePlaintext().build();
    try {
      FakeEnvoy envoy = FakeEnvoy.open(ch);
      envoy.send(FakeEnvoy.postHeaders(FakeEnvoy.modes(
          io.envoyproxy.envoy.extensions.filters.http.ext_proc.v3.ProcessingMode.BodySendMode.BUFFERED,
          io.envoyproxy.envoy.extensions.filters.http.ext_proc.v3.ProcessingMode.BodySendMode.NONE)));
      // the stream counts as open once the server has taken the call; waiting for that, rather
      // than for the server's answer within FakeEnvoy's 5 s, holds on a loaded machine, where
      // the first call of a new channel can take longer than that
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
      while (r.server.openStreams() < 1 && System.nanoTime() < deadline) {
        Thread.sleep(10);
      }
      assertThat(r.server.openStreams()).as("streams open within 60 s").isEqualTo(1);
    } finally {
      r.close();
      ch.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
    assertThat(err()).contains("routing-envoy: 1 ext_proc stream(s) still open after the drain "
        + "timeout were cancelled");
  }

  @Test
  void grpcPortIsTakenAsUpstreamsNameForPort() throws Exception {
    // the upstream picker's Deployments pass --grpc-port 9002
    try (Main.Running r = Main.start(new String[] {"--endpoints", "10.0.0.1:8000",
        "--grpc-port", "0", "--grpc-health-port", "0", "--host", "127.0.0.1",
        "--metrics-enabled=false"},
        new PrintStream(out, true, StandardCharsets.UTF_8),
        new PrintStream(err, true, StandardCharsets.UTF_8))) {
      assertThat(r.server.port()).isPositive();
    }
    assertThat(exitOf("--endpoints", "10.0.0.1:8000", "--grpc-port=0", "--port", "0"))
        .isEqualTo(2);
    assertThat(err()).contains("--port is given twice");
  }

  @Test
  void upstreamsKubernetesDiscoveryOptionsAreRefusedPointingToEndpoints() {
    for (String option : new String[] {"--pool-name", "--pool-namespace", "--pool-group",
        "--endpoint-selector", "--endpoint-target-ports"}) {
      err.reset();
      assertThat(exitOf("--endpoints", "10.0.0.1:8000", option, "x")).as(option).isEqualTo(2);
      assertThat(err()).as(option).contains(option + " is how the upstream endpoint picker finds "
          + "the replicas in Kubernetes").contains("list them with --endpoints");
    }
  }

  @Test
  void sizesAndDurationsReadLikeSpringProperties() {
    assertThat(Main.size("x", "16MB")).isEqualTo(16 << 20);
    assertThat(Main.size("x", "512kb")).isEqualTo(512 << 10);
    assertThat(Main.size("x", "1000")).isEqualTo(1000);
    assertThatThrownBy(() -> Main.size("x", "0")).hasMessageContaining("--x");
    assertThatThrownBy(() -> Main.size("x", "2GB")).hasMessageContaining("'2GB'");
    assertThat(Main.duration("x", "200ms")).isEqualTo(Duration.ofMillis(200));
    assertThat(Main.duration("x", "10m")).isEqualTo(Duration.ofMinutes(10));
    assertThat(Main.duration("x", "PT30S")).isEqualTo(Duration.ofSeconds(30));
    assertThatThrownBy(() -> Main.duration("x", "soon")).hasMessageContaining("--x: 'soon'");
  }
}
