package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Result;
import org.junit.jupiter.api.Test;

/**
 * A file holds one configuration. The loader reads its first YAML document, as upstream does; a
 * second one with content (a new version pasted below a {@code ---}, a second ConfigMap) was
 * dropped without a word, so a user saw the first one run and no hint why their changes did not.
 */
class ConfigLoaderDocumentsTest {
  final ConfigLoader loader = new ConfigLoader(TestPlugins.registry());

  static final String FIRST = """
      plugins:
      - type: max-score-picker
      schedulingProfiles:
      - name: default
        plugins:
        - pluginRef: max-score-picker
      """;

  @Test
  void aSecondDocumentWithContentIsAWarningNamingIt() {
    Result<RouterConfig> r = loader.load(FIRST + """
        ---
        plugins:
        - type: label-scorer
          parameters: {label: cache}
        """, "two.yaml");

    assertThat(r.errors()).isEmpty();
    assertThat(r.value().plugins()).containsOnlyKeys("max-score-picker");
    assertThat(r.value().warnings()).containsExactly("two.yaml: the file holds more than one"
        + " YAML document; only the first is read, and the one at line 8 (and any after it) is"
        + " ignored");
  }

  @Test
  void emptyDocumentsAfterTheConfigurationAreNoWarning() {
    for (String tail : new String[] {"---\n", "---\n# the end\n", "...\n", "---\n---\n"}) {
      Result<RouterConfig> r = loader.load(FIRST + tail, "one.yaml");

      assertThat(r.errors()).as(tail).isEmpty();
      assertThat(r.value().warnings()).as(tail).isEmpty();
    }
  }

  @Test
  void aLaterDocumentThatIsNotValidYamlIsNotReadButNoted() {
    Result<RouterConfig> r = loader.load(FIRST + "---\nplugins: [\n", "broken.yaml");

    assertThat(r.errors()).isEmpty();
    assertThat(r.value().warnings()).singleElement().asString()
        .startsWith("broken.yaml: the file holds more than one YAML document");
  }
}
