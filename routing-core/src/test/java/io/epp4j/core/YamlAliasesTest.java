package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Result;
import org.junit.jupiter.api.Test;

/**
 * Upstream reads its file with sigs.k8s.io/yaml (go-yaml), which resolves anchors, aliases and
 * merge keys: a file sharing one plugin list between profiles, or one weight, loads there.
 */
class YamlAliasesTest {
  final ConfigLoader loader = new ConfigLoader(TestPlugins.registry());

  @Test
  void aliasesNameTheAnchoredListOrValue() {
    Result<RouterConfig> r = loader.load("""
        plugins:
        - type: label-scorer
          parameters: &params {label: cache}
        - name: other
          type: label-scorer
          parameters: *params
        - name: picker
          type: max-score-picker
        - type: label-filter
          parameters: {key: gpu, value: h100}
        schedulingProfiles:
        - name: default
          plugins: &common
          - pluginRef: label-scorer
            weight: &w 3
          - pluginRef: other
            weight: *w
          - pluginRef: picker
        """, "a.yaml");
    assertThat(r.errors()).isEmpty();
    assertThat(r.value().profiles().get("default").scorers())
        .extracting(ws -> ws.name() + "=" + ws.weight())
        .containsExactly("label-scorer=3.0", "other=3.0");
  }

  @Test
  void aProfileListSharedByAlias() {
    Result<RouterConfig> r = loader.load("""
        plugins:
        - type: label-scorer
          parameters: {label: cache}
        schedulingProfiles:
        - name: default
          plugins: &common
          - pluginRef: label-scorer
            weight: 2
        - name: second
          plugins: *common
        """, "a.yaml");
    // two profiles need a handler: the only error, the alias is read as the list
    assertThat(r.errors()).singleElement().asString().contains("2 profiles need a profile handler");
  }

  @Test
  void mergeKeysAddTheMergedFieldsUnderTheExplicitOnes() {
    Result<RouterConfig> r = loader.load("""
        plugins:
        - &scorer
          name: a
          type: label-scorer
          parameters: {label: cache}
        - <<: *scorer
          name: b
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: a
          - pluginRef: b
            weight: 2
        """, "m.yaml");
    assertThat(r.errors()).isEmpty();
    assertThat(r.value().profiles().get("default").scorers())
        .extracting(ws -> ws.name() + "=" + ws.weight()).containsExactly("a=1.0", "b=2.0");
  }

  @Test
  void aliasesThatWouldExpandTheDocumentExponentiallyAreRefused() {
    StringBuilder y = new StringBuilder("plugins:\n- type: label-scorer\n  parameters:\n"
        + "    label: x\n    a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for (int i = 1; i < 30; i++) {
      y.append("    a").append(i).append(": &a").append(i).append(" [*a").append(i - 1)
          .append(", *a").append(i - 1).append(", *a").append(i - 1).append("]\n");
    }
    Result<RouterConfig> r = loader.load(y.toString(), "bomb.yaml");
    assertThat(r.errors()).singleElement().asString().contains("bomb.yaml: not valid YAML")
        .contains("alias");
  }
}
