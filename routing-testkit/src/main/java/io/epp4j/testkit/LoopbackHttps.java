package io.epp4j.testkit;

import com.sun.net.httpserver.HttpHandler;
import com.sun.net.httpserver.HttpsConfigurator;
import com.sun.net.httpserver.HttpsServer;
import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.security.GeneralSecurityException;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.cert.Certificate;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;

/**
 * An HTTPS server on the loopback address and a free port that presents a given key and
 * certificate chain: a model server whose page (its Prometheus metrics, say) is served over TLS
 * with a certificate the JVM does not trust, such as a self-signed one, for checking what a
 * client of it does with such a certificate.
 *
 * <pre>{@code
 * HttpsServer replica = LoopbackHttps.start(key, chain, "/metrics", exchange -> ...);
 * try {
 *   String id = "127.0.0.1:" + replica.getAddress().getPort();
 *   ...
 * } finally {
 *   replica.stop(0);
 * }
 * }</pre>
 */
public final class LoopbackHttps {
  private LoopbackHttps() {}

  /**
   * Starts a server answering {@code path} (and the paths below it) with {@code handler}; the
   * caller stops it.
   */
  public static HttpsServer start(PrivateKey key, Certificate[] chain, String path,
      HttpHandler handler) throws GeneralSecurityException, IOException {
    // the key store lives only in memory: its password protects nothing
    char[] password = "changeit".toCharArray();
    KeyStore keys = KeyStore.getInstance("PKCS12");
    keys.load(null, null);
    keys.setKeyEntry("server", key, password, chain);
    KeyManagerFactory kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
    kmf.init(keys, password);
    SSLContext tls = SSLContext.getInstance("TLS");
    tls.init(kmf.getKeyManagers(), null, null);
    HttpsServer server = HttpsServer.create(
        new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
    server.setHttpsConfigurator(new HttpsConfigurator(tls));
    server.createContext(path, handler);
    server.start();
    return server;
  }
}
