package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.epp4j.api.Result;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class ConfigLoaderTest {
  final ConfigLoader loader = new ConfigLoader(TestPlugins.registry());

  @Test
  void loadsAnUpstreamStyleFile(@TempDir Path dir) throws Exception {
    Path f = dir.resolve("epp.yaml");
    Files.writeString(f, """
        apiVersion: inference.networking.x-k8s.io/v1alpha1
        kind: EndpointPickerConfig
        featureGates:
        - dataLayer
        plugins:
        - type: label-scorer
          parameters:
            label: cache
        - name: h100-only
          type: label-filter
          parameters: {key: gpu, value: h100}
        - name: picker
          type: max-score-picker
          parameters:
            maxNumOfEndpoints: 2
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: h100-only
          - pluginRef: label-scorer
            weight: 3
          - pluginRef: picker
        """);
    Result<RouterConfig> r = loader.load(f);
    assertThat(r.errors()).isEmpty();
    RouterConfig c = r.value();
    SchedulingProfile p = c.profiles().get("default");
    assertThat(p.filters()).hasSize(1);
    assertThat(p.scorers()).singleElement().satisfies(ws -> {
      assertThat(ws.name()).isEqualTo("label-scorer");
      assertThat(ws.weight()).isEqualTo(3.0);
    });
    assertThat(((MaxScorePicker) p.picker()).maxNumOfEndpoints()).isEqualTo(2);
    assertThat(c.profileHandler()).isInstanceOf(SingleProfileHandler.class);
    assertThat(c.warnings()).anySatisfy(w -> assertThat(w).contains("featureGates"));
  }

  @Test
  void scorerWithoutWeightGetsOneAndProfileWithoutPickerGetsMaxScore() {
    Result<RouterConfig> r = loader.load("""
        plugins:
        - type: label-scorer
          parameters: {label: x}
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: label-scorer
        """, "mem");
    SchedulingProfile p = r.value().profiles().get("default");
    assertThat(p.scorers().get(0).weight()).isEqualTo(1.0);
    assertThat(p.picker()).isInstanceOf(MaxScorePicker.class);
    assertThat(((MaxScorePicker) p.picker()).maxNumOfEndpoints()).isEqualTo(1);
  }

  @Test
  void reportsEveryErrorOfAFileTogetherNamingFilePluginAndField() {
    Result<RouterConfig> r = loader.load("""
        plugins:
        - type: label-scorer          # missing required parameter
        - name: f
          type: label-filter
          parameters: {key: zone}     # missing value
        - name: typo
          type: queue-scorre          # unknown type
        - name: p
          type: max-score-picker
          parameters: {maxNumOfEndpoints: zero}
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: nowhere
          - pluginRef: f
            weight: -2
        """, "broken.yaml");
    assertThat(r.isOk()).isFalse();
    List<String> errs = r.errors();
    assertThat(errs).allSatisfy(e -> assertThat(e).startsWith("broken.yaml: "));
    assertThat(errs).anySatisfy(e -> assertThat(e)
        .contains("plugins[0]").contains("type 'label-scorer'").contains("parameter 'label' is required"));
    assertThat(errs).anySatisfy(e -> assertThat(e)
        .contains("name 'f'").contains("parameter 'value' is required"));
    assertThat(errs).anySatisfy(e -> assertThat(e)
        .contains("unknown plugin type 'queue-scorre'").contains("known types: [label-filter, label-scorer, max-score-picker, single-profile-handler]"));
    assertThat(errs).anySatisfy(e -> assertThat(e)
        .contains("name 'p'").contains("parameter 'maxNumOfEndpoints' must be an integer"));
    assertThat(errs).anySatisfy(e -> assertThat(e)
        .contains("schedulingProfiles[0] (profile 'default')").contains("pluginRef 'nowhere'"));
    assertThat(errs).anySatisfy(e -> assertThat(e).contains("field 'weight' must be a number >= 0"));
    assertThat(errs).hasSizeGreaterThanOrEqualTo(6);
  }

  @Test
  void syntaxErrorNamesLine() {
    Result<RouterConfig> r = loader.load("plugins:\n  - type: [unclosed\n", "bad.yaml");
    assertThat(r.errors()).singleElement().satisfies(e ->
        assertThat(e).startsWith("bad.yaml: not valid YAML").contains("line"));
  }

  @Test
  void unknownFieldsAndKindAreRejected() {
    Result<RouterConfig> r = loader.load("""
        kind: SomethingElse
        plugin: []
        schedulingProfiles:
        - name: default
          plugins: []
          weight: 3
        """, "x.yaml");
    assertThat(r.errors()).anySatisfy(e -> assertThat(e).contains("field 'kind'"));
    assertThat(r.errors()).anySatisfy(e -> assertThat(e).contains("unknown top-level field 'plugin'"));
    assertThat(r.errors()).anySatisfy(e -> assertThat(e).contains("unknown field 'weight'"));
  }

  @Test
  void severalProfilesNeedAHandler() {
    Result<RouterConfig> r = loader.load("""
        plugins:
        - type: max-score-picker
        schedulingProfiles:
        - name: prefill
          plugins: [{pluginRef: max-score-picker}]
        - name: decode
          plugins: [{pluginRef: max-score-picker}]
        """, "pd.yaml");
    assertThat(r.errors()).anySatisfy(e -> assertThat(e).contains("need a profile handler"));
  }

  @Test
  void routerBuilderThrowsConfigExceptionWithAllErrors() {
    assertThatThrownBy(() -> Router.builder().registry(TestPlugins.registry())
        .configYaml("plugins:\n- type: nope\n- type: nada\nschedulingProfiles: []\n", "y.yaml").build())
        .isInstanceOf(ConfigException.class)
        .satisfies(e -> assertThat(((ConfigException) e).errors()).hasSizeGreaterThanOrEqualTo(2));
  }

  @Test
  void zeroConfigWithoutBuiltinsExplainsWhatIsMissing() {
    assertThatThrownBy(() -> Router.builder().registry(TestPlugins.registry()).build())
        .isInstanceOf(ConfigException.class)
        .hasMessageContaining("routing-scorers")
        .hasMessageContaining("prefix-cache-scorer");
  }
}
