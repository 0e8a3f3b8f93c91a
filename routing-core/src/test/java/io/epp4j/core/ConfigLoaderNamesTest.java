package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Result;
import org.junit.jupiter.api.Test;

/** Plugin names, profile names and references must be strings, as upstream reads them. */
class ConfigLoaderNamesTest {
  final ConfigLoader loader = new ConfigLoader(TestPlugins.registry());

  /**
   * A name YAML reads as a number or a list used to be taken as its text, while a reference
   * written the same way was refused as missing: the file could not refer to its own plugin,
   * and the error said the field it had was required.
   */
  @Test
  void aPluginNameThatIsNotAStringIsRefusedNamingTheField() {
    Result<RouterConfig> r = loader.load("""
        plugins:
        - name: [a]
          type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: "[a]"
        """, "c.yaml");
    assertThat(r.isOk()).isFalse();
    assertThat(r.errors()).anySatisfy(e -> assertThat(e)
        .contains("plugins[0]").contains("field 'name' must be a string"));
  }

  @Test
  void aReferenceThatIsNotAStringIsReportedAsSuchNotAsMissing() {
    Result<RouterConfig> r = loader.load("""
        plugins:
        - name: "5"
          type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: 5
        """, "c.yaml");
    assertThat(r.errors()).singleElement().satisfies(e -> assertThat(e)
        .contains("plugins[0]").contains("field 'pluginRef' must be a string")
        .doesNotContain("required"));
  }

  @Test
  void aProfileNameThatIsNotAStringIsReportedAsSuchNotAsMissing() {
    Result<RouterConfig> r = loader.load("""
        plugins:
        - type: max-score-picker
        schedulingProfiles:
        - name: 7
          plugins:
          - pluginRef: max-score-picker
        """, "c.yaml");
    assertThat(r.errors()).singleElement().satisfies(e -> assertThat(e)
        .contains("schedulingProfiles[0]").contains("field 'name' must be a string")
        .doesNotContain("required"));
  }

  @Test
  void aPluginTypeThatIsNotAStringIsReportedAsSuchNotAsMissing() {
    Result<RouterConfig> r = loader.load("""
        plugins:
        - type: [max-score-picker]
        """, "c.yaml");
    assertThat(r.errors()).anySatisfy(e -> assertThat(e)
        .contains("plugins[0]").contains("field 'type' must be a string")
        .doesNotContain("required"));
  }
}
