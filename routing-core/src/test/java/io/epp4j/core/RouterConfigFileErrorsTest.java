package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.epp4j.api.Result;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A configuration file the router cannot read is reported as the loader reports it: the file,
 * what is wrong and, for bytes that are not UTF-8, where. The router read files on its own, so a
 * file saved as Latin-1 failed with the decoder's "Input length = 1", and a missing one repeated
 * its path where the reason belongs.
 */
class RouterConfigFileErrorsTest {
  static final String YAML = """
      plugins:
      - type: label-scorer
        parameters: {label: cache}
      schedulingProfiles:
      - name: default
        plugins:
        - pluginRef: label-scorer
      # caf\u00e9
      """;

  @Test
  void aFileThatIsNotUtf8FailsTheBuildNamingWhere(@TempDir Path dir) throws Exception {
    Path latin1 = dir.resolve("latin1.yaml");
    Files.write(latin1, YAML.getBytes(StandardCharsets.ISO_8859_1));

    assertThatThrownBy(() -> Router.builder().registry(TestPlugins.registry())
        .configFile(latin1).build())
        .isInstanceOfSatisfying(ConfigException.class, e -> assertThat(e.errors())
            .containsExactly(latin1 + ": not valid UTF-8: truncated sequence at line 8,"
                + " column 6 (byte offset 139)"));
  }

  @Test
  void aReloadFromAFileThatCannotBeReadSaysWhy(@TempDir Path dir) throws Exception {
    Path good = dir.resolve("good.yaml");
    Files.writeString(good, YAML);
    Path latin1 = dir.resolve("latin1.yaml");
    Files.write(latin1, YAML.getBytes(StandardCharsets.ISO_8859_1));
    Path missing = dir.resolve("missing.yaml");
    try (Router router = Router.builder().registry(TestPlugins.registry())
        .configFile(good).build()) {
      RouterConfig running = router.config();

      Result<RouterConfig> notUtf8 = router.reconfigure(latin1);
      Result<RouterConfig> absent = router.reconfigure(missing);
      Result<RouterConfig> directory = router.reconfigure(dir);

      assertThat(notUtf8.errors()).containsExactly(latin1 + ": not valid UTF-8: truncated"
          + " sequence at line 8, column 6 (byte offset 139)");
      assertThat(absent.errors()).containsExactly(missing + ": cannot read: no such file");
      assertThat(directory.errors()).containsExactly(dir + ": cannot read: it is a directory");
      assertThat(router.config()).isSameAs(running);
    }
  }
}
