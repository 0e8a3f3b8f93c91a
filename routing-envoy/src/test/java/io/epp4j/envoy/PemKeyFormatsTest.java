package io.epp4j.envoy;

import static io.epp4j.envoy.TlsServingTest.pem;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.grpc.ManagedChannel;
import io.grpc.TlsChannelCredentials;
import io.grpc.health.v1.HealthCheckResponse.ServingStatus;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.cert.X509Certificate;
import java.security.interfaces.ECPrivateKey;
import java.security.interfaces.RSAPrivateCrtKey;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The key forms Go's {@code tls.LoadX509KeyPair} reads, and so the upstream endpoint picker's
 * {@code --cert-path}: PKCS#8, PKCS#1 ({@code RSA PRIVATE KEY}) and SEC1 ({@code EC PRIVATE KEY}).
 * Keys and certificates are made at test time by the JDK's keytool (and by openssl where the
 * machine has it); the PKCS#1 and SEC1 forms of the keytool keys are DER written here.
 */
class PemKeyFormatsTest extends MainProcessTest {
  @TempDir Path dir;

  record Made(PrivateKey key, X509Certificate cert) {}

  /** A key and a self-signed certificate for it (names localhost and 127.0.0.1) by keytool. */
  Made keytool(String kind) throws Exception {
    Path store = dir.resolve(kind + ".p12");
    List<String> cmd = new ArrayList<>(List.of(
        Path.of(System.getProperty("java.home"), "bin", "keytool").toString(), "-genkeypair",
        "-keystore", store.toString(), "-storetype", "PKCS12", "-storepass", "changeit",
        "-alias", "k", "-dname", "CN=localhost", "-ext", "SAN=dns:localhost,ip:127.0.0.1",
        "-validity", "2"));
    cmd.addAll(switch (kind) {
      case "rsa" -> List.of("-keyalg", "RSA", "-keysize", "2048");
      case "p256" -> List.of("-keyalg", "EC", "-groupname", "secp256r1");
      case "p384" -> List.of("-keyalg", "EC", "-groupname", "secp384r1");
      default -> throw new IllegalArgumentException(kind);
    });
    run(cmd);
    KeyStore ks = KeyStore.getInstance("PKCS12");
    try (InputStream in = Files.newInputStream(store)) {
      ks.load(in, "changeit".toCharArray());
    }
    return new Made((PrivateKey) ks.getKey("k", "changeit".toCharArray()),
        (X509Certificate) ks.getCertificate("k"));
  }

  static String run(List<String> cmd) throws Exception {
    Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
    p.getOutputStream().close();
    String output = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    assertThat(p.waitFor(60, TimeUnit.SECONDS)).as("%s finished", cmd.get(0)).isTrue();
    assertThat(p.exitValue()).as("%s: %s", cmd, output).isZero();
    return output;
  }

  // --- a little DER, to take a PKCS#8 key apart as openssl's -traditional output does ---

  /** The elements inside the DER element that starts {@code der}: [tag, bytes incl. header]. */
  static List<byte[]> children(byte[] der) {
    int[] header = header(der, 0);
    List<byte[]> out = new ArrayList<>();
    int at = header[0];
    int end = header[0] + header[1];
    while (at < end) {
      int[] h = header(der, at);
      out.add(Arrays.copyOfRange(der, at, h[0] + h[1]));
      at = h[0] + h[1];
    }
    return out;
  }

  /** {value start, value length} of the element at {@code at}. */
  static int[] header(byte[] der, int at) {
    int n = der[at + 1] & 0xff;
    int p = at + 2;
    if (n >= 0x80) {
      int count = n & 0x7f;
      n = 0;
      for (int i = 0; i < count; i++) {
        n = (n << 8) | (der[p++] & 0xff);
      }
    }
    return new int[] {p, n};
  }

  static byte[] value(byte[] element) {
    int[] h = header(element, 0);
    return Arrays.copyOfRange(element, h[0], h[0] + h[1]);
  }

  static byte[] tlv(int tag, byte[]... parts) {
    ByteArrayOutputStream body = new ByteArrayOutputStream();
    for (byte[] p : parts) {
      body.writeBytes(p);
    }
    int n = body.size();
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    out.write(tag);
    if (n < 0x80) {
      out.write(n);
    } else if (n < 0x100) {
      out.write(0x81);
      out.write(n);
    } else {
      out.write(0x82);
      out.write(n >>> 8);
      out.write(n);
    }
    out.writeBytes(body.toByteArray());
    return out.toByteArray();
  }

