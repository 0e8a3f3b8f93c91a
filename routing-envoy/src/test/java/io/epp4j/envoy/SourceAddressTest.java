package io.epp4j.envoy;

import static io.envoyproxy.envoy.extensions.filters.http.ext_proc.v3.ProcessingMode.BodySendMode.FULL_DUPLEX_STREAMED;
import static io.epp4j.envoy.FakeEnvoy.completion;
import static io.epp4j.envoy.FakeEnvoy.modes;
import static io.epp4j.envoy.FakeEnvoy.requestBody;
import static io.epp4j.envoy.FakeEnvoy.requestHeaders;
import static org.assertj.core.api.Assertions.assertThat;

import com.google.protobuf.Struct;
import com.google.protobuf.Value;
import io.envoyproxy.envoy.service.ext_proc.v3.ProcessingRequest;
import io.envoyproxy.envoy.service.ext_proc.v3.ProcessingResponse;
import io.epp4j.api.Endpoint;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.Router;
import io.grpc.ManagedChannel;
import io.grpc.inprocess.InProcessChannelBuilder;
import io.grpc.inprocess.InProcessServerBuilder;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.jspecify.annotations.Nullable;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * {@code source-ip} keys behind Envoy: the client's address comes from the ext_proc filter's
 * {@code source.address} request attribute, which Envoy fills from the downstream connection, not
 * from {@code x-forwarded-for}, which the client writes.
 */
class SourceAddressTest {
  static final List<String> POOL = List.of("10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000",
      "10.0.0.4:8000", "10.0.0.5:8000", "10.0.0.6:8000", "10.0.0.7:8000");
  static final String RING_ON_SOURCE_IP = """
      apiVersion: inference.networking.x-k8s.io/v1alpha1
      kind: EndpointPickerConfig
      plugins:
      - type: ring-hash-picker
        parameters: {hashOn: source-ip}
      schedulingProfiles:
      - name: default
        plugins:
        - pluginRef: ring-hash-picker
      """;
  static final String AFFINITY_ON_SOURCE_IP = """
      apiVersion: inference.networking.x-k8s.io/v1alpha1
      kind: EndpointPickerConfig
      plugins:
      - type: session-affinity-scorer
        parameters: {sessionKeyFrom: source-ip}
      - type: queue-scorer
      - type: max-score-picker
      schedulingProfiles:
      - name: default
        plugins:
        - pluginRef: session-affinity-scorer
          weight: 10
        - pluginRef: queue-scorer
        - pluginRef: max-score-picker
      """;

  Router router;
  ExtProcServer server;
  ManagedChannel channel;

  void start(String config) throws Exception {
    router = Router.builder().endpoints(POOL.stream().map(Endpoint::parse).toList())
        .configYaml(config, "source-ip").build();
    String name = InProcessServerBuilder.generateName();
    server = ExtProcServer.builder(router).drainTimeout(Duration.ofSeconds(2))
        .transport(InProcessServerBuilder.forName(name)).start();
    channel = InProcessChannelBuilder.forName(name).build();
  }

