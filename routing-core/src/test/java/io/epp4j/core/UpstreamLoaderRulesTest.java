package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.PluginProvider;
import io.epp4j.api.Result;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * Rules of upstream's config loader (llm-d-inference-scheduler pkg/epp/config/loader, the
 * Gateway API Inference Extension before it) that a file written for it relies on.
 */
class UpstreamLoaderRulesTest {
  final ConfigLoader loader = new ConfigLoader(TestPlugins.registry());

  /**
   * Upstream's errorMultiProfilesUseSingleProfileHandlerText (pkg/epp/config/loader
   * testdata_test.go): buildSchedulerConfig refuses it with "SingleProfileHandler cannot support
   * multiple scheduling profiles". Loaded, the second profile would never run.
   */
  @Test
  void singleProfileHandlerWithTwoProfilesIsRefusedNamingTheProfiles() {
    Result<RouterConfig> r = loader.load("""
        apiVersion: llm-d.ai/v1alpha1
        kind: EndpointPickerConfig
        plugins:
        - name: profileHandler
          type: single-profile-handler
        - name: maxScore
          type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: maxScore
        - name: prof2
          plugins:
          - pluginRef: maxScore
        """, "c.yaml");
    assertThat(r.isOk()).isFalse();
    assertThat(r.errors()).singleElement().asString()
        .startsWith("c.yaml: profile handler 'single-profile-handler': field 'schedulingProfiles':")
        .contains("runs one profile").contains("has 2 ('default', 'prof2')");
  }

  /** Without a handler, two profiles get the one error that asks for a handler, not two. */
  @Test
  void twoProfilesWithoutAHandlerAreOneError() {
    Result<RouterConfig> r = loader.load("""
        plugins:
        - type: max-score-picker
        schedulingProfiles:
        - name: a
          plugins: [{pluginRef: max-score-picker}]
        - name: b
          plugins: [{pluginRef: max-score-picker}]
        """, "c.yaml");
    assertThat(r.errors()).containsExactly(
        "c.yaml: 2 profiles need a profile handler plugin (e.g. pd-profile-handler)");
  }

  /** One profile with the handler named explicitly loads as upstream's successConfigText does. */
  @Test
  void singleProfileHandlerWithOneProfileLoads() {
    Result<RouterConfig> r = loader.load("""
        plugins:
        - type: single-profile-handler
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins: [{pluginRef: max-score-picker}]
        """, "c.yaml");
    assertThat(r.errors()).isEmpty();
    assertThat(r.value().profileHandler()).isInstanceOf(SingleProfileHandler.class);
    assertThat(r.value().profiles()).containsOnlyKeys("default");
  }
  /**
   * The Gateway API Inference Extension 1.3 and 1.4 name the data layer section {@code data}
   * ({@code Data *DataLayerConfig `json:"data"`} in apix/config/v1alpha1), with the sources and
   * extractors that 1.5 and llm-d put under {@code dataLayer}; its loader refuses a source that is
   * not a data source ("the plugin %s is not a datalayer.Source").
   */
  @Test
  void theDataSectionOfGie13And14IsReadAsTheDataLayer() {
    ConfigLoader all = new ConfigLoader(PluginRegistry.fromServiceLoader());
    String file = """
        apiVersion: inference.networking.x-k8s.io/v1alpha1
        kind: EndpointPickerConfig
        featureGates:
        - dataLayer
        plugins:
        - type: metrics-data-source
        - type: core-metrics-extractor
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: max-score-picker
        data:
          sources:
          - pluginRef: metrics-data-source
            extractors:
            - pluginRef: core-metrics-extractor
        """;
    Result<RouterConfig> ok = all.load(file, "d.yaml");
    assertThat(ok.errors()).isEmpty();
    assertThat(ok.value().warnings()).noneSatisfy(w -> assertThat(w).contains("'data'"));

    Result<RouterConfig> wrong = all.load(
        file.replace("- pluginRef: metrics-data-source", "- pluginRef: max-score-picker"), "d.yaml");
    assertThat(wrong.errors()).singleElement().asString().startsWith(
        "d.yaml: field 'data': sources[0]: field 'pluginRef' must name a metrics-data-source");

    Result<RouterConfig> dangling = all.load(
        file.replace("- pluginRef: core-metrics-extractor", "- pluginRef: nowhere"), "d.yaml");
    assertThat(dangling.errors()).containsExactly(
        "d.yaml: data: sources[0]: extractors[0]: field 'pluginRef' 'nowhere' names no plugin");

    Result<RouterConfig> both = all.load(file + "dataLayer: {sources: []}\n", "d.yaml");
    assertThat(both.errors()).containsExactly("d.yaml: field 'data' is the former name of"
        + " 'dataLayer' (Gateway API Inference Extension 1.3 and 1.4); give one of them, not both");
  }
  static PluginProvider provider(String type) {
    return new PluginProvider() {
      @Override
      public String type() {
        return type;
      }

      @Override
      public Result<? extends Plugin> create(PluginContext context, Parameters p) {
        return Result.ok(new TestPlugins.LabelScorer("x"));
      }
    };
  }

