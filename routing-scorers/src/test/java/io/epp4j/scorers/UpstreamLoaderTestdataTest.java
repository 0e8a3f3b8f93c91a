package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Endpoint;
import io.epp4j.core.ConfigException;
import io.epp4j.core.Router;
import io.epp4j.core.RouterConfig;
import io.epp4j.core.SchedulingProfile;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.net.URISyntaxException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The configurations upstream's own config loader is tested with (llm-d-inference-scheduler
 * pkg/epp/config/loader/testdata_test.go, which the Gateway API Inference Extension's loader
 * tests before it), its end-to-end configurations (test/e2e/configs_test.go) and the Gateway API
 * Inference Extension 1.5 guides' examples, each under {@code src/test/resources/upstream-loader}
 * with its source and commit in its header. Each loads to the profiles, weights, picker and
 * profile handler upstream's loader makes of it, or is refused with the message given here: the
 * files upstream refuses, and the upstream features epp4j does not have (request queueing,
 * multimodal encoding), each refused naming the field or plugin type.
 */
class UpstreamLoaderTestdataTest {
  static final String DIR = "/upstream-loader/";

  /** File name to what it loads to ("handler; profile: ...") or the first error of its refusal. */
  static final Map<String, String> EXPECTED = new LinkedHashMap<>();

  static void loads(String file, String description) {
    EXPECTED.put(file, description);
  }

  static void refused(String file, String firstError) {
    EXPECTED.put(file, "refused: " + firstError);
  }

