package io.epp4j.envoy;

import io.grpc.ServerCredentials;
import io.grpc.TlsServerCredentials;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.KeyPair;
import java.security.KeyPairGenerator;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.SecureRandom;
import java.security.Signature;
import java.security.cert.Certificate;
import java.security.cert.CertificateException;
import java.security.cert.CertificateFactory;
import java.security.cert.X509Certificate;
import java.security.spec.ECGenParameterSpec;
import java.security.spec.PKCS8EncodedKeySpec;
import java.time.ZoneOffset;
import java.time.ZonedDateTime;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collection;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.net.ssl.KeyManagerFactory;

/**
 * The server's TLS key and certificate chain: read from PEM files, as the upstream endpoint
 * picker reads {@code tls.crt} and {@code tls.key}, or a self-signed certificate made at start.
 * Only public JDK API: the certificate is DER written here and signed with {@link Signature}.
 */
final class ServerTls {
  /** How long a self-signed certificate is valid: Envoy set up without validation ignores it. */
  static final int SELF_SIGNED_YEARS = 10;

  final PrivateKey key;
  final X509Certificate[] chain;

  private ServerTls(PrivateKey key, X509Certificate[] chain) {
    this.key = key;
    this.chain = chain;
  }

  /** gRPC server credentials serving this key and chain. */
  ServerCredentials credentials() {
    try {
      KeyStore store = KeyStore.getInstance("PKCS12");
      store.load(null, null);
      char[] none = new char[0];
      store.setKeyEntry("server", key, none, chain);
      KeyManagerFactory kmf =
          KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
      kmf.init(store, none);
      return TlsServerCredentials.newBuilder().keyManager(kmf.getKeyManagers()).build();
    } catch (GeneralSecurityException | IOException e) {
      throw new IllegalStateException("cannot set up TLS with the server's key: "
          + e.getClass().getName(), e);
    }
  }

  /**
   * Reads a PEM certificate chain (the server's first) and its unencrypted PKCS#8 PEM private
   * key. Every refusal names the file it is about.
   *
   * @throws IllegalArgumentException when a file is missing or unreadable, holds no certificate
   *     or key, or the key is not the certificate's
   */
  static ServerTls fromPem(Path certificateChain, Path privateKey) {
    byte[] certBytes = read(certificateChain, "certificate");
    List<X509Certificate> certs = new ArrayList<>();
    try {
      Collection<? extends Certificate> read = CertificateFactory.getInstance("X.509")
          .generateCertificates(new ByteArrayInputStream(certBytes));
      for (Certificate c : read) {
        certs.add((X509Certificate) c);
      }
    } catch (CertificateException | RuntimeException e) {
      throw new IllegalArgumentException("certificate file " + certificateChain
          + " is not a PEM certificate chain (" + e.getClass().getSimpleName() + ")", e);
    }
    if (certs.isEmpty()) {
      throw new IllegalArgumentException("certificate file " + certificateChain
          + " holds no certificate (expected -----BEGIN CERTIFICATE-----)");
    }
    X509Certificate leaf = certs.get(0);
    PrivateKey key = privateKey(privateKey, read(privateKey, "private key"),
        leaf.getPublicKey().getAlgorithm());
    if (!matches(key, leaf)) {
      throw new IllegalArgumentException("private key file " + privateKey + " is not the key of "
          + "the first certificate in " + certificateChain);
    }
    return new ServerTls(key, certs.toArray(new X509Certificate[0]));
  }

  private static byte[] read(Path file, String what) {
    try {
      return Files.readAllBytes(file);
    } catch (IOException | SecurityException e) {
      throw new IllegalArgumentException("cannot read " + what + " file " + file + " ("
          + e.getClass().getSimpleName() + ")", e);
    }
  }

  private static final Pattern PEM = Pattern.compile(
      "-----BEGIN ([A-Z0-9 ]+)-----([A-Za-z0-9+/=\\s]*)-----END \\1-----");

  private static PrivateKey privateKey(Path file, byte[] bytes, String algorithm) {
    Matcher m = PEM.matcher(new String(bytes, StandardCharsets.US_ASCII));
    while (m.find()) {
      String label = m.group(1);
      if (label.equals("PRIVATE KEY")) {
        try {
          byte[] der = Base64.getMimeDecoder().decode(m.group(2));
          return KeyFactory.getInstance(algorithm).generatePrivate(new PKCS8EncodedKeySpec(der));
        } catch (GeneralSecurityException | IllegalArgumentException e) {
          throw new IllegalArgumentException("private key file " + file + " holds no valid "
              + algorithm + " PKCS#8 key (" + e.getClass().getSimpleName() + ")", e);
        }
      }
      if (label.equals("RSA PRIVATE KEY") || label.equals("EC PRIVATE KEY")
          || label.equals("ENCRYPTED PRIVATE KEY")) {
        throw new IllegalArgumentException("private key file " + file + " holds a " + label
            + "; an unencrypted PKCS#8 key (-----BEGIN PRIVATE KEY-----) is needed: "
            + "openssl pkcs8 -topk8 -nocrypt -in KEY -out tls.key converts it");
      }
    }
    throw new IllegalArgumentException("private key file " + file + " holds no PEM private key "
        + "(expected -----BEGIN PRIVATE KEY-----)");
  }

