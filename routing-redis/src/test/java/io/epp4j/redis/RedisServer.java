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

  private @Nullable String binary;
  private int port;
  private @Nullable Process process;

  @Override
  public void beforeAll(ExtensionContext context) throws Exception {
    binary = findBinary();
    Assumptions.assumeTrue(binary != null, "redis-server is not installed (apt-get install -y"
        + " redis-server, or set -Depp4j.redis.server=/path/to/valkey-server); .ci/run installs it");
    try (ServerSocket s = new ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
      port = s.getLocalPort();
    }
    start();
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

  public String uri() {
    return "redis://127.0.0.1:" + port;
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

  /** Starts the server on this extension's port and waits until it accepts connections. */
  public void start() throws IOException, InterruptedException {
    Path log = Files.createTempFile("epp4j-redis", ".log");
    log.toFile().deleteOnExit();
    Process p = new ProcessBuilder(List.of(java.util.Objects.requireNonNull(binary),
        "--port", Integer.toString(port), "--bind", "127.0.0.1", "--save", "",
        "--appendonly", "no", "--protected-mode", "yes"))
        .redirectErrorStream(true)
        .redirectOutput(log.toFile())
        .start();
    process = p;
    long deadline = System.nanoTime() + START_TIMEOUT_NANOS;
    while (System.nanoTime() - deadline < 0) {
      if (!p.isAlive()) {
        throw new IllegalStateException("redis-server exited at start: " + Files.readString(log));
      }
      try (Socket s = new Socket()) {
        s.connect(new InetSocketAddress("127.0.0.1", port), 200);
        return;
      } catch (IOException notYet) {
        Thread.sleep(20);
      }
    }
    throw new IllegalStateException("redis-server did not accept connections within 10 s");
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
