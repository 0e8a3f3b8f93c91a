package com.example.epp4j.gateway;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * The gateway's command line ({@link Main}) in a JVM of its own, for what a test cannot do in
 * its own JVM: JDK server settings read once per JVM, a stop by signal.
 */
final class GatewayProcess implements AutoCloseable {
  final Process process;
  final int port;

  private GatewayProcess(Process process, int port) {
    this.process = process;
    this.port = port;
  }

  /** Starts {@code Main} with {@code jvmOptions} and {@code args}; returns once it listens. */
  static GatewayProcess start(List<String> jvmOptions, String... args) throws IOException {
    List<String> cmd = new ArrayList<>();
    cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
    cmd.add("-Xmx128m");
    cmd.addAll(jvmOptions);
    cmd.addAll(List.of("-cp", System.getProperty("java.class.path"), Main.class.getName()));
    cmd.addAll(List.of(args));
    Process p = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.DISCARD).start();
    BufferedReader out = new BufferedReader(
        new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8));
    String line = out.readLine();
    if (line == null || !line.contains("listening on :")) {
      p.destroyForcibly();
      throw new AssertionError("the gateway did not start: " + line);
    }
    assertThat(line).contains("listening on :");
    return new GatewayProcess(p, Integer.parseInt(line.replaceAll(".*listening on :(\\d+).*", "$1")));
  }

  @Override
  public void close() throws InterruptedException {
    process.destroy();
    if (!process.waitFor(30, TimeUnit.SECONDS)) {
      process.destroyForcibly();
    }
  }
}
