package io.epp4j.envoy;

import io.grpc.ServerCredentials;
import io.grpc.TlsServerCredentials;
import java.io.IOException;
import java.net.Socket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.BasicFileAttributes;
import java.security.Principal;
import java.security.PrivateKey;
import java.security.cert.X509Certificate;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.TimeUnit;
import java.util.logging.Logger;
import javax.net.ssl.SSLEngine;
import javax.net.ssl.X509ExtendedKeyManager;
import org.jspecify.annotations.Nullable;

/**
 * Serves the key and certificate chain of two PEM files, reading them again when either changes
 * (a renewed Kubernetes TLS secret, a cert-manager rotation), as the upstream endpoint picker's
 * {@code --enable-cert-reload} does. A handshake looks at the files' modification times and sizes,
 * at most once a second; new files that cannot be read or do not match are logged (naming the
 * file) and the key served so far stays. Each version has an alias of its own, so a TLS engine
 * that caches key material by alias takes the new one.
 */
final class ReloadingKeyManager extends X509ExtendedKeyManager {
  private static final Logger LOG = Logger.getLogger(ReloadingKeyManager.class.getName());
  static final long CHECK_EVERY_NANOS = TimeUnit.SECONDS.toNanos(1);

  private record Version(String alias, ServerTls tls, List<Object> stamp) {}

  private final Path certificateChain;
  private final Path privateKey;
  private volatile Version current;
  private volatile @Nullable Version previous;
  private volatile long nextCheck;
  private int generation;

  /** Reads the files now: a problem with them throws, as {@link ServerTls#fromPem} does. */
  ReloadingKeyManager(Path certificateChain, Path privateKey) {
    this.certificateChain = Objects.requireNonNull(certificateChain, "certificateChain");
    this.privateKey = Objects.requireNonNull(privateKey, "privateKey");
    List<Object> stamp = stamp();
    this.current = new Version("server-0", ServerTls.fromPem(certificateChain, privateKey), stamp);
    this.nextCheck = System.nanoTime() + CHECK_EVERY_NANOS;
  }

  ServerCredentials credentials() {
    return TlsServerCredentials.newBuilder().keyManager(this).build();
  }

  private List<Object> stamp() {
    return List.of(attributes(certificateChain), attributes(privateKey));
  }

  private static Object attributes(Path file) {
    try {
      BasicFileAttributes a = Files.readAttributes(file, BasicFileAttributes.class);
      return List.of(a.lastModifiedTime(), a.size());
    } catch (IOException | SecurityException e) {
      return e.getClass().getName(); // gone for now: a change, read when it is back
    }
  }

  /** Reads the files again if they changed since the last look, at most once a second. */
  void maybeReload() {
    long now = System.nanoTime();
    if (now - nextCheck < 0) {
      return;
    }
    synchronized (this) {
      if (now - nextCheck < 0) {
        return;
      }
      nextCheck = now + CHECK_EVERY_NANOS;
      List<Object> stamp = stamp();
      Version v = current;
      if (stamp.equals(v.stamp())) {
        return;
      }
      try {
        ServerTls tls = ServerTls.fromPem(certificateChain, privateKey);
        previous = v;
        current = new Version("server-" + ++generation, tls, stamp);
        LOG.info("TLS certificate reloaded from " + certificateChain);
      } catch (IllegalArgumentException e) {
        // half-written files are read again at the next change; the old key stays in use
        current = new Version(v.alias(), v.tls(), stamp);
        LOG.warning("TLS certificate not reloaded, the one in use stays: " + e.getMessage());
      }
    }
  }

  private @Nullable Version byAlias(String alias) {
    Version c = current;
    if (c.alias().equals(alias)) {
      return c;
    }
    Version p = previous;
    return p != null && p.alias().equals(alias) ? p : null;
  }

  private @Nullable String alias(String keyType) {
    maybeReload();
    Version c = current;
    String algorithm = c.tls().key.getAlgorithm();
    // TLS 1.2 asks for EC_EC or RSA_... too: the key's algorithm comes first
    return keyType.equals(algorithm) || keyType.startsWith(algorithm + "_") ? c.alias() : null;
  }

  @Override
  public @Nullable String chooseEngineServerAlias(String keyType, Principal[] issuers, SSLEngine engine) {
    return alias(keyType);
  }

  @Override
  public @Nullable String chooseServerAlias(String keyType, Principal[] issuers, Socket socket) {
    return alias(keyType);
  }

  @Override
  public String @Nullable [] getServerAliases(String keyType, Principal[] issuers) {
    String a = alias(keyType);
    return a == null ? null : new String[] {a};
  }

  @Override
  public X509Certificate @Nullable [] getCertificateChain(String alias) {
    Version v = byAlias(alias);
    return v == null ? null : v.tls().chain.clone();
  }

  @Override
  public @Nullable PrivateKey getPrivateKey(String alias) {
    Version v = byAlias(alias);
    return v == null ? null : v.tls().key;
  }

  @Override
  public String @Nullable [] getClientAliases(String keyType, Principal[] issuers) {
    return null;
  }

  @Override
  public @Nullable String chooseClientAlias(String[] keyType, Principal[] issuers, Socket socket) {
    return null;
  }
}