  /** PKCS#1 RSAPrivateKey: what a PKCS#8 RSA key holds in its privateKey OCTET STRING. */
  static byte[] pkcs1(PrivateKey rsa) {
    return value(children(rsa.getEncoded()).get(2));
  }

  /**
   * SEC1 ECPrivateKey with its curve named in parameters [0] (as openssl writes it), or without
   * ({@code named} false): the PKCS#8 key's inner SEC1 key, parameters taken from its algorithm.
   */
  static byte[] sec1(PrivateKey ec, boolean named) {
    List<byte[]> pkcs8 = children(ec.getEncoded());
    byte[] curve = children(pkcs8.get(1)).get(1); // AlgorithmIdentifier { id-ecPublicKey, curve }
    List<byte[]> inner = children(value(pkcs8.get(2)));
    // version, privateKey, then the parameters a SEC1 key carries itself
    return named ? tlv(0x30, inner.get(0), inner.get(1), tlv(0xA0, curve))
        : tlv(0x30, inner.get(0), inner.get(1));
  }

  Path certs(Made made, String keyPem) throws Exception {
    Path certs = dir.resolve("certs");
    Files.createDirectories(certs);
    Files.writeString(certs.resolve("tls.crt"), pem("CERTIFICATE", made.cert().getEncoded()));
    Files.writeString(certs.resolve("tls.key"), keyPem);
    return certs;
  }

  static void assertSameKey(PrivateKey read, PrivateKey made) {
    assertThat(read.getAlgorithm()).isEqualTo(made.getAlgorithm());
    if (made instanceof RSAPrivateCrtKey rsa) {
      RSAPrivateCrtKey r = (RSAPrivateCrtKey) read;
      assertThat(r.getModulus()).isEqualTo(rsa.getModulus());
      assertThat(r.getPrivateExponent()).isEqualTo(rsa.getPrivateExponent());
    } else {
      ECPrivateKey r = (ECPrivateKey) read;
      ECPrivateKey ec = (ECPrivateKey) made;
      assertThat(r.getS()).isEqualTo(ec.getS());
      assertThat(r.getParams().getCurve()).isEqualTo(ec.getParams().getCurve());
    }
  }

  @ParameterizedTest
  @ValueSource(strings = {"rsa", "p256", "p384"})
  void pkcs1AndSec1KeysAreReadAsTheirPkcs8FormIs(String kind) throws Exception {
    Made made = keytool(kind);
    String traditional = kind.equals("rsa") ? pem("RSA PRIVATE KEY", pkcs1(made.key()))
        : pem("EC PRIVATE KEY", sec1(made.key(), true));
    Path certs = certs(made, traditional);
    ServerTls tls = ServerTls.fromPem(certs.resolve("tls.crt"), certs.resolve("tls.key"));
    assertSameKey(tls.key, made.key());

    Files.writeString(certs.resolve("tls.key"), pem("PRIVATE KEY", made.key().getEncoded()));
    assertSameKey(ServerTls.fromPem(certs.resolve("tls.crt"), certs.resolve("tls.key")).key,
        made.key());
  }

  @ParameterizedTest
  @ValueSource(strings = {"rsa", "p384"})
  void certPathServesTlsWithAPkcs1OrSec1Key(String kind) throws Exception {
    Made made = keytool(kind);
    Path certs = certs(made, kind.equals("rsa") ? pem("RSA PRIVATE KEY", pkcs1(made.key()))
        : pem("EC PRIVATE KEY", sec1(made.key(), true)));
    Main.Running r = main("--secure-serving", "--cert-path", certs.toString());
    ManagedChannel ch = channel(r.server.port(), TlsChannelCredentials.newBuilder()
        .trustManager(certs.resolve("tls.crt").toFile()).build());
    assertThat(TlsServingTest.health(ch)).isEqualTo(ServingStatus.SERVING);
    TlsServingTest.roundTrip(ch);
  }

