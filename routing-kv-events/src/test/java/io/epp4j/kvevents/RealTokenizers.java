package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.fail;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.nio.file.Files;
import java.nio.file.Path;

/**
 * Where the real tokenizer files are: {@code scripts/fetch-tokenizers.sh} puts them under
 * {@code $EPP4J_TOKENIZERS} (default {@code ~/.cache/epp4j-tokenizers}). A developer without
 * them skips the tests that need them; in CI (where {@code .ci/run} fetches them) their absence
 * fails the test instead, so the exactness tests cannot silently stop running.
 */
final class RealTokenizers {
  static final String[] FAMILIES = {"llama3_1", "qwen3", "gemma3", "deepseek_v3"};

  private RealTokenizers() {}

  static Path dir(String family) {
    String root = System.getenv("EPP4J_TOKENIZERS");
    Path base = root != null && !root.isEmpty() ? Path.of(root)
        : Path.of(System.getProperty("user.home"), ".cache", "epp4j-tokenizers");
    Path dir = base.resolve(family);
    boolean present = Files.isRegularFile(dir.resolve("tokenizer.json"))
        && Files.isRegularFile(dir.resolve("tokenizer_config.json"));
    if (!present) {
      String ci = System.getenv("CI");
      if (ci != null && !ci.isEmpty() && !ci.equals("false")) {
        fail("CI is set but the tokenizer files of " + family + " are not in " + dir
            + "; run routing-kv-events/scripts/fetch-tokenizers.sh first");
      }
      assumeTrue(false, "no tokenizer files in " + dir
          + " (routing-kv-events/scripts/fetch-tokenizers.sh fetches them)");
    }
    return dir;
  }
}
