package io.epp4j.sim;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;

/** {@link Main#run} with what it prints on standard output and error kept for the test. */
final class CapturedMain {
  /** A policy file: one profile, queue-scorer and max-score-picker. */
  static final String QUEUE_ONLY_CONFIG = """
      plugins:
      - type: queue-scorer
      - type: max-score-picker
      schedulingProfiles:
      - name: default
        plugins:
        - pluginRef: queue-scorer
        - pluginRef: max-score-picker
      """;

  private final ByteArrayOutputStream out = new ByteArrayOutputStream();
  private final ByteArrayOutputStream err = new ByteArrayOutputStream();

  int run(String... args) {
    return Main.run(args, new PrintStream(out, true, StandardCharsets.UTF_8),
        new PrintStream(err, true, StandardCharsets.UTF_8));
  }

  String stdout() {
    return out.toString(StandardCharsets.UTF_8);
  }

  String stderr() {
    return err.toString(StandardCharsets.UTF_8);
  }

  /** Forgets what was printed so far. */
  void reset() {
    out.reset();
    err.reset();
  }
}