  static {
    // upstream's successful cases (its mock types replaced by built-in types of the same role)
    loads("llmd-loader-success-no-profiles.yaml", "single-profile-handler;"
        + " default: filters=[low-queue-filter(threshold=10)] scorers=[] picker=max-score-picker(1)");
    loads("llmd-loader-success-with-no-weight.yaml", "single-profile-handler;"
        + " default: filters=[] scorers=[testScorer=1.0] picker=max-score-picker(1)");
    loads("llmd-loader-success-with-no-profile-handlers.yaml", "single-profile-handler;"
        + " default: filters=[] scorers=[] picker=max-score-picker(1)");
    loads("llmd-loader-success-picker-before-scorer.yaml", "single-profile-handler;"
        + " default: filters=[] scorers=[prefix-cache-scorer=1.0] picker=random-picker");
    loads("llmd-loader-success-parser-config.yaml", "single-profile-handler;"
        + " default: filters=[] scorers=[] picker=max-score-picker(1)");
    loads("llmd-loader-success-parser-with-name-config.yaml", "single-profile-handler;"
        + " default: filters=[] scorers=[] picker=max-score-picker(1)");
    loads("llmd-loader-success-with-no-parser-config.yaml", "single-profile-handler;"
        + " default: filters=[] scorers=[] picker=max-score-picker(1)");
    loads("llmd-loader-success-data-layer-auto-default.yaml", "single-profile-handler;"
        + " default: filters=[] scorers=[] picker=max-score-picker(1)");
    loads("llmd-loader-success-data-layer-disabled.yaml", "single-profile-handler;"
        + " default: filters=[] scorers=[] picker=max-score-picker(1)");
    loads("llmd-loader-success-data-layer-no-sources.yaml", "single-profile-handler;"
        + " default: filters=[] scorers=[] picker=max-score-picker(1)");
    loads("llmd-loader-success-data-layer-opt-out.yaml", "single-profile-handler;"
        + " default: filters=[] scorers=[] picker=max-score-picker(1)");
    loads("llmd-loader-success-data-layer-explicit-config.yaml", "single-profile-handler;"
        + " default: filters=[] scorers=[] picker=max-score-picker(1)");
    loads("llmd-loader-success-flow-control-config-disabled.yaml", "single-profile-handler;"
        + " default: filters=[] scorers=[] picker=max-score-picker(1)");
    loads("llmd-loader-success-filter-order-config.yaml", "single-profile-handler;"
        + " default: filters=[low-queue-filter(threshold=128), low-queue-filter(threshold=128),"
        + " low-queue-filter(threshold=128)] scorers=[scorer-X=10.0, scorer-Y=20.0]"
        + " picker=max-score-picker(1)");
    // upstream's successful cases that turn on its request queueing: refused by the gate
    String queueing = "field 'featureGates': 'flowControl' turns on upstream's request queueing,"
        + " which epp4j does not have (a request is routed, shed with 429 or rejected at once);"
        + " remove the gate";
    for (String f : List.of("success-config", "success-deprecated", "success-scheduler-config",
        "success-flow-control-config", "success-complex-flow-control-config",
        "error-flow-control-missing-plugin", "error-flow-control-wrong-plugin-type",
        "error-bad-source-reference", "error-bad-extractor-reference")) {
      refused("llmd-loader-" + f + ".yaml", queueing);
    }
    // upstream's error cases
    refused("llmd-loader-error-bad-yaml.yaml", "plugins[0]: must be a mapping with 'type', got a string");
    refused("llmd-loader-error-bad-plugin-reference.yaml", "plugins[0]: field 'type' is required");
    refused("llmd-loader-error-bad-plugin-reference-plugin.yaml", "plugins[0] (name 'testx',"
        + " type 'unknown-plugin-type'): unknown plugin type 'unknown-plugin-type'; the 58 known"
        + " types are listed at the end");
    refused("llmd-loader-error-bad-plugin-json.yaml", "plugins[1] (name 'testScorer', type"
        + " 'prefix-cache-scorer'): parameter 'blockSize' must be an integer, got 'asdf'");
    refused("llmd-loader-error-unknown-feature-gate.yaml", "field 'featureGates': unknown gate"
        + " 'unknown-gate'; known: [dataLayer, enableLegacyMetrics, prepareDataPlugins]");
    refused("llmd-loader-error-no-profile-name.yaml", "schedulingProfiles[0]: field 'name' is required");
    refused("llmd-loader-error-bad-profile-plugin.yaml", "schedulingProfiles[0] (profile 'default'):"
        + " plugins[0]: field 'pluginRef' is required");
    refused("llmd-loader-error-bad-profile-plugin-ref.yaml", "schedulingProfiles[0] (profile"
        + " 'default'): plugins[0] (pluginRef 'non-existent-plugin'): field 'pluginRef' names no"
        + " plugin; defined plugins: [profileHandler]");
    refused("llmd-loader-error-undefined-saturation-detector-plugin.yaml", "saturationDetector:"
        + " field 'pluginRef' 'unknown-plugin' names no plugin");
    refused("llmd-loader-error-duplicate-plugin.yaml", "plugins[1] (name 'test1', type"
        + " 'low-queue-filter'): field 'name': duplicate plugin name 'test1', first defined at"
        + " plugins[0]");
    refused("llmd-loader-error-duplicate-profile.yaml", "schedulingProfiles[1] (profile"
        + " 'default'): field 'name': duplicate profile name");
    refused("llmd-loader-error-two-pickers.yaml", "schedulingProfiles[0] (profile 'default'):"
        + " plugins[1] (pluginRef 'random'): a profile takes one picker; it already has 'maxScore'");
    refused("llmd-loader-error-two-profile-handlers.yaml", "plugin 'secondProfileHandler': only"
        + " one profile handler may be configured");
    refused("llmd-loader-error-no-profile-handlers.yaml", "2 profiles need a profile handler"
        + " plugin (e.g. pd-profile-handler)");
    refused("llmd-loader-error-multi-profiles-use-single-profile-handler.yaml", "profile handler"
        + " 'single-profile-handler': field 'schedulingProfiles': single-profile-handler runs one"
        + " profile, and the file has 2 ('default', 'prof2'); keep one, or name a profile handler"
        + " that runs several (disagg-profile-handler, pd-profile-handler, header-profile-handler)");
    refused("llmd-loader-error-parser-wrong-plugin-type.yaml", "parser: field 'pluginRef' must"
        + " name an openai-parser plugin; epp4j parses OpenAI requests only, got"
        + " max-score-picker(1)");
    refused("llmd-loader-error-parser-wrong-plugin-name.yaml", "parser: field 'pluginRef'"
        + " 'wrongParser' names no plugin");
    // llm-d's end-to-end configurations
    loads("llmd-e2e-simple-config.yaml", "single-profile-handler; default: filters=[decode-filter]"
        + " scorers=[prefix-cache-scorer=2.0] picker=max-score-picker(1)");
    loads("llmd-e2e-scale-config.yaml", "single-profile-handler;"
        + " default: filters=[] scorers=[] picker=max-score-picker(1)");
    loads("llmd-e2e-data-parallel-config.yaml", "data-parallel-profile-handler;"
        + " default: filters=[decode-filter] scorers=[] picker=max-score-picker(1)");
    loads("llmd-e2e-pd-config.yaml", "disagg-profile-handler(prefix-based-pd-decider"
        + "(nonCachedTokens=16));"
        + " prefill: filters=[prefill-filter] scorers=[prefix-cache-scorer=2.0] picker=max-score-picker(1);"
        + " decode: filters=[decode-filter] scorers=[prefix-cache-scorer=2.0] picker=max-score-picker(1)");
    loads("llmd-e2e-deprecated-pd-config.yaml", "pd-profile-handler(prefix-based-pd-decider"
        + "(nonCachedTokens=16));"
        + " prefill: filters=[prefill-filter] scorers=[prefix-cache-scorer=2.0] picker=max-score-picker(1);"
        + " decode: filters=[decode-filter] scorers=[prefix-cache-scorer=2.0] picker=max-score-picker(1)");
    String encode = "type 'encode-filter'): plugin type 'encode-filter' is upstream's and not in"
        + " epp4j: epp4j routes text and token prompts; multimodal encode disaggregation and"
        + " embedding caches are not in it (docs/plugins.md, Upstream compatibility); the 58 known"
        + " types are listed at the end";
    refused("llmd-e2e-decode-only-config.yaml", "plugins[1] (name 'encode-filter', " + encode);
    refused("llmd-e2e-epd-config.yaml", "plugins[0] (name 'encode-filter', " + encode);
    refused("llmd-e2e-epd-encode-decode-config.yaml", "plugins[0] (name 'encode-filter', " + encode);
    // the Gateway API Inference Extension 1.5 guides
    loads("gie-v1.5.0-config-text-prefix-profile.yaml", "single-profile-handler; default:"
        + " filters=[] scorers=[prefix-cache-scorer=50.0] picker=max-score-picker(1)");
    // no profiles: the detector, a filter upstream too, is the default profile's one plugin
    loads("gie-v1.5.0-config-text-saturation-detector.yaml", "single-profile-handler; default:"
        + " filters=[utilization-detector] scorers=[] picker=max-score-picker(1)");
    loads("gie-v1.5.0-flow-control-utilization-detector.yaml", "single-profile-handler; default:"
        + " filters=[utilization-detector] scorers=[] picker=max-score-picker(1)");
    loads("gie-v1.5.0-flow-control-concurrency-detector.yaml", "single-profile-handler; default:"
        + " filters=[concurrency-detector] scorers=[] picker=max-score-picker(1)");
  }

