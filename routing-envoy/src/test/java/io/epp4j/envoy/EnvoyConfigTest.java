package io.epp4j.envoy;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.dataformat.yaml.YAMLFactory;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.protobuf.util.JsonFormat;
import io.envoyproxy.envoy.config.bootstrap.v3.Bootstrap;
import io.envoyproxy.envoy.config.cluster.v3.Cluster;
import io.envoyproxy.envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor;
import io.envoyproxy.envoy.extensions.filters.http.ext_proc.v3.ProcessingMode;
import io.envoyproxy.envoy.extensions.filters.http.router.v3.Router;
import io.envoyproxy.envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager;
import io.envoyproxy.envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter;
import io.envoyproxy.envoy.extensions.upstreams.http.v3.HttpProtocolOptions;
import io.envoyproxy.envoy.service.ext_proc.v3.ProcessingRequest;
import io.grpc.health.v1.HealthCheckResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;

/**
 * The Envoy configuration the README shows ({@code envoy.yaml}) against the Envoy API's own
 * definitions: every field name and enum value must exist, or parsing fails. No Envoy binary is
 * needed (the build starts none), so this is what keeps the file honest.
 */
class EnvoyConfigTest {
  static final Path CONFIG = Path.of("envoy.yaml");
  static final JsonFormat.TypeRegistry TYPES = JsonFormat.TypeRegistry.newBuilder()
      .add(HttpConnectionManager.getDescriptor())
      .add(ExternalProcessor.getDescriptor())
      .add(Router.getDescriptor())
      .add(HttpProtocolOptions.getDescriptor())
      .add(io.envoyproxy.envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
          .getDescriptor())
      .build();

  static Bootstrap parse(String yaml) throws Exception {
    Object tree = new ObjectMapper(new YAMLFactory()).readValue(yaml, Object.class);
    String json = new ObjectMapper().writeValueAsString(tree);
    Bootstrap.Builder b = Bootstrap.newBuilder();
    JsonFormat.parser().usingTypeRegistry(TYPES).merge(json, b); // unknown fields are errors
    return b.build();
  }

