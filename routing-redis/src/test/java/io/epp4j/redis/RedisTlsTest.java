package io.epp4j.redis;

import static io.epp4j.redis.RedisReplicationTest.DONE;
import static io.epp4j.redis.RedisReplicationTest.await;
import static io.epp4j.redis.RedisReplicationTest.awaitConnected;
import static io.epp4j.redis.RedisReplicationTest.endpoints;
import static io.epp4j.redis.RedisReplicationTest.gauge;
import static io.epp4j.redis.RedisReplicationTest.prompt;
import static io.epp4j.redis.RedisReplicationTest.replication;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.epp4j.api.RoutingDecision;
import io.epp4j.core.Router;
import io.opentelemetry.sdk.OpenTelemetrySdk;
import io.opentelemetry.sdk.metrics.SdkMeterProvider;
import io.opentelemetry.sdk.testing.exporter.InMemoryMetricReader;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.logging.Handler;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import org.jspecify.annotations.Nullable;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * The replication over {@code rediss://} with a password, against a real redis-server that
 * speaks only TLS (no plain port) and requires the password: what the README's example
 * configuration does.
 */
class RedisTlsTest {
  static final String PASSWORD = "tls-test-secret-4711";

  @RegisterExtension
  static final RedisServer REDIS = RedisServer.tls(PASSWORD);

  static final AtomicInteger POOLS = new AtomicInteger();

  private final List<Router> routers = new ArrayList<>();
  private final List<LogRecord> logged = new CopyOnWriteArrayList<>();
  private final Logger log = Logger.getLogger(RedisReplication.class.getName());
  private final Handler capture = new Handler() {
    @Override
    public void publish(LogRecord r) {
      logged.add(r);
    }

    @Override
    public void flush() {}

    @Override
    public void close() {}
  };
  private String pool = "";

  @BeforeEach
  void setUp() {
    pool = "tls-" + ProcessHandle.current().pid() + "-" + POOLS.incrementAndGet();
    log.addHandler(capture);
  }

  @AfterEach
  void tearDown() {
    routers.forEach(Router::close);
    log.removeHandler(capture);
  }

  /** A router of this test's pool; {@code trustCertFile} null leaves it to the JVM's store. */
  Router router(String id, String uri, @Nullable String trustCertFile, Router.Builder b) {
    String trust = trustCertFile == null ? "" : "\n    trustCertFile: " + trustCertFile;
    String yaml = """
        apiVersion: inference.networking.x-k8s.io/v1alpha1
        kind: EndpointPickerConfig
        plugins:
        - type: prefix-cache-scorer
        - type: max-score-picker
        - type: redis-replication
          parameters:
            uri: %s
            pool: %s
            routerId: %s
            flushIntervalMillis: 2
            heartbeatMillis: 200
            connectTimeoutMillis: 30000%s
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: prefix-cache-scorer
          - pluginRef: max-score-picker
        """.formatted(uri, pool, id, trust);
    Router r = b.endpoints(endpoints()).configYaml(yaml, "router " + id)
        .randomSeed(id.hashCode()).build();
    routers.add(r);
    return r;
  }

  @Test
  void twoRoutersReplicatePrefixesOverTlsWithAPassword() throws Exception {
    String ca = REDIS.caCertFile().toString();
    Router a = router("a", REDIS.uri(), ca, Router.builder());
    Router b = router("b", REDIS.uri(), ca, Router.builder());
    // a TLS handshake on a loaded machine (a cold JVM, cores shared with other builds) can take
    // seconds: past connectTimeoutMillis it is logged as Redis unreachable, which this test
    // counts as something that went wrong. Hence a timeout far above any handshake here, and
    // the connection deadline of the other tests
    awaitConnected(a, b);
    int n = 10;
    String[] chosen = new String[n];
    for (int i = 0; i < n; i++) {
      RoutingDecision d = a.route(prompt(70_000 + i, 1024, null));
      chosen[i] = d.primary().id();
      d.onComplete(DONE);
    }
    await("b applied a's prefixes", () -> replication(b).appliedPrefixes() >= n);
    for (int i = 0; i < n; i++) {
      RoutingDecision d = b.route(prompt(70_000 + i, 1024, null));
      assertThat(d.primary().id()).as("prompt %d on b", i).isEqualTo(chosen[i]);
      d.onComplete(DONE);
    }
    assertThat(replication(a).dropped()).isZero();
    assertThat(logged).as("nothing went wrong worth a log record").isEmpty();
  }

  @Test
  void aWrongPasswordIsReportedWithoutQuotingItAndRoutingContinues() throws Exception {
    InMemoryMetricReader metrics = InMemoryMetricReader.create();
    OpenTelemetrySdk otel = OpenTelemetrySdk.builder()
        .setMeterProvider(SdkMeterProvider.builder().registerMetricReader(metrics).build())
        .build();
    String wrong = "not-the-password-0815";
    Router r = router("w", REDIS.uri(wrong), REDIS.caCertFile().toString(),
        Router.builder().openTelemetry(otel));
    await("the refused credentials are logged", () -> logged.stream()
        .anyMatch(x -> x.getMessage().contains("refused this router's credentials")));
    assertThat(replication(r).connected()).isFalse();
    assertThat(gauge(metrics, "epp4j.replication.connected")).isZero();
    assertThat(logged).noneMatch(x -> x.getMessage().contains(wrong)
        || x.getMessage().contains(PASSWORD));
    for (int i = 0; i < 50; i++) {
      RoutingDecision d = r.route(prompt(80_000 + i, 256, null));
      assertThat(d.isRouted()).as("route %d without Redis", i).isTrue();
      d.onComplete(DONE);
    }
  }

  @Test
  void withoutTheCaTheServerIsNotTrustedAndNothingIsSent() throws Exception {
    // the JVM's default trust store does not hold the test CA: verifyPeer refuses the server
    Router r = router("u", REDIS.uri(), null, Router.builder());
    await("the failed handshake is logged", () -> logged.stream()
        .anyMatch(x -> x.getMessage().contains("Redis unreachable")));
    assertThat(replication(r).connected()).isFalse();
    RoutingDecision d = r.route(prompt(90_000, 256, null));
    assertThat(d.isRouted()).isTrue();
    d.onComplete(DONE);
  }

  @Test
  void theUrisOwnVerifyPeerOptionIsKeptWhenTheParameterIsNotGiven() throws Exception {
    // Lettuce's URI syntax: the parameter's default used to replace it with full verification,
    // so this router never connected and only said that Redis was unreachable
    Router r = router("q", REDIS.uri() + "?verifyPeer=NONE", null, Router.builder());
    awaitConnected(r);
  }

  @Test
  void aTrustCertFileThatIsNoCertificateIsAConfigurationErrorNamingTheParameter()
      throws Exception {
    java.nio.file.Path junk = java.nio.file.Files.createTempFile("epp4j-not-a-cert", ".pem");
    junk.toFile().deleteOnExit();
    java.nio.file.Files.writeString(junk, "not a certificate\n");
    assertThatThrownBy(() -> router("j", REDIS.uri(), junk.toString(), Router.builder()))
        .hasMessageContaining("trustCertFile")
        .hasMessageNotContaining(PASSWORD);
    assertThatThrownBy(() -> router("k", REDIS.uri(), "/nonexistent/ca.pem", Router.builder()))
        .hasMessageContaining("trustCertFile");
  }
}