  static Stream<Arguments> files() {
    return EXPECTED.entrySet().stream().map(e -> Arguments.of(e.getKey(), e.getValue()));
  }

  static String upstream(String name) {
    try (InputStream in = Objects.requireNonNull(
        UpstreamLoaderTestdataTest.class.getResourceAsStream(DIR + name), name)) {
      return new String(in.readAllBytes(), StandardCharsets.UTF_8);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** The handler, then each profile's filters, weighted scorers and picker, in file order. */
  static String describe(RouterConfig c) {
    List<String> parts = new ArrayList<>();
    parts.add(String.valueOf(c.profileHandler()));
    for (SchedulingProfile p : c.profiles().values()) {
      parts.add(p.name() + ": filters=" + p.filters() + " scorers=" + p.scorers().stream()
          .map(w -> w.name() + "=" + w.weight()).toList() + " picker=" + p.picker());
    }
    return String.join("; ", parts);
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("files")
  void loadsAsUpstreamOrIsRefusedNamingWhatEpp4jLacks(String file, String expected) {
    String outcome;
    try (Router r = Router.builder().endpoints(List.of(Endpoint.parse("10.0.0.1:8000")))
        .configYaml(upstream(file), file).build()) {
      outcome = describe(r.config());
    } catch (ConfigException e) {
      outcome = "refused: " + e.errors().get(0).substring(file.length() + 2);
      if (outcome.endsWith("known types are listed at the end")) {
        assertThat(e.errors().get(e.errors().size() - 1))
            .startsWith(file + ": known plugin types (part ").contains("weighted-random-picker");
      }
    }
    assertThat(outcome).isEqualTo(expected);
  }

  /** Every file of the directory is checked: none is left without an expectation. */
  @Test
  void everyUpstreamFileHasAnExpectation() throws IOException, URISyntaxException {
    Path dir = Path.of(Objects.requireNonNull(getClass().getResource(DIR)).toURI());
    try (Stream<Path> files = Files.list(dir)) {
      assertThat(files.map(f -> f.getFileName().toString()).filter(f -> f.endsWith(".yaml")))
          .containsExactlyInAnyOrderElementsOf(EXPECTED.keySet());
    }
  }
}
