package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Plugin;
import io.epp4j.api.Result;
import org.junit.jupiter.api.Test;

/** A reload keeps the running instance of every plugin declared as before, however it is named. */
class ReloadReuseNamesTest {
  static final String YAML = """
      plugins:
      - name: ""
        type: label-scorer
        parameters: {label: cache}
      - type: max-score-picker
      schedulingProfiles:
      - name: default
        plugins:
        - pluginRef: label-scorer
        - pluginRef: max-score-picker
      """;

  /**
   * A plugin with an empty name is named after its type, as upstream names it; the reload looked
   * its declaration up under the empty name, found none and created the plugin anew, losing what
   * it had learned.
   */
  @Test
  void aPluginWithAnEmptyNameIsKeptByAnIdenticalReload() {
    try (Router router = Router.builder().registry(TestPlugins.registry())
        .configYaml(YAML, "a.yaml").build()) {
      Plugin before = router.config().plugins().get("label-scorer");
      assertThat(before).isNotNull();
      Result<RouterConfig> r = router.reconfigure(YAML, "b.yaml");
      assertThat(r.errors()).isEmpty();
      assertThat(r.value().plugins().get("label-scorer")).isSameAs(before);
      assertThat(r.value().plugins().get("max-score-picker"))
          .isSameAs(router.config().plugins().get("max-score-picker"));
    }
  }
}
