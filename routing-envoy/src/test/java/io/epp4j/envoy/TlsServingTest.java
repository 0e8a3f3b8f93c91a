package io.epp4j.envoy;

import static io.envoyproxy.envoy.extensions.filters.http.ext_proc.v3.ProcessingMode.BodySendMode.FULL_DUPLEX_STREAMED;
import static io.epp4j.envoy.FakeEnvoy.completion;
import static io.epp4j.envoy.FakeEnvoy.modes;
import static io.epp4j.envoy.FakeEnvoy.postHeaders;
import static io.epp4j.envoy.FakeEnvoy.requestBody;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.envoyproxy.envoy.service.ext_proc.v3.ProcessingResponse;
import io.epp4j.api.Endpoint;
import io.epp4j.core.Router;
import io.grpc.ManagedChannel;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.TlsChannelCredentials;
import io.grpc.health.v1.HealthCheckRequest;
import io.grpc.health.v1.HealthCheckResponse.ServingStatus;
import io.grpc.health.v1.HealthGrpc;
import io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.cert.CertificateException;
import java.security.cert.X509Certificate;
import java.time.Duration;
import java.util.Base64;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import javax.net.ssl.SSLEngine;
import javax.net.ssl.X509ExtendedTrustManager;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** TLS serving, as Envoy clusters written for the upstream endpoint picker expect it. */
class TlsServingTest extends MainProcessTest {
  @TempDir Path dir;

  int exitOf(String... extra) {
    try {
      main(extra);
      throw new AssertionError("started with " + String.join(" ", extra));
    } catch (Main.Exit e) {
      return e.code;
    }
  }

  /** One request routed over {@code ch}: the pick comes back as the upstream picker sends it. */
  static void roundTrip(ManagedChannel ch) throws Exception {
    FakeEnvoy envoy = FakeEnvoy.open(ch);
    envoy.send(postHeaders(modes(FULL_DUPLEX_STREAMED, FULL_DUPLEX_STREAMED)));
    envoy.send(requestBody(completion("over tls"), true));
    ProcessingResponse headers = envoy.next();
    assertThat(ExtProcServerTest.destinationHeader(headers.getRequestHeaders().getResponse()))
        .isEqualTo(A);
    assertThat(envoy.next().hasRequestBody()).isTrue();
    envoy.cancel();
  }

  static ServingStatus health(ManagedChannel ch) {
    return HealthGrpc.newBlockingStub(ch).withDeadlineAfter(5, TimeUnit.SECONDS)
        .check(HealthCheckRequest.newBuilder()
            .setService("envoy.service.ext_proc.v3.ExternalProcessor").build()).getStatus();
  }

  static String pem(String label, byte[] der) {
    return "-----BEGIN " + label + "-----\n"
        + Base64.getMimeEncoder(64, "\n".getBytes(StandardCharsets.US_ASCII)).encodeToString(der)
        + "\n-----END " + label + "-----\n";
  }

  /** Writes {@code tls} as tls.crt and tls.key in {@code into}; returns the certificate file. */
  static Path write(ServerTls tls, Path into) throws Exception {
    Files.createDirectories(into);
    Path crt = into.resolve("tls.crt");
    Files.writeString(crt, pem("CERTIFICATE", tls.chain[0].getEncoded()));
    Files.writeString(into.resolve("tls.key"), pem("PRIVATE KEY", tls.key.getEncoded()));
    return crt;
  }

  @Test
  void certPathServesExtProcAndHealthOverTlsToAClientTrustingThatCertificate() throws Exception {
    Path crt = write(ServerTls.selfSigned(), dir.resolve("certs"));
    Main.Running r = main("--secure-serving", "--cert-path", dir.resolve("certs").toString());
    assertThat(out.toString(StandardCharsets.UTF_8)).contains("(TLS, " + crt + ")");
    // trusts that certificate and nothing else, checking the name as any TLS client does
    ManagedChannel tls = channel(r.server.port(),
        TlsChannelCredentials.newBuilder().trustManager(crt.toFile()).build());
    roundTrip(tls);
    assertThat(health(tls)).isEqualTo(ServingStatus.SERVING);
  }

  @Test
  void aClientTrustingAnotherCertificateIsRefused() throws Exception {
    write(ServerTls.selfSigned(), dir.resolve("served"));
    Path other = write(ServerTls.selfSigned(), dir.resolve("other"));
    Main.Running r = main("--secure-serving=true", "--cert-path", dir.resolve("served").toString());
    ManagedChannel ch = channel(r.server.port(),
        TlsChannelCredentials.newBuilder().trustManager(other.toFile()).build());
    assertThatThrownBy(() -> health(ch)).isInstanceOfSatisfying(StatusRuntimeException.class,
        e -> assertThat(e.getStatus().getCode()).isEqualTo(Status.Code.UNAVAILABLE));
  }

