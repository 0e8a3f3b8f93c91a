package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Plugin;
import io.epp4j.api.Result;
import org.junit.jupiter.api.Test;

/**
 * A reload compares each plugin's parameters with those it was created from, to keep the running
 * instance when they are the same. The comparison must read the file as the loader does, with
 * anchors, aliases and merge keys resolved: a plugin whose parameters come from an alias would
 * otherwise look unchanged whatever the anchored values became, and keep running with the old
 * ones.
 */
class ReloadAliasedParametersTest {
  static String yaml(String label) {
    return """
        plugins:
        - name: first
          type: label-scorer
          parameters: &shared {label: &name %s}
        - name: second
          type: label-scorer
          parameters: *shared
        - name: third
          type: label-scorer
          parameters:
            <<: *shared
        - name: fourth
          type: label-scorer
          parameters: {label: *name}
        - name: picker
          type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: first
          - pluginRef: second
          - pluginRef: third
          - pluginRef: fourth
          - pluginRef: picker
        """.formatted(label);
  }

  static String label(RouterConfig c, String plugin) {
    Plugin p = c.plugins().get(plugin);
    assertThat(p).isInstanceOf(TestPlugins.LabelScorer.class);
    return ((TestPlugins.LabelScorer) p).label;
  }

  @Test
  void aPluginWhoseParametersComeFromAnAliasTakesTheChangedAnchoredValues() {
    try (Router router = Router.builder().registry(TestPlugins.registry())
        .configYaml(yaml("cache"), "a.yaml").build()) {
      assertThat(label(router.config(), "second")).isEqualTo("cache");
      assertThat(label(router.config(), "third")).isEqualTo("cache");
      assertThat(label(router.config(), "fourth")).isEqualTo("cache");

      Result<RouterConfig> r = router.reconfigure(yaml("gpu"), "b.yaml");

      assertThat(r.errors()).isEmpty();
      assertThat(label(r.value(), "first")).isEqualTo("gpu");
      assertThat(label(r.value(), "second")).isEqualTo("gpu");
      assertThat(label(r.value(), "third")).isEqualTo("gpu");
      assertThat(label(r.value(), "fourth")).isEqualTo("gpu");
    }
  }

  @Test
  void anIdenticalReloadStillKeepsThePluginsWhoseParametersComeFromAnAlias() {
    try (Router router = Router.builder().registry(TestPlugins.registry())
        .configYaml(yaml("cache"), "a.yaml").build()) {
      RouterConfig before = router.config();

      Result<RouterConfig> r = router.reconfigure(yaml("cache"), "b.yaml");

      assertThat(r.errors()).isEmpty();
      for (String name : new String[] {"first", "second", "third", "fourth"}) {
        assertThat(r.value().plugins().get(name)).as(name)
            .isSameAs(before.plugins().get(name));
      }
    }
  }
}
