package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Result;
import org.junit.jupiter.api.Test;

/**
 * A section that names a plugin ({@code saturationDetector}, {@code parser}, a data-layer
 * extractor) holds only its {@code pluginRef}: a field beside it would be dropped unread.
 */
class SectionRefFieldsTest {
  final PluginRegistry registry = PluginRegistry.fromServiceLoader()
      .with(new TestPlugins.LabelScorerProvider(), new TestPlugins.LabelFilterProvider());
  final ConfigLoader loader = new ConfigLoader(registry);

  Result<RouterConfig> load(String head) {
    return loader.load(head + """
        - {name: s, type: label-scorer, parameters: {label: x}}
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: s
        """, "f.yaml");
  }

  /** Thresholds written beside the reference looked set, while the plugin's own applied. */
  @Test
  void saturationDetectorThresholdsBesideTheReferenceAreRefused() {
    Result<RouterConfig> r = load("""
        saturationDetector: {pluginRef: d, queueDepthThreshold: 50}
        plugins:
        - {name: d, type: utilization-detector}
        """);
    assertThat(r.errors()).anySatisfy(e -> assertThat(e).contains("saturationDetector")
        .contains("'queueDepthThreshold'").contains("pluginRef"));
  }

  @Test
  void aParserSectionWithAnotherFieldIsRefused() {
    assertThat(load("parser: {pluginRef: p, maxBodyBytes: 10}\nplugins:\n"
        + "- {name: p, type: openai-parser}\n").errors())
        .anySatisfy(e -> assertThat(e).contains("parser").contains("'maxBodyBytes'"));
  }

  @Test
  void anExtractorWithAnotherFieldIsRefused() {
    assertThat(load("""
        dataLayer:
          sources:
          - pluginRef: m
            extractors: [{pluginRef: x, defaultEngine: sglang}]
        plugins:
        - {name: m, type: metrics-data-source}
        - {name: x, type: core-metrics-extractor}
        """).errors()).anySatisfy(e -> assertThat(e).contains("extractors[0]")
        .contains("'defaultEngine'"));
  }

  @Test
  void referencesAloneLoad() {
    assertThat(load("""
        saturationDetector: {pluginRef: d}
        parser: {pluginRef: p}
        dataLayer:
          sources:
          - pluginRef: m
            extractors: [{pluginRef: x}]
        plugins:
        - {name: d, type: utilization-detector}
        - {name: p, type: openai-parser}
        - {name: m, type: metrics-data-source}
        - {name: x, type: core-metrics-extractor}
        """).errors()).isEmpty();
  }

  /**
   * A reference written as a number or a list is there, so "is required" sent the reader looking
   * for a field the file has: the error says what the field must be and what it holds.
   */
  @Test
  void aReferenceThatIsNotAStringIsRefusedSayingWhatItIs() {
    assertThat(load("saturationDetector: {pluginRef: 5}\nplugins:\n").errors())
        .containsExactly("f.yaml: saturationDetector: field 'pluginRef' must be a string"
            + " (a plugin's name), got a number");
    assertThat(load("parser: {pluginRef: [p]}\nplugins:\n"
        + "- {name: p, type: openai-parser}\n").errors())
        .containsExactly("f.yaml: parser: field 'pluginRef' must be a string (a plugin's name),"
            + " got a list");
    assertThat(load("""
        dataLayer:
          sources:
          - pluginRef: m
            extractors: [x]
        plugins:
        - {name: m, type: metrics-data-source}
        - {name: x, type: core-metrics-extractor}
        """).errors()).containsExactly("f.yaml: dataLayer: sources[0]: extractors[0]: must be a"
        + " mapping with 'pluginRef', got a string");
  }

  /** A reference left out, or left null where null does not mean a default, is still required. */
  @Test
  void aMissingReferenceIsRequired() {
    assertThat(load("""
        dataLayer:
          sources:
          - pluginRef: m
            extractors: [{pluginRef: null}]
        plugins:
        - {name: m, type: metrics-data-source}
        """).errors()).containsExactly("f.yaml: dataLayer: sources[0]: extractors[0]: field"
        + " 'pluginRef' is required");
  }
}