  @Test
  void withoutACertPathASelfSignedCertificateIsServedAndPlaintextClientsFail() throws Exception {
    Main.Running r = main("--secure-serving");
    assertThat(out.toString(StandardCharsets.UTF_8)).contains("(TLS, self-signed certificate)");
    Trusting trust = new Trusting();
    ManagedChannel tls = channel(r.server.port(),
        TlsChannelCredentials.newBuilder().trustManager(trust).build());
    roundTrip(tls);
    assertThat(health(tls)).isEqualTo(ServingStatus.SERVING);
    assertThat(trust.seen).isNotEmpty();
    X509Certificate served = trust.seen.get(0);
    served.checkValidity();
    served.verify(served.getPublicKey()); // signed by its own key
    assertThat(served.getSubjectX500Principal().getName()).isEqualTo("CN=routing-envoy");

    ManagedChannel plain = NettyChannelBuilder.forAddress("127.0.0.1", r.server.port())
        .usePlaintext().build();
    toClose.add(() -> plain.shutdownNow().awaitTermination(5, TimeUnit.SECONDS));
    assertThatThrownBy(() -> health(plain)).isInstanceOf(StatusRuntimeException.class);
  }

  @Test
  void theDefaultStaysPlaintext() throws Exception {
    Main.Running r = main();
    assertThat(out.toString(StandardCharsets.UTF_8)).contains("(plaintext)");
    ManagedChannel plain = NettyChannelBuilder.forAddress("127.0.0.1", r.server.port())
        .usePlaintext().build();
    toClose.add(() -> plain.shutdownNow().awaitTermination(5, TimeUnit.SECONDS));
    assertThat(health(plain)).isEqualTo(ServingStatus.SERVING);
  }

  @Test
  void theBuilderServesTlsToo() throws Exception {
    Router router = Router.builder().endpoints(List.of(Endpoint.parse(A))).build();
    toClose.add(router);
    Path crt = write(ServerTls.selfSigned(), dir);
    ExtProcServer server = ExtProcServer.builder(router).port(0).host("127.0.0.1")
        .drainTimeout(Duration.ofSeconds(1)).tls(crt, dir.resolve("tls.key")).start();
    toClose.add(server);
    ManagedChannel tls = channel(server.port(),
        TlsChannelCredentials.newBuilder().trustManager(crt.toFile()).build());
    roundTrip(tls);
  }

  @Test
  void aMissingFileIsRefusedNamingTheOptionAndTheFile() throws Exception {
    Path certs = dir.resolve("certs");
    write(ServerTls.selfSigned(), certs);
    Files.delete(certs.resolve("tls.key"));
    assertThat(exitOf("--secure-serving", "--cert-path", certs.toString())).isEqualTo(2);
    assertThat(err.toString(StandardCharsets.UTF_8))
        .contains("--cert-path: cannot read private key file " + certs.resolve("tls.key"));
  }

  @Test
  void aCertificateFileWithoutACertificateIsRefusedNamingIt() throws Exception {
    Path certs = dir.resolve("certs");
    write(ServerTls.selfSigned(), certs);
    Files.writeString(certs.resolve("tls.crt"), "not a certificate\n");
    assertThat(exitOf("--secure-serving", "--cert-path", certs.toString())).isEqualTo(2);
    assertThat(err.toString(StandardCharsets.UTF_8))
        .contains("--cert-path: certificate file " + certs.resolve("tls.crt"));
  }

  @Test
  void aKeyThatIsNotTheCertificatesIsRefusedNamingIt() throws Exception {
    Path certs = dir.resolve("certs");
    write(ServerTls.selfSigned(), certs);
    Files.writeString(certs.resolve("tls.key"),
        pem("PRIVATE KEY", ServerTls.selfSigned().key.getEncoded()));
    assertThat(exitOf("--secure-serving", "--cert-path", certs.toString())).isEqualTo(2);
    assertThat(err.toString(StandardCharsets.UTF_8)).contains("--cert-path: private key file "
        + certs.resolve("tls.key") + " is not the key of the first certificate in "
        + certs.resolve("tls.crt"));
  }

  @Test
  void aKeyThatIsNoValidKeyIsRefusedNamingIt() throws Exception {
    Path certs = dir.resolve("certs");
    write(ServerTls.selfSigned(), certs);
    Files.writeString(certs.resolve("tls.key"), pem("PRIVATE KEY", new byte[] {1, 2, 3}));
    assertThat(exitOf("--secure-serving", "--cert-path", certs.toString())).isEqualTo(2);
    assertThat(err.toString(StandardCharsets.UTF_8)).contains("--cert-path: private key file "
        + certs.resolve("tls.key") + " holds no valid EC PKCS#8 key");

    err.reset();
    Files.writeString(certs.resolve("tls.key"), pem("EC PRIVATE KEY", new byte[] {1, 2, 3}));
    assertThat(exitOf("--secure-serving", "--cert-path", certs.toString())).isEqualTo(2);
    assertThat(err.toString(StandardCharsets.UTF_8)).contains("--cert-path: private key file "
        + certs.resolve("tls.key") + " holds no valid EC SEC1 key");
  }

