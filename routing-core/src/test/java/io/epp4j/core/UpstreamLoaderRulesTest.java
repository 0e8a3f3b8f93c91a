package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Result;
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
}
