package io.epp4j.redis;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.jspecify.annotations.Nullable;

/**
 * A throwaway CA and a server certificate for 127.0.0.1 signed by it, made with the
 * {@code openssl} command (P-256 keys: quick to generate), valid for two days.
 */
final class TestCertificates {
  private TestCertificates() {}

  /**
   * Writes {@code ca.crt}, {@code server.crt} and {@code server.key} into {@code dir}; returns
   * {@code dir}, or null when no {@code openssl} command is installed.
   */
  static @Nullable Path create(Path dir) throws IOException, InterruptedException {
    // files registered for deletion at exit are deleted in the reverse order: the directory,
    // registered first, goes once it is empty
    dir.toFile().deleteOnExit();
    if (!openssl(dir, "version")) {
      return null;
    }
    Files.writeString(dir.resolve("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
            + "extendedKeyUsage=serverAuth\n");
    run(dir, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=epp4j test CA");
    run(dir, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1");
    run(dir, "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.crt", "-days", "2", "-extfile", "server.ext");
    for (String f : List.of("ca.key", "ca.crt", "server.key", "server.csr", "server.crt",
        "server.ext", "ca.srl")) {
      dir.resolve(f).toFile().deleteOnExit();
    }
    return dir;
  }

  private static void run(Path dir, String... args) throws IOException, InterruptedException {
    if (!openssl(dir, args)) {
      throw new IllegalStateException("openssl " + String.join(" ", args) + " failed");
    }
  }

  private static boolean openssl(Path dir, String... args) throws InterruptedException {
    List<String> cmd = new ArrayList<>(List.of("openssl"));
    cmd.addAll(List.of(args));
    Process p;
    try {
      p = new ProcessBuilder(cmd).directory(dir.toFile()).redirectErrorStream(true)
          .redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
    } catch (IOException notInstalled) {
      return false;
    }
    if (!p.waitFor(30, TimeUnit.SECONDS)) {
      p.destroyForcibly();
      return false;
    }
    return p.exitValue() == 0;
  }
}