  @Test
  void theShippedEnvoyConfigParsesAsABootstrapWithTheProtocolsSettings() throws Exception {
    Bootstrap boot = parse(Files.readString(CONFIG));

    HttpConnectionManager hcm = boot.getStaticResources().getListeners(0).getFilterChains(0)
        .getFilters(0).getTypedConfig().unpack(HttpConnectionManager.class);
    HttpFilter extProcFilter = hcm.getHttpFilters(0);
    assertThat(extProcFilter.getName()).isEqualTo("envoy.filters.http.ext_proc");
    assertThat(hcm.getHttpFilters(1).getTypedConfig().is(Router.class)).isTrue();
    ExternalProcessor extProc = extProcFilter.getTypedConfig().unpack(ExternalProcessor.class);
    ProcessingMode mode = extProc.getProcessingMode();
    assertThat(mode.getRequestHeaderMode()).isEqualTo(ProcessingMode.HeaderSendMode.SEND);
    assertThat(mode.getRequestBodyMode()).isEqualTo(ProcessingMode.BodySendMode.FULL_DUPLEX_STREAMED);
    assertThat(mode.getResponseHeaderMode()).isEqualTo(ProcessingMode.HeaderSendMode.SEND);
    assertThat(mode.getResponseBodyMode()).isEqualTo(ProcessingMode.BodySendMode.FULL_DUPLEX_STREAMED);
    assertThat(mode.getRequestTrailerMode()).isEqualTo(ProcessingMode.HeaderSendMode.SEND);
    assertThat(mode.getResponseTrailerMode()).isEqualTo(ProcessingMode.HeaderSendMode.SEND);
    assertThat(extProc.getMessageTimeout().getSeconds()).isEqualTo(1000);
    assertThat(extProc.getAllowModeOverride()).isFalse();
    assertThat(extProc.getGrpcService().getEnvoyGrpc().getClusterName()).isEqualTo("epp4j");
    assertThat(extProc.getMetadataOptions().getForwardingNamespaces().getUntypedList())
        .contains(ExtProcMessages.SUBSET_HINT_NAMESPACE, ExtProcMessages.LB_NAMESPACE);
    assertThat(extProc.getMetadataOptions().getReceivingNamespaces().getUntypedList())
        .contains(ExtProcMessages.LB_NAMESPACE);
    // source-ip keys: the client's address as Envoy's connection shows it, which is the
    // connection's own peer only when Envoy does not take it from x-forwarded-for
    assertThat(extProc.getRequestAttributesList()).contains(SourceAddress.ATTRIBUTE);
    assertThat(hcm.getUseRemoteAddress().getValue()).isTrue();

    Cluster replicas = boot.getStaticResources().getClusters(0);
    assertThat(replicas.getType()).isEqualTo(Cluster.DiscoveryType.ORIGINAL_DST);
    assertThat(replicas.getLbPolicy()).isEqualTo(Cluster.LbPolicy.CLUSTER_PROVIDED);
    assertThat(replicas.getOriginalDstLbConfig().getUseHttpHeader()).isTrue();
    assertThat(replicas.getOriginalDstLbConfig().getHttpHeaderName())
        .isEqualTo(io.epp4j.api.RoutingDecision.DESTINATION_HEADER);

    Cluster epp = boot.getStaticResources().getClusters(1);
    assertThat(epp.getName()).isEqualTo("epp4j");
    HttpProtocolOptions http = epp.getTypedExtensionProtocolOptionsOrThrow(
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions").unpack(HttpProtocolOptions.class);
    assertThat(http.getExplicitHttpConfig().hasHttp2ProtocolOptions()).isTrue();
    assertThat(epp.getLoadAssignment().getEndpoints(0).getLbEndpoints(0).getEndpoint()
        .getAddress().getSocketAddress().getPortValue()).isEqualTo(ExtProcServer.DEFAULT_PORT);
    assertThat(epp.getHealthChecks(0).getGrpcHealthCheck().getServiceName())
        .isEqualTo("envoy.service.ext_proc.v3.ExternalProcessor");
  }

  @Test
  void theRouteLetsALongAnswerThatIsNotStreamedFinish() throws Exception {
    // a completion with stream: false sends no byte until it ends, minutes later for a long one;
    // without a route idle_timeout the connection manager's stream_idle_timeout applies, 5
    // minutes when unset, and Envoy answers 408 in the middle of the generation
    Bootstrap boot = parse(Files.readString(CONFIG));
    HttpConnectionManager hcm = boot.getStaticResources().getListeners(0).getFilterChains(0)
        .getFilters(0).getTypedConfig().unpack(HttpConnectionManager.class);
    io.envoyproxy.envoy.config.route.v3.RouteAction route = hcm.getRouteConfig()
        .getVirtualHosts(0).getRoutes(0).getRoute();
    assertThat(route.hasTimeout()).as("route timeout set").isTrue();
    assertThat(route.getTimeout().getSeconds()).as("route timeout, 0 = none").isZero();
    boolean routeIdleOff = route.hasIdleTimeout() && route.getIdleTimeout().getSeconds() == 0
        && route.getIdleTimeout().getNanos() == 0;
    boolean streamIdleOff = hcm.hasStreamIdleTimeout()
        && hcm.getStreamIdleTimeout().getSeconds() == 0 && hcm.getStreamIdleTimeout().getNanos() == 0;
    assertThat(routeIdleOff || streamIdleOff)
        .as("the route's idle_timeout (or the connection manager's stream_idle_timeout) is 0s")
        .isTrue();
  }

  /** Envoy's default for each circuit breaker threshold of a cluster. */
  static final int ENVOY_DEFAULT_THRESHOLD = 1024;

  @Test
  void bothClustersTakeMoreConcurrentRequestsThanEnvoysDefaultCircuitBreakers() throws Exception {
    // every request through the gateway holds one ext_proc stream on the epp4j cluster and one
    // request on the replicas cluster for its whole answer (minutes for a long generation);
    // Envoy's default thresholds (1024 connections, pending requests and requests per cluster)
    // would fail the 1025th concurrent request (the ext_proc stream overflows: a 500 with
    // failure_mode_allow false), far below what a pool of replicas serves at once
    Bootstrap boot = parse(Files.readString(CONFIG));
    for (Cluster c : boot.getStaticResources().getClustersList()) {
      assertThat(c.getCircuitBreakers().getThresholdsList()).as(c.getName()).isNotEmpty();
      io.envoyproxy.envoy.config.cluster.v3.CircuitBreakers.Thresholds t = c.getCircuitBreakers().getThresholds(0);
      assertThat(t.getPriority()).as(c.getName())
          .isEqualTo(io.envoyproxy.envoy.config.core.v3.RoutingPriority.DEFAULT);
      assertThat(t.getMaxConnections().getValue()).as(c.getName() + " max_connections")
          .isGreaterThan(ENVOY_DEFAULT_THRESHOLD);
      assertThat(t.getMaxPendingRequests().getValue()).as(c.getName() + " max_pending_requests")
          .isGreaterThan(ENVOY_DEFAULT_THRESHOLD);
      assertThat(t.getMaxRequests().getValue()).as(c.getName() + " max_requests")
          .isGreaterThan(ENVOY_DEFAULT_THRESHOLD);
    }
  }

  @Test
  void theCommentedTlsTransportSocketParsesOnTheExtProcCluster() throws Exception {
    // the lines a user uncomments for --secure-serving: they must be what the Envoy API takes
    String text = Files.readString(CONFIG, StandardCharsets.UTF_8);
    StringBuilder tls = new StringBuilder();
    boolean inBlock = false;
    for (String line : text.split("\n", -1)) {
      if (line.equals("    # transport_socket:")) {
        inBlock = true;
      } else if (!line.startsWith("    #   ")) {
        inBlock = false;
      }
      tls.append(inBlock ? "    " + line.substring(6) : line).append('\n');
    }
    assertThat(tls.toString()).isNotEqualTo(text + "\n");
    io.envoyproxy.envoy.config.cluster.v3.Cluster epp4j = parse(tls.toString())
        .getStaticResources().getClustersList().stream()
        .filter(c -> c.getName().equals("epp4j")).findFirst().orElseThrow();
    assertThat(epp4j.getTransportSocket().getName()).isEqualTo("envoy.transport_sockets.tls");
    assertThat(epp4j.getTransportSocket().getTypedConfig().unpack(
        io.envoyproxy.envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext.class)
        .hasCommonTlsContext()).isTrue();
    // as shipped, the cluster stays plaintext, as the server's default is
    assertThat(parse(text).getStaticResources().getClustersList().stream()
        .filter(c -> c.getName().equals("epp4j")).findFirst().orElseThrow()
        .hasTransportSocket()).isFalse();
  }

  @Test
  void theReadmeShowsTheSameConfig() throws Exception {
    String readme = Files.readString(Path.of("README.md"), StandardCharsets.UTF_8);
    assertThat(readme).contains(Files.readString(CONFIG, StandardCharsets.UTF_8));
  }

  @Test
  void aMisspelledFieldIsCaught() {
    // the check above would be worthless if the parser let unknown names through
    String bad = "static_resources:\n  clusters:\n  - name: x\n    original_destination_lb_config: {}\n";
    assertThatThrownBy(() -> parse(bad)).isInstanceOf(InvalidProtocolBufferException.class)
        .hasMessageContaining("original_destination_lb_config");
  }

  @Test
  void theApiJarsGeneratedClassesRunOnThisProtobufRuntime() throws Exception {
    // generated by protoc 3.25 (GeneratedMessageV3): loading, building, serializing and parsing
    // must not hit a gencode/runtime version check or a missing runtime method
    ProcessingRequest r = FakeEnvoy.postHeaders(FakeEnvoy.modes(
        ProcessingMode.BodySendMode.FULL_DUPLEX_STREAMED, ProcessingMode.BodySendMode.STREAMED))
        .toBuilder().setMetadataContext(FakeEnvoy.subsetHint(java.util.List.of("1.2.3.4:5")))
        .build();
    assertThat(ProcessingRequest.parseFrom(r.toByteArray())).isEqualTo(r);
    String json = JsonFormat.printer().print(r);
    ProcessingRequest.Builder back = ProcessingRequest.newBuilder();
    JsonFormat.parser().merge(json, back);
    assertThat(back.build()).isEqualTo(r);
    assertThat(HealthCheckResponse.parseFrom(HealthCheckResponse.newBuilder()
        .setStatus(HealthCheckResponse.ServingStatus.SERVING).build().toByteArray()).getStatus())
        .isEqualTo(HealthCheckResponse.ServingStatus.SERVING);
    assertThat(com.google.protobuf.GeneratedMessageV3.class.isAssignableFrom(ProcessingRequest.class))
        .isTrue();
  }
}
