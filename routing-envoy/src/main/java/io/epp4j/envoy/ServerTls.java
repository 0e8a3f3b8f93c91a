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
   * Reads a PEM certificate chain (the server's first) and its unencrypted PEM private key:
   * PKCS#8, PKCS#1 (RSA) or SEC1 (EC, naming its curve), the forms Go's
   * {@code tls.LoadX509KeyPair} reads. Every refusal names the file it is about.
   *
   * @throws IllegalArgumentException when a file is missing or unreadable, holds no certificate
   *     or key (or only an encrypted one), or the key is not the certificate's
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

  /** A PEM block: its label, then any RFC 1421 headers and the base64 text. */
  private static final Pattern PEM = Pattern.compile(
      "-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \\1-----", Pattern.DOTALL);
  private static final Pattern PEM_HEADER = Pattern.compile("(?m)^[A-Za-z-]+:.*$");

  /** rsaEncryption, the algorithm of a PKCS#1 key wrapped into PKCS#8. */
  private static final String RSA_ENCRYPTION = "1.2.840.113549.1.1.1";
  /** id-ecPublicKey, the algorithm of a SEC1 key wrapped into PKCS#8. */
  private static final String EC_PUBLIC_KEY = "1.2.840.10045.2.1";

  /**
   * The first private key in the file, in any form Go's {@code tls.LoadX509KeyPair} reads, so
   * that files made for the upstream endpoint picker serve here: PKCS#8
   * ({@code PRIVATE KEY}), PKCS#1 ({@code RSA PRIVATE KEY}) or SEC1 ({@code EC PRIVATE KEY},
   * with its curve named). The last two are wrapped into PKCS#8, which the JDK reads.
   */
  private static PrivateKey privateKey(Path file, byte[] bytes, String algorithm) {
    Matcher m = PEM.matcher(new String(bytes, StandardCharsets.US_ASCII));
    while (m.find()) {
      String label = m.group(1);
      if (label.equals("ENCRYPTED PRIVATE KEY")) {
        throw encrypted(file, label);
      }
      String format = switch (label) {
        case "PRIVATE KEY" -> "PKCS#8";
        case "RSA PRIVATE KEY" -> "PKCS#1";
        case "EC PRIVATE KEY" -> "SEC1";
        default -> null;
      };
      if (format == null) {
        continue; // a certificate, EC PARAMETERS (openssl ecparam writes them first), ...
      }
      String body = m.group(2);
      if (body.contains("Proc-Type:") && body.contains("ENCRYPTED")) {
        throw encrypted(file, label); // the legacy openssl form: Proc-Type: 4,ENCRYPTED
      }
      String keyAlgorithm = format.equals("PKCS#1") ? "RSA"
          : format.equals("SEC1") ? "EC" : algorithm;
      String what = keyAlgorithm + " " + format + " key";
      byte[] der;
      try {
        der = Base64.getMimeDecoder().decode(PEM_HEADER.matcher(body).replaceAll(""));
      } catch (IllegalArgumentException e) {
        throw invalid(file, what, e);
      }
      byte[] pkcs8 = switch (format) {
        case "PKCS#1" -> seq(tlv(0x02, new byte[] {0}),
            seq(oid(RSA_ENCRYPTION), tlv(0x05, new byte[0])), tlv(0x04, der));
        case "SEC1" -> seq(tlv(0x02, new byte[] {0}),
            seq(oid(EC_PUBLIC_KEY), sec1Curve(file, der, what)), tlv(0x04, der));
        default -> der;
      };
      try {
        return KeyFactory.getInstance(keyAlgorithm).generatePrivate(
            new PKCS8EncodedKeySpec(pkcs8));
      } catch (GeneralSecurityException | IllegalArgumentException e) {
        throw invalid(file, what, e);
      }
    }
    throw new IllegalArgumentException("private key file " + file + " holds no PEM private key "
        + "(expected -----BEGIN PRIVATE KEY-----, -----BEGIN RSA PRIVATE KEY----- or "
        + "-----BEGIN EC PRIVATE KEY-----)");
  }

  private static IllegalArgumentException invalid(Path file, String what, Exception e) {
    return new IllegalArgumentException("private key file " + file + " holds no valid " + what
        + " (" + e.getClass().getSimpleName() + ")", e);
  }

  private static IllegalArgumentException encrypted(Path file, String label) {
    return new IllegalArgumentException("private key file " + file + " holds an encrypted key "
        + "(-----BEGIN " + label + "-----), which cannot be read without its passphrase: give it "
        + "unencrypted "
        + "(openssl pkey -in KEY -out tls.key asks for the passphrase and writes it so)");
  }

  /**
   * The named curve of a SEC1 {@code ECPrivateKey} (RFC 5915: version, privateKey,
   * [0] parameters, [1] publicKey), as its DER OID, which the PKCS#8 wrapper needs.
   */
  private static byte[] sec1Curve(Path file, byte[] der, String what) {
    boolean named = false;
    byte[] curve = null;
    try {
      Der fields = new Der(der, 0, der.length).next(0x30).contents();
      fields.next(0x02); // version 1
      fields.next(0x04); // the private key
      while (fields.hasMore()) {
        Der field = fields.next(-1);
        if (field.tag == 0xA0) {
          Der parameters = field.contents();
          named = true;
          if (parameters.hasMore() && parameters.peekTag() == 0x06) {
            curve = parameters.next(0x06).encoded();
          }
          break;
        }
      }
    } catch (IllegalArgumentException | ArrayIndexOutOfBoundsException e) {
      throw invalid(file, what, e);
    }
    if (curve != null) {
      return curve;
    }
    if (named) {
      throw new IllegalArgumentException("private key file " + file + " holds an EC PRIVATE "
          + "KEY with explicit curve parameters; only a named curve (e.g. prime256v1, "
          + "secp384r1) is read: openssl ec -in KEY -param_enc named_curve -out tls.key");
    }
    throw new IllegalArgumentException("private key file " + file + " holds an EC PRIVATE KEY "
        + "that does not name its curve (no parameters [0]), which the key alone cannot tell: "
        + "give it with its curve named, or as PKCS#8 (-----BEGIN PRIVATE KEY-----)");
  }

  /** A cursor over DER elements in {@code bytes[from, to)}; malformed input throws. */
  private static final class Der {
    private final byte[] bytes;
    private int at;
    private final int end;
    /** Of the element last read by {@link #next}: its tag, start, and value's range. */
    int tag;
    private int start;
    private int valueStart;
    private int valueEnd;

    Der(byte[] bytes, int from, int to) {
      this.bytes = bytes;
      this.at = from;
      this.end = to;
    }

    boolean hasMore() {
      return at < end;
    }

    int peekTag() {
      return bytes[at] & 0xff;
    }

    /** Reads the next element, which must carry {@code expected} (-1: any tag). */
    Der next(int expected) {
      if (at + 2 > end) {
        throw new IllegalArgumentException("DER: truncated");
      }
      int t = bytes[at] & 0xff;
      if (expected >= 0 && t != expected) {
        throw new IllegalArgumentException("DER: unexpected tag " + t);
      }
      int p = at + 1;
      int n = bytes[p++] & 0xff;
      if (n >= 0x80) {
        int count = n & 0x7f;
        if (count == 0 || count > 3 || p + count > end) {
          throw new IllegalArgumentException("DER: bad length");
        }
        n = 0;
        for (int i = 0; i < count; i++) {
          n = (n << 8) | (bytes[p++] & 0xff);
        }
      }
      if (n > end - p) {
        throw new IllegalArgumentException("DER: truncated");
      }
      Der element = new Der(bytes, p, p + n);
      element.tag = t;
      element.start = at;
      element.valueStart = p;
      element.valueEnd = p + n;
      at = p + n;
      return element;
    }

    /** The elements inside this one. */
    Der contents() {
      return new Der(bytes, valueStart, valueEnd);
    }

    /** This element, tag and length included. */
    byte[] encoded() {
      return java.util.Arrays.copyOfRange(bytes, start, valueEnd);
    }
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