  @AfterEach
  void tearDown() throws Exception {
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

  // ------------------------------------------------------------------------- through a stream

  @Test
  void aSourceIpRingLandsByTheConnectionsAddressWhateverForwardedForTheClientWrote()
      throws Exception {
    start(RING_ON_SOURCE_IP);
    String real = "192.0.2.7";
    String home = pickFor(real);
    List<String> forged = forgedAddressesAwayFrom(home);

    for (String f : forged) {
      String picked = routeThroughEnvoy(attributes("source.address", real + ":51234"),
          Map.of("x-forwarded-for", f + ", 10.9.9.9"));
      assertThat(picked).as("forged x-forwarded-for " + f).isEqualTo(home);
    }
  }

  @Test
  void sessionAffinityOnSourceIpFollowsTheAttributeNotTheForwardedFor() throws Exception {
    start(AFFINITY_ON_SOURCE_IP);
    Struct attrs = attributes("source.address", "[2001:db8::7]:40000");
    String first = routeThroughEnvoy(attrs, Map.of("x-forwarded-for", "203.0.113.1"));
    // the same client, new forged values each time, and other clients loading the pool in between:
    // the binding made on the first request holds
    for (int i = 2; i < 12; i++) {
      routeThroughEnvoy(attributes("source.address", "198.51.100." + i + ":1000"), Map.of());
      assertThat(routeThroughEnvoy(attrs, Map.of("x-forwarded-for", "203.0.113." + i)))
          .as("request " + i).isEqualTo(first);
    }
  }

  @Test
  void withoutTheAttributeTheKeyIsTheForwardedForAsBefore() throws Exception {
    start(RING_ON_SOURCE_IP);
    String home = pickFor("192.0.2.7");
    assertThat(routeThroughEnvoy(null, Map.of("x-forwarded-for", "192.0.2.7, 10.9.9.9")))
        .isEqualTo(home);
  }

  @Test
  void anAddressTheClientSendsAsTheSourceIpPseudoHeaderIsIgnored() throws Exception {
    start(RING_ON_SOURCE_IP);
    String home = pickFor("192.0.2.7");
    for (String forged : forgedAddressesAwayFrom(home)) {
      // no attribute: the x-forwarded-for entry is the key, not what the client named
      assertThat(routeThroughEnvoy(null,
          Map.of(":source-ip", forged, "x-forwarded-for", "192.0.2.7")))
          .as(forged).isEqualTo(home);
      // with the attribute: the attribute
      assertThat(routeThroughEnvoy(attributes("source.address", "192.0.2.7:9"),
          Map.of(":source-ip", forged)))
          .as(forged).isEqualTo(home);
    }
  }

  @Test
  void anAttributeThatIsNoAddressFallsBackToTheForwardedFor() throws Exception {
    start(RING_ON_SOURCE_IP);
    String home = pickFor("192.0.2.7");
    for (Struct bad : List.of(attributes("source.address", "/var/run/envoy.sock"),
        attributes("source.address", "not an address:80"),
        Struct.newBuilder().putFields("source.address",
            Value.newBuilder().setNumberValue(3232235777d).build()).build())) {
      assertThat(routeThroughEnvoy(bad, Map.of("x-forwarded-for", "192.0.2.7")))
          .as(bad.toString()).isEqualTo(home);
    }
  }

  @Test
  void theAttributeIsReadOnTheBodyMessageToo() throws Exception {
    // Envoy sends the request attributes once, with the first request message it sends; with
    // request headers sent that is the headers message, but any request message before the pick
    // is read
    start(RING_ON_SOURCE_IP);
    String home = pickFor("192.0.2.7");
    for (String forged : forgedAddressesAwayFrom(home)) {
      FakeEnvoy envoy = FakeEnvoy.open(channel);
      envoy.send(requestHeaders("POST", "/v1/completions", false,
          Map.of("x-forwarded-for", forged))
          .setProtocolConfig(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED)).build());
      envoy.send(requestBody(completion("hi"), true).toBuilder()
          .putAttributes("envoy.filters.http.ext_proc",
              attributes("source.address", "192.0.2.7:1")).build());
      assertThat(destination(envoy.next())).as(forged).isEqualTo(home);
      envoy.cancel();
    }
  }

  // --------------------------------------------------------------------------------- parsing

  @Test
  void theAddressIsTheHostPartOfEnvoysSourceAddress() {
    assertThat(SourceAddress.ip("192.0.2.7:51234")).isEqualTo("192.0.2.7");
    assertThat(SourceAddress.ip("192.0.2.7")).isEqualTo("192.0.2.7");
    assertThat(SourceAddress.ip("[2001:db8::7]:443")).isEqualTo("2001:db8:0:0:0:0:0:7");
    assertThat(SourceAddress.ip("[::1]:80")).isEqualTo("0:0:0:0:0:0:0:1");
    assertThat(SourceAddress.ip("[::1]")).isEqualTo("0:0:0:0:0:0:0:1");
    assertThat(SourceAddress.ip("2001:db8::7")).isEqualTo("2001:db8:0:0:0:0:0:7");
    assertThat(SourceAddress.ip("[fe80::1%eth0]:80")).isEqualTo("fe80:0:0:0:0:0:0:1");
    // an IPv4 client on a dual-stack listener is the IPv4 address
    assertThat(SourceAddress.ip("[::ffff:192.0.2.7]:5")).isEqualTo("192.0.2.7");
    assertThat(SourceAddress.ip(" 192.0.2.7:1 ")).isEqualTo("192.0.2.7");
  }

