package io.epp4j.redis;

import java.io.File;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.jspecify.annotations.Nullable;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.extension.AfterAllCallback;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionContext;
import org.junit.jupiter.api.extension.ParameterContext;
import org.junit.jupiter.api.extension.ParameterResolver;

/**
 * A real {@code redis-server} (or {@code valkey-server}: set the system property
 * {@code epp4j.redis.server} to the binary) on a free loopback port, without persistence, for the
 * tests of one class. Tests can stop it and start it again on the same port. The class is
 * skipped, saying why, only when the binary is not installed; {@code .ci/run} installs it.
 */
public final class RedisServer implements BeforeAllCallback, AfterAllCallback, ParameterResolver {
  private static final long START_TIMEOUT_NANOS = 10_000_000_000L;

  private final @Nullable String password;
  private final boolean tls;
  private @Nullable Path certs;
  private @Nullable String binary;
  private int port;
  private @Nullable Process process;

  /** A plain server without a password. */
  public RedisServer() {
    this(false, null);
  }

  private RedisServer(boolean tls, @Nullable String password) {
    this.tls = tls;
    this.password = password;
  }

  /**
   * A server that speaks only TLS ({@code --port 0}: no plain port), with a certificate of a
   * throwaway CA made by the {@code openssl} command for 127.0.0.1, no client certificates, and
   * {@code requirepass password}. Skipped, saying why, when {@code openssl} is missing or the
   * binary was built without TLS, unless the environment variable {@code CI} is set: then that
   * is a failure.
   */
  public static RedisServer tls(String password) {
    return new RedisServer(true, password);
  }

  @Override
  public void beforeAll(ExtensionContext context) throws Exception {
    binary = findBinary();
    Assumptions.assumeTrue(binary != null, "redis-server is not installed (apt-get install -y"
        + " redis-server, or set -Depp4j.redis.server=/path/to/valkey-server); .ci/run installs it");
    if (tls) {
      certs = TestCertificates.create(Files.createTempDirectory("epp4j-redis-tls"));
      skipOrFail(certs != null, "the openssl command is not installed; it makes the throwaway"
          + " CA and server certificate");
      try {
        startOnAFreePort();
      } catch (IllegalStateException e) {
        // a server built without TLS rejects the tls-* options at start
        boolean noTls = e.getMessage() != null && e.getMessage().toLowerCase(java.util.Locale.ROOT)
            .contains("tls");
        skipOrFail(!noTls, binary + " was built without TLS support: " + e.getMessage());
        throw e;
      }
      return;
    }
    startOnAFreePort();
  }

  /**
   * The first start: on a port that is free now and, should another process take it before the
   * server binds it, on another one (no client knows the port yet).
   */
  private void startOnAFreePort() throws IOException, InterruptedException {
    for (int attempt = 1; ; attempt++) {
      port = freePort();
      try {
        start(false);
        return;
      } catch (PortTakenException e) {
        if (attempt == 10) {
          throw new IllegalStateException("no free port for redis-server after 10 attempts", e);
        }
      }
    }
  }

  /**
   * A loopback port free now, below the kernel's range of ephemeral ports when it can tell it:
   * every outgoing connection of the machine (other test runs' clients included) takes its local
   * port from that range, and one that held this port when a test restarts the server on it
   * (which it must: the routers' URIs name it) would keep the server from binding it. A port
   * from {@code new ServerSocket(0)} is from that very range.
   */
  private static int freePort() throws IOException {
    int low = ephemeralLow();
    java.util.concurrent.ThreadLocalRandom rnd = java.util.concurrent.ThreadLocalRandom.current();
    for (int i = 0; low > 11_000 && i < 100; i++) {
      int candidate = rnd.nextInt(10_000, low);
      try (ServerSocket s = new ServerSocket()) {
        s.setReuseAddress(true); // as redis-server binds: a TIME_WAIT left on it is no obstacle
        s.bind(new InetSocketAddress(java.net.InetAddress.getLoopbackAddress(), candidate), 1);
        return candidate;
      } catch (IOException taken) {
        // another one
      }
    }
    try (ServerSocket s = new ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
      return s.getLocalPort();
    }
  }

  /** The lowest ephemeral port (Linux), or -1 when unknown. */
  private static int ephemeralLow() {
    try {
      String range = procFile("/proc/sys/net/ipv4/ip_local_port_range");
      return Integer.parseInt(range.split("\\s+")[0]);
    } catch (IOException | RuntimeException e) {
      return -1;
    }
  }