  /**
   * A class path with as many plugin types as epp4j's modules bring (over sixty): the list of
   * known types is longer than one message may be, and was cut after the first few, so a file
   * naming a type epp4j lacks was not told which ones exist. The error now names the type (and
   * the closest known one), and every known type follows at the end of the report, once.
   */
  @Test
  void anUnknownTypeIsNamedAndEveryKnownTypeIsListedOnce() {
    List<PluginProvider> providers = new ArrayList<>(List.of(
        new CorePluginProviders.MaxScorePickerProvider(), provider("queue-scorer")));
    for (int i = 0; i < 60; i++) {
      providers.add(provider("example-plugin-type-number-" + i));
    }
    PluginRegistry registry = PluginRegistry.of(providers);
    Result<RouterConfig> r = new ConfigLoader(registry).load("""
        plugins:
        - type: quue-scorer
        - type: encode-filter
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins: [{pluginRef: max-score-picker}]
        """, "c.yaml");
    List<String> errors = r.errors();
    assertThat(errors).allSatisfy(e -> assertThat(e).hasSizeLessThanOrEqualTo(500));
    assertThat(errors.get(0)).isEqualTo("c.yaml: plugins[0] (name 'quue-scorer', type"
        + " 'quue-scorer'): unknown plugin type 'quue-scorer' (did you mean 'queue-scorer'?); the"
        + " 62 known types are listed at the end");
    assertThat(errors.get(1)).startsWith("c.yaml: plugins[1] (name 'encode-filter', type"
        + " 'encode-filter'): plugin type 'encode-filter' is upstream's and not in epp4j:")
        .endsWith("; the 62 known types are listed at the end");
    List<String> list = errors.subList(2, errors.size());
    assertThat(list).isNotEmpty().allSatisfy(e -> assertThat(e)
        .startsWith("c.yaml: known plugin types (part "));
    String listed = String.join(", ", list.stream()
        .map(e -> e.substring(e.indexOf("): ") + 3)).toList());
    assertThat(listed.split(", ")).containsExactlyElementsOf(registry.types());
  }

  /** A short list stays in the error itself, as before. */
  @Test
  void aShortListOfKnownTypesStaysInTheError() {
    Result<RouterConfig> r = loader.load("""
        plugins:
        - type: label-scorr
          parameters: {label: x}
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins: [{pluginRef: max-score-picker}]
        """, "c.yaml");
    assertThat(r.errors()).containsExactly("c.yaml: plugins[0] (name 'label-scorr', type"
        + " 'label-scorr'): unknown plugin type 'label-scorr' (did you mean 'label-scorer'?);"
        + " known types: [label-filter, label-scorer, max-score-picker, single-profile-handler]");
  }
  /**
   * Upstream's ensureSaturationDetector (llm-d-inference-scheduler, GIE 1.5) sets an empty
   * {@code saturationDetector.pluginRef} to {@code utilization-detector} and adds that plugin
   * with its defaults, as a chart that leaves the value unset renders it; such a file loads.
   */
  @Test
  void anEmptySaturationDetectorRefIsTheUtilizationDetector() {
    ConfigLoader all = new ConfigLoader(PluginRegistry.fromServiceLoader());
    for (String ref : List.of("\"\"", "null", "")) {
      for (String section : List.of("saturationDetector:\n  pluginRef: " + ref,
          "flowControl:\n  saturationDetector:\n    pluginRef: " + ref)) {
        Result<RouterConfig> r = all.load("""
            plugins:
            - type: max-score-picker
            schedulingProfiles:
            - name: default
              plugins: [{pluginRef: max-score-picker}]
            """ + section + "\n", "s.yaml");
        assertThat(r.errors()).as(section).isEmpty();
        assertThat(r.value().saturation()).as(section).contains(new RouterConfig.Saturation(5, 0.8, java.time.Duration.ofMillis(200)));
        assertThat(r.value().plugins()).as(section).containsKey("utilization-detector");
      }
    }
    // a utilization-detector the file defines is the one used, with its parameters
    Result<RouterConfig> r = all.load("""
        plugins:
        - type: utilization-detector
          parameters: {queueDepthThreshold: 9}
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins: [{pluginRef: max-score-picker}]
        saturationDetector:
          pluginRef: ""
        """, "s.yaml");
    assertThat(r.errors()).isEmpty();
    assertThat(r.value().saturation().orElseThrow().queueThreshold()).isEqualTo(9);
  }
  /**
   * llm-d's e2e epdConfig (test/e2e/configs_test.go) defines its disagg-profile-handler, which
   * epp4j refuses for its encode decider: the error about the profiles lacking a handler says
   * that the file's handler is among the plugins that did not load, rather than reading as if the
   * file had none.
   */
  @Test
  void profilesWithoutALoadedHandlerNameThePluginsThatDidNotLoad() {
    Result<RouterConfig> r = loader.load("""
        plugins:
        - type: max-score-picker
        - type: disagg-profile-handler
          parameters: {deciders: {encode: x}}
        schedulingProfiles:
        - name: prefill
          plugins: [{pluginRef: max-score-picker}]
        - name: decode
          plugins: [{pluginRef: max-score-picker}]
        """, "c.yaml");
    assertThat(r.errors()).hasSize(2);
    assertThat(r.errors().get(0)).startsWith("c.yaml: plugins[1] (name 'disagg-profile-handler',"
        + " type 'disagg-profile-handler'): unknown plugin type 'disagg-profile-handler'");
    assertThat(r.errors().get(1)).isEqualTo("c.yaml: 2 profiles need a profile handler plugin"
        + " (e.g. pd-profile-handler); of the file's plugins, [disagg-profile-handler] did not"
        + " load (see above)");
  }
}
