package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Result;
import org.junit.jupiter.api.Test;

/** What a profile's plugin references load to. */
class ConfigLoaderProfileRefsTest {
  final ConfigLoader loader = new ConfigLoader(TestPlugins.registry());

  /**
   * A scorer named twice in one profile counts twice (its weights add up), which a file seldom
   * means: the load says so, naming the reference, instead of doubling the scorer's say silently.
   */
  @Test
  void aScorerReferencedTwiceInAProfileIsNoticed() {
    Result<RouterConfig> r = loader.load("""
        plugins:
        - type: label-scorer
          parameters: {label: cache}
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: label-scorer
          - pluginRef: max-score-picker
          - pluginRef: label-scorer
            weight: 2
        """, "c.yaml");
    assertThat(r.errors()).isEmpty();
    assertThat(r.value().profiles().get("default").scorers()).hasSize(2);
    assertThat(r.value().warnings()).anySatisfy(w -> assertThat(w)
        .contains("schedulingProfiles[0] (profile 'default'): plugins[2]")
        .contains("'label-scorer'").contains("twice"));
  }

  @Test
  void distinctScorersAreNotNoticed() {
    Result<RouterConfig> r = loader.load("""
        plugins:
        - type: label-scorer
          parameters: {label: cache}
        - name: other
          type: label-scorer
          parameters: {label: gpu}
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: label-scorer
          - pluginRef: other
          - pluginRef: max-score-picker
        """, "c.yaml");
    assertThat(r.errors()).isEmpty();
    assertThat(r.value().warnings()).isEmpty();
  }
}