  /** Whether {@code key} signs what the certificate's public key verifies. */
  private static boolean matches(PrivateKey key, X509Certificate cert) {
    String algorithm = switch (key.getAlgorithm()) {
      case "RSA" -> "SHA256withRSA";
      case "EC" -> "SHA256withECDSA";
      case "Ed25519", "EdDSA" -> "Ed25519";
      case "Ed448" -> "Ed448";
      default -> null;
    };
    if (algorithm == null) {
      return true; // no check known for it: the handshake will tell
    }
    try {
      byte[] probe = "epp4j key check".getBytes(StandardCharsets.US_ASCII);
      Signature s = Signature.getInstance(algorithm);
      s.initSign(key);
      s.update(probe);
      byte[] signature = s.sign();
      Signature v = Signature.getInstance(algorithm);
      v.initVerify(cert.getPublicKey());
      v.update(probe);
      return v.verify(signature);
    } catch (GeneralSecurityException e) {
      return false;
    }
  }

  /**
   * A new EC P-256 key and a self-signed certificate for it (CN=routing-envoy, names localhost,
   * 127.0.0.1 and ::1), valid from an hour ago for {@value #SELF_SIGNED_YEARS} years.
   */
  static ServerTls selfSigned() {
    try {
      KeyPairGenerator g = KeyPairGenerator.getInstance("EC");
      g.initialize(new ECGenParameterSpec("secp256r1"));
      KeyPair pair = g.generateKeyPair();
      byte[] sigAlg = seq(oid("1.2.840.10045.4.3.2")); // ecdsa-with-SHA256
      byte[] name = seq(set(seq(oid("2.5.4.3"), tlv(0x0C, "routing-envoy".getBytes(
          StandardCharsets.UTF_8)))));
      ZonedDateTime now = ZonedDateTime.now(ZoneOffset.UTC).withNano(0);
      byte[] serial = new byte[16];
      new SecureRandom().nextBytes(serial);
      serial[0] &= 0x7f; // positive
      serial[0] |= 0x40; // and no leading zero byte
      byte[] altNames = seq(
          tlv(0x82, "localhost".getBytes(StandardCharsets.US_ASCII)),
          tlv(0x87, new byte[] {127, 0, 0, 1}),
          tlv(0x87, ipv6Loopback()));
      byte[] extensions = tlv(0xA3, seq(
          seq(oid("2.5.29.17"), tlv(0x04, altNames)), // subjectAltName
          seq(oid("2.5.29.19"), tlv(0x04, seq())))); // basicConstraints: not a CA
      byte[] tbs = seq(
          tlv(0xA0, tlv(0x02, new byte[] {2})), // v3
          tlv(0x02, serial),
          sigAlg,
          name,
          seq(time(now.minusHours(1)), time(now.plusYears(SELF_SIGNED_YEARS))),
          name,
          pair.getPublic().getEncoded(),
          extensions);
      Signature s = Signature.getInstance("SHA256withECDSA");
      s.initSign(pair.getPrivate());
      s.update(tbs);
      byte[] signature = s.sign();
      byte[] bits = new byte[signature.length + 1]; // no unused bits
      System.arraycopy(signature, 0, bits, 1, signature.length);
      byte[] der = seq(tbs, sigAlg, tlv(0x03, bits));
      X509Certificate cert = (X509Certificate) CertificateFactory.getInstance("X.509")
          .generateCertificate(new ByteArrayInputStream(der));
      cert.verify(pair.getPublic());
      return new ServerTls(pair.getPrivate(), new X509Certificate[] {cert});
    } catch (GeneralSecurityException e) {
      throw new IllegalStateException("cannot make a self-signed certificate: "
          + e.getClass().getName() + ": " + e.getMessage(), e);
    }
  }

  private static byte[] ipv6Loopback() {
    byte[] a = new byte[16];
    a[15] = 1;
    return a;
  }

  private static final DateTimeFormatter UTC_TIME = DateTimeFormatter.ofPattern("yyMMddHHmmss'Z'");
  private static final DateTimeFormatter GENERALIZED_TIME =
      DateTimeFormatter.ofPattern("yyyyMMddHHmmss'Z'");

  /** RFC 5280: UTCTime through 2049, GeneralizedTime from 2050. */
  private static byte[] time(ZonedDateTime t) {
    return t.getYear() < 2050
        ? tlv(0x17, UTC_TIME.format(t).getBytes(StandardCharsets.US_ASCII))
        : tlv(0x18, GENERALIZED_TIME.format(t).getBytes(StandardCharsets.US_ASCII));
  }

  private static byte[] oid(String dotted) {
    String[] parts = dotted.split("\\.");
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    out.write(Integer.parseInt(parts[0]) * 40 + Integer.parseInt(parts[1]));
    for (int i = 2; i < parts.length; i++) {
      long v = Long.parseLong(parts[i]);
      int groups = Math.max(1, (64 - Long.numberOfLeadingZeros(v) + 6) / 7);
      for (int gIdx = groups - 1; gIdx >= 0; gIdx--) {
        int b = (int) ((v >>> (7 * gIdx)) & 0x7f);
        out.write(gIdx > 0 ? b | 0x80 : b);
      }
    }
    return tlv(0x06, out.toByteArray());
  }

  private static byte[] seq(byte[]... parts) {
    return tlv(0x30, concat(parts));
  }

  private static byte[] set(byte[]... parts) {
    return tlv(0x31, concat(parts));
  }

  private static byte[] concat(byte[]... parts) {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    for (byte[] p : parts) {
      out.writeBytes(p);
    }
    return out.toByteArray();
  }

  private static byte[] tlv(int tag, byte[] value) {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    out.write(tag);
    int n = value.length;
    if (n < 0x80) {
      out.write(n);
    } else {
      int bytes = (32 - Integer.numberOfLeadingZeros(n) + 7) / 8;
      out.write(0x80 | bytes);
      for (int i = bytes - 1; i >= 0; i--) {
        out.write(n >>> (8 * i));
      }
    }
    out.writeBytes(value);
    return out.toByteArray();
  }
}