  @Test
  void garbageIsNoAddress() {
    for (String bad : List.of("", " ", ":", ":80", "[]", "[]:80", "[::1", "[::1]x", "[::1]:",
        "[::1]:8o", "[::1]:123456", "192.0.2.7:", "192.0.2.7:port", "192.0.2.7:-1",
        "192.0.2:80", "192.0.2.7.9:80", "256.0.0.1:80", "1..2.3:80", "192.0.2.07777:80",
        "example.com:80", "localhost", "/var/run/envoy.sock", "@abstract", "envoy://listener/1",
        "gg::1", ".::1", "::1::2", "1:2:3:4:5:6:7:8:9", "[192.0.2.7]:80", "%eth0",
        "[%eth0]:80", "a".repeat(10_000))) {
      assertThat(SourceAddress.ip(bad)).as(bad).isNull();
    }
  }

  @Test
  void anyKeyOfTheAttributesMapIsRead() {
    ProcessingRequest r = ProcessingRequest.newBuilder()
        .putAttributes("something.else", Struct.newBuilder().putFields("x",
            Value.newBuilder().setStringValue("1.1.1.1:1").build()).build())
        .putAttributes("my-ext-proc", attributes("source.address", "192.0.2.7:51234"))
        .build();
    assertThat(SourceAddress.of(r)).isEqualTo("192.0.2.7");
    assertThat(SourceAddress.of(ProcessingRequest.getDefaultInstance())).isNull();
  }

  // ---------------------------------------------------------------------------------- helpers

  static Struct attributes(String name, String value) {
    return Struct.newBuilder().putFields(name, Value.newBuilder().setStringValue(value).build())
        .build();
  }

  /** Where the router sends a request whose first {@code x-forwarded-for} entry is {@code ip}. */
  String pickFor(String ip) {
    RoutingDecision d = router.routeHeaders(Map.of("x-forwarded-for", ip));
    d.onComplete(Usage.NONE);
    return d.servedBy().id();
  }

  /** Addresses a forger might write whose own key lands elsewhere than {@code home}. */
  List<String> forgedAddressesAwayFrom(String home) {
    List<String> away = new ArrayList<>();
    for (int i = 1; i < 255 && away.size() < 5; i++) {
      String f = "203.0.113." + i;
      if (!pickFor(f).equals(home)) {
        away.add(f);
      }
    }
    assertThat(away).as("forged addresses that the ring sends elsewhere").hasSize(5);
    return away;
  }

  /** One bodiless GET through the ext_proc server; the endpoint it was sent to. */
  String routeThroughEnvoy(@Nullable Struct attributes, Map<String, String> headers)
      throws Exception {
    FakeEnvoy envoy = FakeEnvoy.open(channel);
    ProcessingRequest.Builder h = requestHeaders("GET", "/v1/models", true, new HashMap<>(headers))
        .setProtocolConfig(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED));
    if (attributes != null) {
      h.putAttributes("envoy.filters.http.ext_proc", attributes);
    }
    envoy.send(h.build());
    String picked = destination(envoy.next());
    envoy.cancel(); // the decision fails, which neither key nor binding depends on
    return picked;
  }

  static String destination(ProcessingResponse r) {
    assertThat(r.hasRequestHeaders()).as("the request headers answered with the pick").isTrue();
    return ExtProcServerTest.destinationHeader(r.getRequestHeaders().getResponse());
  }
}
