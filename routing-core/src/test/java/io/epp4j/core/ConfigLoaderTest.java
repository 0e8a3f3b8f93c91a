package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;

import io.epp4j.api.Result;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class ConfigLoaderTest {
  final ConfigLoader loader = new ConfigLoader(TestPlugins.registry());

  /** An upstream EPP file in the shape the chart ships (also the property test's first seed). */
  static final String UPSTREAM_STYLE = """
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
      """;

  /**
   * A type upstream has and epp4j deliberately lacks is refused saying why, not listed among
   * the known types as if misspelt; a type nobody has still gets the list.
   */
  @Test
  void anUpstreamTypeEpp4jLacksIsRefusedWithTheReason() {
    Result<RouterConfig> r = loader.load("""
        plugins:
        - type: latency-scorer
        - type: fcfs-ordering-policy
        - type: no-such-type
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: max-score-picker
        """, "upstream-only.yaml");
    assertThat(r.errors()).anySatisfy(e -> assertThat(e)
        .contains("plugin type 'latency-scorer' is upstream's and not in epp4j")
        .contains("latency predictor").endsWith("; known types: [label-filter, label-scorer,"
            + " max-score-picker, single-profile-handler]"));
    assertThat(r.errors()).anySatisfy(e -> assertThat(e)
        .contains("'fcfs-ordering-policy'").contains("flow control"));
    assertThat(r.errors()).anySatisfy(e -> assertThat(e)
        .contains("unknown plugin type 'no-such-type'; known types:"));
  }

  @Test
  void loadsAnUpstreamStyleFile(@TempDir Path dir) throws Exception {
    Path f = dir.resolve("epp.yaml");
    Files.writeString(f, UPSTREAM_STYLE);
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

  /**
   * A number in quotes is read as that number wherever the file takes a number: a scorer's
   * weight as a plugin's number parameter (here maxNumOfEndpoints) always was. The weight was
   * refused while '2' was taken for every parameter. Text that is no number is still refused,
   * naming the profile, the reference and the field, once.
   */
  @Test
  void aQuotedWeightIsReadAsTheNumberAsAQuotedParameterIs() {
    Result<RouterConfig> r = loader.load("""
        plugins:
        - type: label-scorer
          parameters: {label: x}
        - type: max-score-picker
          parameters: {maxNumOfEndpoints: '2'}
        schedulingProfiles:
        - name: default
          plugins:
          - {pluginRef: label-scorer, weight: '2.5'}
          - {pluginRef: max-score-picker}
        """, "quoted.yaml");
    assertThat(r.errors()).isEmpty();
    SchedulingProfile p = r.value().profiles().get("default");
    assertThat(p.scorers()).singleElement().satisfies(ws -> assertThat(ws.weight()).isEqualTo(2.5));
    assertThat(((MaxScorePicker) p.picker()).maxNumOfEndpoints()).isEqualTo(2);

    for (String bad : List.of("'heavy'", "'2x'", "'NaN'", "'1e400'", "''", "[2]", "true")) {
      Result<RouterConfig> refused = loader.load("""
          plugins:
          - type: label-scorer
            parameters: {label: x}
          schedulingProfiles:
          - name: default
            plugins:
            - {pluginRef: label-scorer, weight: %s}
          """.formatted(bad), "bad.yaml");
      assertThat(refused.errors()).as(bad).singleElement().satisfies(e -> assertThat(e)
          .startsWith("bad.yaml: schedulingProfiles[0] (profile 'default'): plugins[0]"
              + " (pluginRef 'label-scorer'): field 'weight' must be a finite number"));
    }
  }

  @Test
  void aProfileWithoutPickerTakesThePickerTheFileDefinesAsUpstreamDoes() {
    // upstream's loader gives a profile that names no picker a picker of the file, and adds
    // max-score-picker only when the file has none; the profile here used to get a new
    // max-score-picker of one endpoint, dropping the file's maxNumOfEndpoints: 2
    Result<RouterConfig> r = loader.load("""
        plugins:
        - type: label-scorer
          parameters: {label: x}
        - name: two
          type: max-score-picker
          parameters: {maxNumOfEndpoints: 2}
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: label-scorer
        """, "mem");
    assertThat(r.errors()).isEmpty();
    assertThat(((MaxScorePicker) r.value().profiles().get("default").picker())
        .maxNumOfEndpoints()).isEqualTo(2);
    assertThat(r.value().warnings()).noneMatch(w -> w.contains("names no picker"));

    // of several, the first defined, said in a notice
    Result<RouterConfig> several = loader.load("""
        plugins:
        - type: label-scorer
          parameters: {label: x}
        - {name: first, type: max-score-picker, parameters: {maxNumOfEndpoints: 3}}
        - {name: second, type: max-score-picker, parameters: {maxNumOfEndpoints: 4}}
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: label-scorer
        """, "mem");
    assertThat(((MaxScorePicker) several.value().profiles().get("default").picker())
        .maxNumOfEndpoints()).isEqualTo(3);
    assertThat(several.value().warnings()).anySatisfy(w -> assertThat(w)
        .contains("profile 'default'").contains("names no picker").contains("'first'"));
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
            weight: heavy
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
    assertThat(errs).anySatisfy(e -> assertThat(e).contains("field 'weight' must be a finite number"));
    assertThat(errs).hasSize(6);
  }

  @Test
  void syntaxErrorNamesLine() {
    Result<RouterConfig> r = loader.load("plugins:\n  - type: [unclosed\n", "bad.yaml");
    assertThat(r.errors()).containsExactly("bad.yaml: not valid YAML at line 3, column 1: expected ',' or ']',"
        + " but got <stream end> (while parsing a flow sequence started at line 2, column 11)");
    assertThat(loader.load("a: 1\n\tb: 2\n", "tab.yaml").errors()).containsExactly("tab.yaml: not valid YAML"
        + " at line 2, column 1: found character '\\t(TAB)' that cannot start any token. (Do not use \\t(TAB)"
        + " for indentation) (while scanning for the next token)");
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
        .configYaml("plugins:\n- type: nope\n- type: nada\nschedulingProfiles: {}\n", "y.yaml").build())
        .isInstanceOf(ConfigException.class)
        .satisfies(e -> assertThat(((ConfigException) e).errors()).containsExactly(
            "y.yaml: plugins[0] (name 'nope', type 'nope'): unknown plugin type 'nope'; known types:"
                + " [label-filter, label-scorer, max-score-picker, single-profile-handler]",
            "y.yaml: plugins[1] (name 'nada', type 'nada'): unknown plugin type 'nada'; known types:"
                + " [label-filter, label-scorer, max-score-picker, single-profile-handler]",
            "y.yaml: field 'schedulingProfiles' must be a list"))
        .hasMessageStartingWith("3 configuration errors:\n  - y.yaml: plugins[0]");
  }

  @Test
  void aKeyGivenTwiceInOneMappingIsAnErrorNamingItAndItsLine() {
    // before, the last one won and the first was dropped without a word: here the first
    // 'plugins' section, with the scorer the profile goes on to use
    Result<RouterConfig> twoSections = loader.load("""
        plugins:
        - type: label-scorer
          parameters: {label: cache}
        schedulingProfiles:
        - name: default
          plugins: [{pluginRef: label-scorer}]
        plugins:
        - type: max-score-picker
        """, "d.yaml");
    assertThat(twoSections.errors()).containsExactly("d.yaml: not valid YAML at line 7, column 8:"
        + " field 'plugins' is given twice in one mapping (the second would replace the first)");
    Result<RouterConfig> twoValues = loader.load("""
        plugins:
        - type: label-scorer
          parameters:
            label: cache
            label: gpu
        schedulingProfiles:
        - name: default
          plugins: [{pluginRef: label-scorer}]
        """, "d.yaml");
    assertThat(twoValues.errors()).singleElement().asString()
        .contains("line 5", "field 'label' is given twice");
  }

  /** A scorer whose close throws, and one that counts its closes. */
  static final class ClosingScorer implements io.epp4j.api.Scorer {
    final boolean throwOnClose;
    final java.util.concurrent.atomic.AtomicInteger closes = new java.util.concurrent.atomic.AtomicInteger();

    ClosingScorer(boolean throwOnClose) {
      this.throwOnClose = throwOnClose;
    }

    @Override
    public void score(io.epp4j.api.InferenceRequest r, io.epp4j.api.CycleState s,
        List<io.epp4j.api.Candidate> cs, double[] scores) {}

    @Override
    public void close() {
      closes.incrementAndGet();
      if (throwOnClose) {
        throw new IllegalStateException("close failed");
      }
    }
  }

  @Test
  void aPluginThatThrowsWhenAFailedLoadClosesItNeitherEscapesNorKeepsTheOthersOpen() {
    List<ClosingScorer> made = new java.util.concurrent.CopyOnWriteArrayList<>();
    io.epp4j.api.PluginProvider provider = new io.epp4j.api.PluginProvider() {
      @Override
      public String type() {
        return "closing-scorer";
      }

      @Override
      public Result<? extends io.epp4j.api.Plugin> create(io.epp4j.api.PluginContext c,
          io.epp4j.api.Parameters p) {
        ClosingScorer s = new ClosingScorer(p.getBoolean("throw", false));
        made.add(s);
        return Result.ok(s);
      }
    };
    PluginRegistry registry = TestPlugins.registry().with(provider);
    String yaml = """
        plugins:
        - {name: a, type: closing-scorer, parameters: {throw: true}}
        - {name: b, type: closing-scorer}
        - type: nope
        schedulingProfiles:
        - name: p
          plugins: [{pluginRef: a}, {pluginRef: b}]
        """;
    Result<RouterConfig> r = new ConfigLoader(registry).load(yaml, "c.yaml");
    assertThat(r.errors()).anySatisfy(e -> assertThat(e).contains("unknown plugin type 'nope'"))
        .anySatisfy(e -> assertThat(e).isEqualTo("c.yaml: plugin 'a': closing it after the failed"
            + " load threw java.lang.IllegalStateException"));
    assertThat(made).hasSize(2).allSatisfy(s -> assertThat(s.closes.get()).isEqualTo(1));
    // the builder still answers with every problem, and a reload leaves the router as it was
    assertThatThrownBy(() -> Router.builder().registry(registry).configYaml(yaml, "c.yaml").build())
        .isInstanceOf(ConfigException.class);
    try (Router router = Router.builder().registry(registry)
        .profile(SchedulingProfile.builder("default").build()).build()) {
      assertThat(router.reconfigure(yaml, "c.yaml").errors())
          .anySatisfy(e -> assertThat(e).contains("unknown plugin type 'nope'"));
    }
  }

  @Test
  void zeroConfigWithoutBuiltinsExplainsWhatIsMissing() {
    assertThatThrownBy(() -> Router.builder().registry(TestPlugins.registry()).build())
        .isInstanceOf(ConfigException.class)
        .hasMessageContaining("routing-scorers")
        .hasMessageContaining("prefix-cache-scorer");
  }

  @Test
  void twentyThousandDanglingReferencesGiveABoundedReportInLinearTime() {
    int n = 20_000;
    StringBuilder yaml = new StringBuilder("plugins:\n");
    for (int i = 0; i < n; i++) {
      yaml.append("- {name: s").append(i).append(", type: max-score-picker}\n");
    }
    yaml.append("schedulingProfiles:\n- name: default\n  plugins:\n");
    for (int i = 0; i < n; i++) {
      yaml.append("  - pluginRef: missing").append(i).append('\n');
    }
    // a guard against a hang only (the quadratic loader ran out of memory at this size); it takes
    // about a second alone, most of it in the YAML parser, and is given room for a busy machine
    // (it once took over 30 s on two cores shared with several other builds)
    Result<RouterConfig> r = assertTimeoutPreemptively(Duration.ofSeconds(120),
        () -> loader.load(yaml.toString(), "big.yaml"), "hang guard only");
    List<String> errs = r.errors();
    assertThat(errs).hasSize(ConfigLoader.MAX_REPORTED_ERRORS + 1);
    assertThat(errs.get(0)).isEqualTo("big.yaml: schedulingProfiles[0] (profile 'default'): plugins[0]"
        + " (pluginRef 'missing0'): field 'pluginRef' names no plugin; defined plugins: [s0, s1, s10, s100,"
        + " s1000, s10000, s10001, s10002, s10003, s10004, s10005, s10006, s10007, s10008, s10009, s1001,"
        + " s10010, s10011, s10012, s10013, ... and 19980 more]");
    assertThat(errs.subList(1, ConfigLoader.MAX_REPORTED_ERRORS)).allSatisfy(e -> assertThat(e)
        .matches("big\\.yaml: schedulingProfiles\\[0] \\(profile 'default'\\): plugins\\[\\d+]"
            + " \\(pluginRef 'missing\\d+'\\): field 'pluginRef' names no plugin"));
    assertThat(errs.get(ConfigLoader.MAX_REPORTED_ERRORS))
        .isEqualTo("big.yaml: ... and " + (n - ConfigLoader.MAX_REPORTED_ERRORS) + " more errors");
    assertThat(String.join("\n", errs).length()).isLessThan(10_000);
    ConfigException e = new ConfigException(errs);
    assertThat(e.getMessage().length()).isLessThan(10_000);
  }

  @Test
  void longNamesAndValuesAreShortenedInMessages() {
    String huge = "n".repeat(100_000);
    Result<RouterConfig> r = loader.load("plugins:\n- {name: " + huge + ", type: " + huge + "}\n"
        + "? " + huge + "\n: 1\nschedulingProfiles:\n- name: " + huge + "\n  plugins: [{pluginRef: " + huge
        + ", weight: " + huge + "}]\n", "long.yaml");
    assertThat(r.errors()).hasSize(3);
    assertThat(r.errors()).allSatisfy(e -> assertThat(e).hasSizeLessThan(ConfigLoader.MAX_MESSAGE_CHARS + 1));
    assertThat(r.errors().get(0)).startsWith("long.yaml: unknown top-level field 'nnnnnnnn")
        .contains("...(100000 chars)'");
  }

  @Test
  void unreadableFilesNameTheFileAndTheReason(@TempDir Path dir) throws Exception {
    assertThat(loader.load(dir).errors()).containsExactly(dir + ": cannot read: it is a directory");
    Path missing = dir.resolve("missing.yaml");
    assertThat(loader.load(missing).errors()).containsExactly(missing + ": cannot read: no such file");
    Path latin1 = dir.resolve("latin1.yaml");
    Files.write(latin1, "plugins: []\n# caf\u00e9\n".getBytes(java.nio.charset.StandardCharsets.ISO_8859_1));
    assertThat(loader.load(latin1).errors()).containsExactly(
        latin1 + ": not valid UTF-8: truncated sequence at line 2, column 6 (byte offset 17)");
  }

  @Test
  void documentMustBeAMapping() {
    assertThat(loader.load("- plugins\n- schedulingProfiles\n", "list.yaml").errors()).containsExactly(
        "list.yaml: the document must be a mapping with 'plugins' and 'schedulingProfiles', got a list");
    assertThat(loader.load("just text\n", "text.yaml").errors()).containsExactly(
        "text.yaml: the document must be a mapping with 'plugins' and 'schedulingProfiles', got a string");
    assertThat(loader.load("", "empty.yaml").errors()).containsExactly(
        "empty.yaml: the document is empty; it must be a mapping with 'plugins' and 'schedulingProfiles'");
    assertThat(loader.load("# only a comment\n", "comment.yaml").errors()).containsExactly(
        "comment.yaml: the document is empty; it must be a mapping with 'plugins' and 'schedulingProfiles'");
  }

  @Test
  void duplicatePluginNamesAreRejectedNamingBoth() {
    Result<RouterConfig> r = loader.load("""
        plugins:
        - type: max-score-picker
        - name: max-score-picker
          type: label-scorer
          parameters: {label: x}
        schedulingProfiles:
        - name: default
          plugins: [{pluginRef: max-score-picker}]
        """, "dup.yaml");
    assertThat(r.errors()).containsExactly("dup.yaml: plugins[1] (name 'max-score-picker', type 'label-scorer'):"
        + " field 'name': duplicate plugin name 'max-score-picker', first defined at plugins[0]");
  }

  @Test
  void aProfileTakesOnePicker() {
    Result<RouterConfig> r = loader.load("""
        plugins:
        - name: a
          type: max-score-picker
        - name: b
          type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins: [{pluginRef: a}, {pluginRef: b}]
        """, "pickers.yaml");
    assertThat(r.errors()).containsExactly("pickers.yaml: schedulingProfiles[0] (profile 'default'): plugins[1]"
        + " (pluginRef 'b'): a profile takes one picker; it already has 'a'");
  }

  @Test
  void withoutProfilesOneDefaultProfileRunsEveryPluginAsUpstreamDoes() {
    String plugins = "plugins:\n- type: max-score-picker\n  parameters: {maxNumOfEndpoints: 3}\n";
    for (String text : List.of(plugins + "schedulingProfiles: []\n",
        plugins + "schedulingProfiles:\n", plugins)) {
      Result<RouterConfig> r = loader.load(text, "d.yaml");
      assertThat(r.errors()).as(text).isEmpty();
      assertThat(r.value().profiles()).as(text).containsOnlyKeys("default");
      assertThat(r.value().profiles().get("default").picker()).as(text)
          .hasToString("max-score-picker(3)");
    }
  }

  @Test
  void schedulingProfilesMustBeAList() {
    String plugins = "plugins:\n- type: max-score-picker\n";
    assertThat(loader.load(plugins + "schedulingProfiles: {name: x}\n", "s.yaml").errors()).containsExactly(
        "s.yaml: field 'schedulingProfiles' must be a list");
  }

  @Test
  void warningsAreBoundedToo() {
    StringBuilder yaml = new StringBuilder("plugins:\n- type: label-scorer\n  parameters:\n    label: x\n");
    for (int i = 0; i < 5000; i++) {
      yaml.append("    unused").append(i).append(": 1\n");
    }
    yaml.append("schedulingProfiles:\n- name: default\n  plugins: [{pluginRef: label-scorer}]\n");
    List<String> warnings = loader.load(yaml.toString(), "w.yaml").value().warnings();
    assertThat(warnings).hasSize(ConfigLoader.MAX_REPORTED_ERRORS + 1);
    assertThat(warnings.get(ConfigLoader.MAX_REPORTED_ERRORS))
        .isEqualTo("w.yaml: ... and " + (5000 - ConfigLoader.MAX_REPORTED_ERRORS) + " more warnings");
  }
}
