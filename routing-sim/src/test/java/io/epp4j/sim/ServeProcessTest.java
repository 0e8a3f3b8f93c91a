package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * {@code serve} as its own JVM, stopped the way a process manager stops it: SIGTERM
 * ({@link ProcessHandle#destroy()} sends it on Linux and macOS).
 */
@Timeout(180)
class ServeProcessTest {
  /** A JVM's start is slow on a busy build machine; still, it must not hang forever. */
  private static final Duration READY_WITHIN = Duration.ofSeconds(90);
  private static final Duration STOPPED_WITHIN = Duration.ofSeconds(30);
  private static final String END = "\u0000end of stream";

  private final List<Process> started = new ArrayList<>();

  @AfterEach
  void killLeftovers() throws InterruptedException {
    for (Process p : started) {
      if (p.isAlive()) {
        p.destroyForcibly();
        p.waitFor(10, TimeUnit.SECONDS);
      }
    }
  }

  /** A running {@code serve} process and the lines it has printed. */
  private record Served(Process process, BlockingQueue<String> stdout, StringBuffer stderr,
      Thread stderrReader, int httpPort, int kvPort) {}

  private Served serve(int httpPort, int kvPort) throws IOException {
    String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
    // surefire puts the test class path here when it starts the tests through a manifest jar
    String classPath = System.getProperty("surefire.test.class.path",
        System.getProperty("java.class.path"));
    Process p = new ProcessBuilder(java, "-Xmx256m", "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1", "-cp", classPath, Main.class.getName(), "serve",
        "--replicas", "2", "--port", String.valueOf(httpPort),
        "--kv-events-port", String.valueOf(kvPort), "--speed", "20").start();
    started.add(p);
    BlockingQueue<String> stdout = new LinkedBlockingQueue<>();
    StringBuffer stderr = new StringBuffer();
    drain(p.getInputStream(), stdout::add, "stdout").start();
    Thread stderrReader = drain(p.getErrorStream(), line -> {
      if (!line.equals(END)) {
        stderr.append(line).append('\n');
      }
    }, "stderr");
    stderrReader.start();
    return new Served(p, stdout, stderr, stderrReader, httpPort, kvPort);
  }

  private static Thread drain(InputStream in, java.util.function.Consumer<String> sink,
      String name) {
    Thread t = new Thread(() -> {
      try (BufferedReader r = new BufferedReader(
          new InputStreamReader(in, StandardCharsets.UTF_8))) {
        String line;
        while ((line = r.readLine()) != null) {
          sink.accept(line);
        }
      } catch (IOException e) {
        // the process is gone
      }
      sink.accept(END);
    }, "serve-" + name);
    t.setDaemon(true);
    return t;
  }

  /** Lines up to and including the one starting with {@code prefix}; fails at the deadline. */
  private static List<String> readUntil(Served s, String prefix, Duration within)
      throws InterruptedException {
    List<String> lines = new ArrayList<>();
    long deadline = System.nanoTime() + within.toNanos();
    while (true) {
      String line = s.stdout().poll(Math.max(1, deadline - System.nanoTime()),
          TimeUnit.NANOSECONDS);
      if (line == null || line.equals(END)) {
        throw new AssertionError("no line starting with '" + prefix + "'; printed " + lines
            + (line == null ? " before the deadline" : " before the output ended")
            + "; stderr: " + s.stderr());
      }
      lines.add(line);
      if (line.startsWith(prefix)) {
        return lines;
      }
    }
  }

  private static boolean free(int port) {
    try (ServerSocket socket = new ServerSocket()) {
      // as a restarted server binds: a connection of the old one in TIME_WAIT does not count
      socket.setReuseAddress(true);
      socket.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), port), 1);
      return true;
    } catch (IOException e) {
      return false;
    }
  }

  /** Base ports with room for two replicas, free now, below the kernel's ephemeral range. */
  private static int[] freeBases() {
    for (int attempt = 0; attempt < 50; attempt++) {
      int http = ThreadLocalRandom.current().nextInt(20_000, 24_998);
      int kv = ThreadLocalRandom.current().nextInt(25_000, 32_764);
      if (free(http) && free(http + 1) && free(kv) && free(kv + 1) && free(kv + 2)
          && free(kv + 3)) {
        return new int[] {http, kv};
      }
    }
    throw new AssertionError("no free ports found");
  }

  @Test
  void sigtermStopsTheReplicasCleanlyAndReleasesEveryPort() throws Exception {
    Served running = null;
    List<String> ready = List.of();
    for (int attempt = 0; attempt < 3 && running == null; attempt++) {
      int[] bases = freeBases();
      Served candidate = serve(bases[0], bases[1]);
      try {
        ready = readUntil(candidate, "replica 1: ", READY_WITHIN);
        running = candidate;
      } catch (AssertionError e) {
        // another process may have taken a port in between; anything else is a failure
        if (!candidate.stderr().toString().contains("already in use")
            && !candidate.stderr().toString().contains("cannot be bound")) {
          throw e;
        }
        candidate.process().waitFor(STOPPED_WITHIN.toSeconds(), TimeUnit.SECONDS);
      }
    }
    assertThat(running).as("serve started").isNotNull();
    Served s = running;
    assertThat(ready).anyMatch(l -> l.startsWith("serving 2 emulated replicas"));
    assertThat(ready).anyMatch(l -> l.startsWith("replica 0: http://127.0.0.1:" + s.httpPort()));

    HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();
    for (int i = 0; i < 2; i++) {
      HttpResponse<String> r = http.send(HttpRequest.newBuilder(
          URI.create("http://127.0.0.1:" + (s.httpPort() + i) + "/v1/completions"))
          .timeout(Duration.ofSeconds(20)).header("Content-Type", "application/json")
          .POST(HttpRequest.BodyPublishers.ofString("{\"prompt\":[1,2,3],\"max_tokens\":2}"))
          .build(), HttpResponse.BodyHandlers.ofString());
      assertThat(r.statusCode()).isEqualTo(200);
    }

    // SIGTERM. Process.destroy() would send it too, but it also closes our ends of the pipes,
    // and the stop line would be lost; the handle only signals.
    assertThat(s.process().toHandle().destroy()).isTrue();
    assertThat(s.process().waitFor(STOPPED_WITHIN.toSeconds(), TimeUnit.SECONDS))
        .as("exited within %s; stderr: %s", STOPPED_WITHIN, s.stderr()).isTrue();
    // the JVM's status after SIGTERM, 128 + 15, as Serve's usage says
    s.stderrReader().join(STOPPED_WITHIN.toMillis());
    assertThat(s.process().exitValue()).as("stderr: %s", s.stderr()).isEqualTo(143);
    assertThat(readUntil(s, "stopped ", Duration.ofSeconds(10)))
        .last().isEqualTo("stopped 2 emulated replicas; every port is released");
    assertThat(s.stderr().toString()).isEmpty();
    for (int port : new int[] {s.httpPort(), s.httpPort() + 1, s.kvPort(), s.kvPort() + 1,
        s.kvPort() + 2, s.kvPort() + 3}) {
      assertThat(free(port)).as("port %d is free", port).isTrue();
    }
  }
}