  @Test
  void certPathWithoutSecureServingIsAUsageError() throws Exception {
    write(ServerTls.selfSigned(), dir);
    assertThat(exitOf("--cert-path", dir.toString())).isEqualTo(2);
    assertThat(err.toString(StandardCharsets.UTF_8)).contains("--cert-path is given but "
        + "--secure-serving is off");
    err.reset();
    assertThat(exitOf("--secure-serving=false", "--cert-path", dir.toString())).isEqualTo(2);
    assertThat(err.toString(StandardCharsets.UTF_8)).contains("--secure-serving is false");
    err.reset();
    assertThat(exitOf("--secure-serving", "--cert-path=")).isEqualTo(2);
    assertThat(err.toString(StandardCharsets.UTF_8)).contains("--cert-path: '' names no "
        + "directory");
  }

  @Test
  void enableCertReloadServesTheNewCertificateOnceTheFilesChange() throws Exception {
    Path certs = dir.resolve("certs");
    Path first = write(ServerTls.selfSigned(), certs);
    Path firstCopy = Files.copy(first, dir.resolve("first.crt"));
    Main.Running r = main("--secure-serving", "--cert-path", certs.toString(),
        "--enable-cert-reload");
    assertThat(out.toString(StandardCharsets.UTF_8)).contains("reloaded when changed");
    assertThat(health(channel(r.server.port(),
        TlsChannelCredentials.newBuilder().trustManager(firstCopy.toFile()).build())))
        .isEqualTo(ServingStatus.SERVING);

    // a rotation: new files, with a modification time of their own
    Path second = write(ServerTls.selfSigned(), dir.resolve("second"));
    Files.copy(dir.resolve("second").resolve("tls.key"), certs.resolve("tls.key"),
        java.nio.file.StandardCopyOption.REPLACE_EXISTING);
    Files.copy(second, certs.resolve("tls.crt"), java.nio.file.StandardCopyOption.REPLACE_EXISTING);
    java.nio.file.attribute.FileTime later = java.nio.file.attribute.FileTime.fromMillis(
        System.currentTimeMillis() + 5_000);
    Files.setLastModifiedTime(certs.resolve("tls.crt"), later);
    Files.setLastModifiedTime(certs.resolve("tls.key"), later);

    // the files are looked at on a handshake at most once a second: new connections until one
    // sees the new certificate (10 s at most), each a fresh channel trusting only that one
    StatusRuntimeException last = null;
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    boolean served = false;
    while (!served && System.nanoTime() < deadline) {
      ManagedChannel ch = channel(r.server.port(),
          TlsChannelCredentials.newBuilder().trustManager(second.toFile()).build());
      try {
        served = health(ch) == ServingStatus.SERVING;
      } catch (StatusRuntimeException e) {
        last = e;
        Thread.sleep(200);
      }
    }
    assertThat(served).as("the new certificate is served; last failure: %s", last).isTrue();
    // and the old one no longer
    ManagedChannel old = channel(r.server.port(),
        TlsChannelCredentials.newBuilder().trustManager(firstCopy.toFile()).build());
    assertThatThrownBy(() -> health(old)).isInstanceOf(StatusRuntimeException.class);
  }

  @Test
  void enableCertReloadWithoutCertPathIsAUsageError() {
    assertThat(exitOf("--secure-serving", "--enable-cert-reload")).isEqualTo(2);
    assertThat(err.toString(StandardCharsets.UTF_8))
        .contains("--enable-cert-reload needs --cert-path");
  }

  @Test
  void secureServingTakesItsValueOnlyAfterAnEqualsSign() {
    // as Go's boolean flags: a following word is an argument of its own, not the value
    assertThat(exitOf("--secure-serving", "false")).isEqualTo(2);
    assertThat(err.toString(StandardCharsets.UTF_8)).contains("unexpected argument 'false'");
    err.reset();
    assertThat(exitOf("--secure-serving=maybe")).isEqualTo(2);
    assertThat(err.toString(StandardCharsets.UTF_8))
        .contains("--secure-serving: 'maybe' is not true or false");
  }

  /** Trusts any server, keeping the certificates it was shown, as Envoy without validation. */
  static final class Trusting extends X509ExtendedTrustManager {
    final List<X509Certificate> seen = new CopyOnWriteArrayList<>();

    @Override
    public void checkServerTrusted(X509Certificate[] chain, String authType, SSLEngine engine)
        throws CertificateException {
      seen.addAll(List.of(chain));
    }

    @Override
    public void checkServerTrusted(X509Certificate[] chain, String authType, Socket socket) {
      seen.addAll(List.of(chain));
    }

    @Override
    public void checkServerTrusted(X509Certificate[] chain, String authType) {
      seen.addAll(List.of(chain));
    }

    @Override
    public void checkClientTrusted(X509Certificate[] chain, String authType, SSLEngine engine)
        throws CertificateException {
      throw new CertificateException("client side only");
    }

    @Override
    public void checkClientTrusted(X509Certificate[] chain, String authType, Socket socket)
        throws CertificateException {
      throw new CertificateException("client side only");
    }

    @Override
    public void checkClientTrusted(X509Certificate[] chain, String authType)
        throws CertificateException {
      throw new CertificateException("client side only");
    }

    @Override
    public X509Certificate[] getAcceptedIssuers() {
      return new X509Certificate[0];
    }
  }
}
