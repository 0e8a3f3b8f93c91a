package io.epp4j.envoy;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;

/** Tests of the command line: {@link Main#start} with what it prints captured. */
abstract class MainWithCapturedOutput {
  final ByteArrayOutputStream out = new ByteArrayOutputStream();
  final ByteArrayOutputStream err = new ByteArrayOutputStream();

  /** The started server, which the caller closes; a refused command line fails the test. */
  Main.Running start(String... args) {
    try {
      return Main.start(args, new PrintStream(out, true, StandardCharsets.UTF_8),
          new PrintStream(err, true, StandardCharsets.UTF_8));
    } catch (Main.Exit e) {
      throw new AssertionError("exit " + e.code + ": " + err(), e);
    }
  }

  /** The exit code of a command line that does not start; stderr then holds only its messages. */
  int exitOf(String... args) {
    err.reset();
    try (Main.Running r = Main.start(args, new PrintStream(out, true, StandardCharsets.UTF_8),
        new PrintStream(err, true, StandardCharsets.UTF_8))) {
      throw new AssertionError("started with " + String.join(" ", args));
    } catch (Main.Exit e) {
      return e.code;
    }
  }

  String err() {
    return err.toString(StandardCharsets.UTF_8);
  }
}