  /** Keys as openssl writes them by default for these commands, where openssl is installed. */
  @Test
  void opensslTraditionalKeysAreRead() throws Exception {
    boolean openssl;
    try {
      run(List.of("openssl", "version"));
      openssl = true;
    } catch (IOException e) {
      openssl = false;
    }
    assumeTrue(openssl, "openssl is not installed");
    Path certs = dir.resolve("certs");
    Files.createDirectories(certs);
    Path key = certs.resolve("tls.key");
    Path crt = certs.resolve("tls.crt");
    // RSA PRIVATE KEY; then EC PARAMETERS followed by EC PRIVATE KEY, for P-256 and P-384
    List<List<String>> makers = List.of(
        List.of("openssl", "genrsa", "-traditional", "-out", key.toString(), "2048"),
        List.of("openssl", "ecparam", "-name", "prime256v1", "-genkey", "-out", key.toString()),
        List.of("openssl", "ecparam", "-name", "secp384r1", "-genkey", "-out", key.toString()));
    List<String> labels = List.of("-----BEGIN RSA PRIVATE KEY-----",
        "-----BEGIN EC PRIVATE KEY-----", "-----BEGIN EC PRIVATE KEY-----");
    for (int i = 0; i < makers.size(); i++) {
      run(makers.get(i));
      assertThat(Files.readString(key)).contains(labels.get(i));
      run(List.of("openssl", "req", "-x509", "-key", key.toString(), "-out", crt.toString(),
          "-subj", "/CN=localhost", "-days", "1"));
      ServerTls tls = ServerTls.fromPem(crt, key);
      assertThat(tls.key.getAlgorithm()).isEqualTo(i == 0 ? "RSA" : "EC");
    }
  }

  @Test
  void malformedPkcs1AndSec1KeysAreRefusedNamingTheFile() throws Exception {
    Made ec = keytool("p256");
    Path certs = certs(ec, pem("EC PRIVATE KEY", new byte[] {1, 2, 3}));
    Path crt = certs.resolve("tls.crt");
    Path key = certs.resolve("tls.key");
    assertThatThrownBy(() -> ServerTls.fromPem(crt, key))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageStartingWith("private key file " + key + " holds no valid EC SEC1 key");

    Files.writeString(key, pem("RSA PRIVATE KEY", new byte[] {0x30, 3, 2, 1, 0}));
    assertThatThrownBy(() -> ServerTls.fromPem(crt, key))
        .hasMessageStartingWith("private key file " + key + " holds no valid RSA PKCS#1 key");

    // a SEC1 key that does not name its curve cannot be read: the key alone does not tell it
    Files.writeString(key, pem("EC PRIVATE KEY", sec1(ec.key(), false)));
    assertThatThrownBy(() -> ServerTls.fromPem(crt, key))
        .hasMessageStartingWith("private key file " + key + " holds an EC PRIVATE KEY that does "
            + "not name its curve");

    // a well-formed key of another kind than the certificate's
    Made rsa = keytool("rsa");
    Files.writeString(key, pem("RSA PRIVATE KEY", pkcs1(rsa.key())));
    assertThatThrownBy(() -> ServerTls.fromPem(crt, key))
        .hasMessage("private key file " + key + " is not the key of the first certificate in "
            + crt);
  }

  @Test
  void encryptedKeysAreRefusedSayingSo() throws Exception {
    Made ec = keytool("p256");
    Path certs = certs(ec, pem("ENCRYPTED PRIVATE KEY", new byte[] {0x30, 0}));
    Path crt = certs.resolve("tls.crt");
    Path key = certs.resolve("tls.key");
    assertThatThrownBy(() -> ServerTls.fromPem(crt, key))
        .hasMessageStartingWith("private key file " + key + " holds an encrypted key "
            + "(-----BEGIN ENCRYPTED PRIVATE KEY-----)");

    // openssl's legacy form: headers in the PEM block
    Files.writeString(key, "-----BEGIN EC PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\n"
        + "DEK-Info: AES-128-CBC,00112233445566778899AABBCCDDEEFF\n\nAAAA\n"
        + "-----END EC PRIVATE KEY-----\n");
    assertThatThrownBy(() -> ServerTls.fromPem(crt, key))
        .hasMessageStartingWith("private key file " + key + " holds an encrypted key "
            + "(-----BEGIN EC PRIVATE KEY-----)");
  }
}