  /**
   * A small file of /proc, read in one call: Files.readString reads a file that says it is empty
   * one byte first, and a sysctl file then answers the next read, at offset 1, with nothing.
   */
  static String procFile(String path) throws IOException {
    try (java.io.InputStream in = Files.newInputStream(Path.of(path))) {
      return new String(in.readNBytes(4096), java.nio.charset.StandardCharsets.US_ASCII).trim();
    }
  }

  /** The server could not bind its port: another socket holds it. */
  private static final class PortTakenException extends IllegalStateException {
    private static final long serialVersionUID = 1L;

    PortTakenException(String message) {
      super(message);
    }
  }

  private static void skipOrFail(boolean ok, String why) {
    if (ok) {
      return;
    }
    if (System.getenv("CI") != null) {
      throw new IllegalStateException(why + " (CI is set: the TLS tests must run)");
    }
    Assumptions.assumeTrue(false, why);
  }

  /** The PEM file of the CA that signed the TLS server's certificate. */
  public Path caCertFile() {
    return java.util.Objects.requireNonNull(certs, "not a TLS server").resolve("ca.crt");
  }

  @Override
  public void afterAll(ExtensionContext context) {
    stop();
  }

  @Override
  public boolean supportsParameter(ParameterContext p, ExtensionContext e) {
    return p.getParameter().getType() == RedisServer.class;
  }

  @Override
  public Object resolveParameter(ParameterContext p, ExtensionContext e) {
    return this;
  }

  /** {@code redis://} or, for a TLS server, {@code rediss://} with its password. */
  public String uri() {
    return uri(password);
  }

  /** This server's URI with {@code password} (a wrong one, say) as the default user's. */
  public String uri(@Nullable String password) {
    String auth = password == null ? "" : "default:" + password + "@";
    return (tls ? "rediss://" : "redis://") + auth + "127.0.0.1:" + port;
  }

  public int port() {
    return port;
  }

  /** The server's version line, e.g. for reports. */
  public String version() throws IOException, InterruptedException {
    Process p = new ProcessBuilder(java.util.Objects.requireNonNull(binary), "--version")
        .redirectErrorStream(true).start();
    String out = new String(p.getInputStream().readAllBytes()).trim();
    p.waitFor(10, TimeUnit.SECONDS);
    return out;
  }

  /**
   * Starts the server on this extension's port and waits until it accepts connections. A restart
   * (the port is the one the routers were configured with) waits for the port while another
   * socket holds it, for up to {@value #PORT_WAIT_SECONDS} s, trying again every 100 ms.
   */
  public void start() throws IOException, InterruptedException {
    start(true);
  }

  static final long PORT_WAIT_SECONDS = 30;

  private void start(boolean waitForPort) throws IOException, InterruptedException {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(PORT_WAIT_SECONDS);
    while (true) {
      try {
        startOnce();
        return;
      } catch (PortTakenException e) {
        if (!waitForPort || System.nanoTime() - deadline > 0) {
          throw e;
        }
        Thread.sleep(100);
      }
    }
  }

  private void startOnce() throws IOException, InterruptedException {
    Path log = Files.createTempFile("epp4j-redis", ".log");
    log.toFile().deleteOnExit();
    List<String> args = new java.util.ArrayList<>(List.of(java.util.Objects.requireNonNull(binary),
        "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--protected-mode", "yes"));
    if (tls) {
      Path dir = java.util.Objects.requireNonNull(certs);
      args.addAll(List.of("--port", "0", "--tls-port", Integer.toString(port),
          "--tls-cert-file", dir.resolve("server.crt").toString(),
          "--tls-key-file", dir.resolve("server.key").toString(),
          "--tls-ca-cert-file", dir.resolve("ca.crt").toString(),
          "--tls-auth-clients", "no"));
    } else {
      args.addAll(List.of("--port", Integer.toString(port)));
    }
    if (password != null) {
      args.addAll(List.of("--requirepass", password));
    }
    Process p = new ProcessBuilder(args)
        .redirectErrorStream(true)
        .redirectOutput(log.toFile())
        .start();
    process = p;
    long deadline = System.nanoTime() + START_TIMEOUT_NANOS;
    while (System.nanoTime() - deadline < 0) {
      // the server's own word that it listens, not only a connection to the port: while another
      // process holds the port, a connection succeeds there and this server exits
      String said = Files.readString(log);
      if (!p.isAlive()) {
        p.waitFor();
        process = null;
        if (said.contains("Address already in use")) {
          throw new PortTakenException("port " + port + " is taken: " + said);
        }
        throw new IllegalStateException("redis-server exited at start: " + said);
      }
      if (said.contains("Ready to accept connections")) {
        try (Socket s = new Socket()) {
          s.connect(new InetSocketAddress("127.0.0.1", port), 200);
          return;
        } catch (IOException notYet) {
          // said so just before it listens: try again
        }
      }
      Thread.sleep(20);
    }
    stop();
    throw new IllegalStateException("redis-server did not accept connections within 10 s");
  }

