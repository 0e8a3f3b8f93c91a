package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Result;
import org.junit.jupiter.api.Test;

/**
 * YAML's {@code .nan}, {@code .inf} and {@code -.inf} in a number field. The YAML parser types
 * them as floats and then cannot read them as one, so the whole file failed as "not valid YAML,
 * Malformed numeric value" with no field named, in a block mapping and in a flow mapping alike.
 * Now the field that holds one refuses it by name, in both styles.
 */
class ConfigLoaderNonFiniteTest {
  final ConfigLoader loader = new ConfigLoader(PluginRegistry.fromServiceLoader());

  static final String[] SPELLINGS = {".nan", ".NaN", ".NAN", ".inf", ".Inf", ".INF", "-.inf",
      "+.inf", "-.Inf", "-.INF"};

  private static String block(String v) {
    return """
        plugins:
        - type: utilization-detector
          parameters:
            headroom: %s
        - type: max-score-picker
          parameters:
            maxNumOfEndpoints: %s
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: utilization-detector
          - pluginRef: max-score-picker
            weight: %s
        """.formatted(v, v, v);
  }

  private static String flow(String v) {
    return """
        plugins:
        - {type: utilization-detector, parameters: {headroom: %s}}
        - type: max-score-picker
          parameters: {maxNumOfEndpoints: %s}
        schedulingProfiles:
        - name: default
          plugins: [{pluginRef: utilization-detector}, {pluginRef: max-score-picker, weight: %s}]
        """.formatted(v, v, v);
  }

  @Test
  void aNonFiniteNumberIsRefusedNamingItsFieldInBlockAndFlowMappings() {
    for (String v : SPELLINGS) {
      for (String yaml : new String[] {block(v), flow(v)}) {
        Result<RouterConfig> r = loader.load(yaml, "f.yaml");

        assertThat(r.isOk()).as(yaml).isFalse();
        assertThat(r.errors()).as(yaml).noneMatch(e -> e.contains("not valid YAML"));
        assertThat(r.errors()).as(yaml)
            .anyMatch(e -> e.contains("'headroom'") && e.contains(v))
            .anyMatch(e -> e.contains("'maxNumOfEndpoints'") && e.contains(v))
            .anyMatch(e -> e.contains("'weight'") && e.contains(v));
      }
    }
  }

  @Test
  void finiteFloatsAndTextThatOnlyLooksLikeThemAreReadAsBefore() {
    Result<RouterConfig> ok = loader.load(flow("0.5").replace("weight: 0.5", "weight: 2.5")
        .replace("maxNumOfEndpoints: 0.5", "maxNumOfEndpoints: 2.0"), "f.yaml");
    assertThat(ok.errors()).isEmpty();

    // quoted, it is text in every YAML reader: refused as before, naming the field
    Result<RouterConfig> quoted = loader.load(flow("'.nan'"), "f.yaml");
    assertThat(quoted.errors()).anyMatch(e -> e.contains("'headroom'") && e.contains(".nan"));
  }
}
