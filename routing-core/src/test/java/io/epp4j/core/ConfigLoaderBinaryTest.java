package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Result;
import org.junit.jupiter.api.Test;

/**
 * YAML's {@code !!binary} scalars: read as the text they decode to, as upstream's YAML reader
 * reads them, so an error about a field that holds one shows that text, not a Java array.
 */
class ConfigLoaderBinaryTest {
  final ConfigLoader loader = new ConfigLoader(TestPlugins.registry());

  @Test
  void aBinaryWeightIsRefusedShowingTheTextItDecodesTo() {
    // "aGVsbG8=" is "hello"
    Result<RouterConfig> r = loader.load("""
        plugins:
        - {type: label-scorer, parameters: {label: x}}
        - type: max-score-picker
          parameters: {maxNumOfEndpoints: !!binary aGVsbG8=}
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: label-scorer
            weight: !!binary aGVsbG8=
          - pluginRef: max-score-picker
        """, "b.yaml");
    assertThat(r.errors()).containsExactlyInAnyOrder(
        "b.yaml: plugins[1] (name 'max-score-picker', type 'max-score-picker'): parameter"
            + " 'maxNumOfEndpoints' must be an integer, got 'hello'",
        "b.yaml: schedulingProfiles[0] (profile 'default'): plugins[0] (pluginRef"
            + " 'label-scorer'): field 'weight' must be a finite number (negative for a penalty),"
            + " got 'hello'");
  }

  @Test
  void aBinaryNameIsTheTextItDecodesTo() {
    // "c2NvcmVy" is "scorer"
    Result<RouterConfig> r = loader.load("""
        plugins:
        - {name: !!binary c2NvcmVy, type: label-scorer, parameters: {label: x}}
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: scorer
          - pluginRef: max-score-picker
        """, "b.yaml");
    assertThat(r.errors()).isEmpty();
    assertThat(r.value().plugins()).containsKey("scorer");
  }
}