  /**
   * Holds every client's commands for {@code millis} ({@code CLIENT PAUSE}, Redis 6.2+): the
   * server is up and connected but answers nothing, as a server stuck in a slow command is.
   * Plain servers only. {@link Pause#close} returns once the pause is over.
   */
  public Pause pause(long millis) throws IOException {
    if (tls) {
      throw new IllegalStateException("pause is for plain servers");
    }
    Socket s = new Socket();
    s.connect(new InetSocketAddress("127.0.0.1", port), 5_000);
    // a bound on every wait below: the pause, and a loaded machine several times over
    s.setSoTimeout((int) Math.min(Integer.MAX_VALUE, millis + 60_000));
    Pause pause = new Pause(s);
    pause.command("CLIENT PAUSE " + millis);
    return pause;
  }

  /** A {@code CLIENT PAUSE} under way, on a connection of its own. */
  public static final class Pause implements AutoCloseable {
    private final Socket socket;

    private Pause(Socket socket) {
      this.socket = socket;
    }

    private void command(String inline) throws IOException {
      socket.getOutputStream().write((inline + "\r\n").getBytes(
          java.nio.charset.StandardCharsets.US_ASCII));
      socket.getOutputStream().flush();
      // a simple reply (+OK, +PONG) or an error: one line
      StringBuilder line = new StringBuilder();
      int c;
      while ((c = socket.getInputStream().read()) != '\n') {
        if (c < 0) {
          throw new IOException("the server closed the connection after " + inline);
        }
        line.append((char) c);
      }
      if (line.charAt(0) != '+') {
        throw new IOException(inline + ": " + line.toString().trim());
      }
    }

    /** Waits until the server answers again: the pause holds this connection's PING too. */
    @Override
    public void close() throws IOException {
      try {
        command("PING");
      } finally {
        socket.close();
      }
    }
  }

  /**
   * Stops the server's process ({@code SIGSTOP}) without closing its socket: the kernel still
   * accepts connections into the listen backlog, but nothing answers, as with a host or process
   * that hangs (swapping, a stuck disk, a paused VM). {@link #thaw} resumes it.
   */
  public void freeze() throws IOException, InterruptedException {
    signal("-STOP");
  }

  /** Resumes a server {@link #freeze} stopped. */
  public void thaw() throws IOException, InterruptedException {
    signal("-CONT");
  }

  private void signal(String sig) throws IOException, InterruptedException {
    Process p = java.util.Objects.requireNonNull(process, "not running");
    Process kill = new ProcessBuilder("kill", sig, Long.toString(p.pid())).inheritIO().start();
    if (!kill.waitFor(10, TimeUnit.SECONDS) || kill.exitValue() != 0) {
      throw new IllegalStateException("kill " + sig + " failed");
    }
  }

  /** Kills the server (no shutdown save: the data is gone, as after a crash). */
  public void stop() {
    Process p = process;
    process = null;
    if (p != null) {
      p.destroyForcibly();
      try {
        p.waitFor(10, TimeUnit.SECONDS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
  }

  private static @Nullable String findBinary() {
    String configured = System.getProperty("epp4j.redis.server");
    if (configured != null && !configured.isBlank()) {
      // asked for by name: a wrong path is a mistake to report, not a reason to skip
      if (!new File(configured).canExecute()) {
        throw new IllegalStateException("epp4j.redis.server=" + configured
            + " is not an executable file");
      }
      return configured;
    }
    String path = System.getenv("PATH");
    List<String> dirs = new java.util.ArrayList<>(List.of("/usr/bin", "/usr/local/bin",
        "/usr/sbin"));
    if (path != null) {
      dirs.addAll(0, List.of(path.split(File.pathSeparator)));
    }
    for (String d : dirs) {
      File f = new File(d, "redis-server");
      if (f.canExecute()) {
        return f.getPath();
      }
    }
    return null;
  }
}
