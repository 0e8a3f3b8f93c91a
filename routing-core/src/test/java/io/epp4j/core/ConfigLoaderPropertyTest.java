package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Result;
import java.util.List;
import net.jqwik.api.Arbitraries;
import net.jqwik.api.Arbitrary;
import net.jqwik.api.Combinators;
import net.jqwik.api.ForAll;
import net.jqwik.api.From;
import net.jqwik.api.Property;
import net.jqwik.api.Provide;
import net.jqwik.api.statistics.Statistics;
import net.jqwik.api.constraints.Size;
import net.jqwik.api.constraints.StringLength;

/**
 * Properties of the config loader on arbitrary and mutated YAML: it never throws, a loaded config
 * has a profile, and every error names the source and a field or a position, within the bounds
 * on count and length.
 */
class ConfigLoaderPropertyTest {
  static final ConfigLoader LOADER = new ConfigLoader(TestPlugins.registry());

  static final List<String> VALID = List.of(ConfigLoaderTest.UPSTREAM_STYLE, """
      plugins:
      - {name: a, type: label-scorer, parameters: {label: x}}
      - {name: b, type: label-scorer, parameters: {label: "y"}}
      - {type: single-profile-handler}
      schedulingProfiles:
      - {name: default, plugins: [{pluginRef: a, weight: 2}, {pluginRef: b, weight: 0.5}]}
      """);

  /** YAML's structural characters and a few others, so that mutations change structure. */
  static final String YAML_CHARS = ":-[]{},#&*!|>'\"%@` \n\t?0aZ.~\u00e9\u0000";

  /** One edit of a text: replace, insert or delete a character, duplicate or drop a line. */
  record Mutation(int kind, double at, char c) {
    String apply(String s) {
      int i = Math.min(s.length(), (int) (at * s.length()));
      return switch (kind) {
        case 0 -> i < s.length() ? s.substring(0, i) + c + s.substring(i + 1) : s;
        case 1 -> s.substring(0, i) + c + s.substring(i);
        case 2 -> i < s.length() ? s.substring(0, i) + s.substring(i + 1) : s;
        case 3 -> {
          int start = s.lastIndexOf('\n', Math.max(i - 1, 0)) + 1;
          int end = s.indexOf('\n', i);
          String line = s.substring(start, end < 0 ? s.length() : end + 1);
          yield s.substring(0, start) + line + s.substring(start);
        }
        default -> {
          int start = s.lastIndexOf('\n', Math.max(i - 1, 0)) + 1;
          int end = s.indexOf('\n', i);
          yield s.substring(0, start) + (end < 0 ? "" : s.substring(end + 1));
        }
      };
    }
  }

  @Property(tries = 1000)
  void arbitraryTextIsAConfigOrErrorsNamingAFieldOrPosition(@ForAll @StringLength(max = 300) String yaml) {
    check(LOADER.load(yaml, "any.yaml"), "any.yaml");
  }

  @Property(tries = 2000)
  void mutatedConfigsAreAConfigOrErrorsNamingAFieldOrPosition(@ForAll("valid") String yaml,
      @ForAll @Size(min = 1, max = 8) List<@From("mutations") Mutation> mutations) {
    String text = yaml;
    for (Mutation m : mutations) {
      text = m.apply(text);
    }
    Result<RouterConfig> r = LOADER.load(text, "mutated.yaml");
    check(r, "mutated.yaml");
    Statistics.collect(r.isOk() ? "loaded" : r.errors().get(0).contains("not valid YAML") ? "not YAML" : "errors");
    Statistics.coverage(c -> {
      c.check("loaded").count(n -> n > 0);
      c.check("not YAML").count(n -> n > 0);
      c.check("errors").count(n -> n > 0);
    });
  }

  /** Plugin entries, most of them mistaken in some way. */
  static final List<String> PLUGIN_ENTRIES = List.of("{type: nope}", "{name: x}", "{type: label-scorer}",
      "{type: label-filter, parameters: {key: k}}", "{name: d, type: max-score-picker}", "7",
      "{type: max-score-picker, parameters: {maxNumOfEndpoints: zero}}", "{type: label-scorer, extra: 1}",
      "{type: label-scorer, parameters: [1]}", "{name: ok, type: label-scorer, parameters: {label: l, u: 1}}");
  /** Profile plugin references, most of them mistaken in some way. */
  static final List<String> REF_ENTRIES = List.of("{pluginRef: missing}", "{pluginRef: d, weight: 1e400}",
      "{weight: 2}", "{pluginRef: ok, weight: x}", "{pluginRef: d}", "[]", "{pluginRef: ok, w: 1}");

  @Property(tries = 200)
  void manyGeneratedMistakesStayWithinTheBounds(
      @ForAll @Size(max = 200) List<@From("pluginEntries") String> plugins,
      @ForAll @Size(max = 200) List<@From("refEntries") String> refs,
      @ForAll @Size(max = 2) List<@From("mutations") Mutation> mutations) {
    StringBuilder yaml = new StringBuilder("plugins:\n");
    plugins.forEach(p -> yaml.append("- ").append(p).append('\n'));
    yaml.append("schedulingProfiles:\n- name: default\n  plugins:\n");
    refs.forEach(r -> yaml.append("  - ").append(r).append('\n'));
    String text = yaml.toString();
    for (Mutation m : mutations) {
      text = m.apply(text);
    }
    Result<RouterConfig> r = LOADER.load(text, "many.yaml");
    check(r, "many.yaml");
    Statistics.collect(!r.isOk() && r.errors().size() > ConfigLoader.MAX_REPORTED_ERRORS);
    Statistics.coverage(c -> c.check(true).count(n -> n > 0));
  }

  @Provide
  Arbitrary<String> pluginEntries() {
    return Arbitraries.of(PLUGIN_ENTRIES);
  }

  @Provide
  Arbitrary<String> refEntries() {
    return Arbitraries.of(REF_ENTRIES);
  }

  static void check(Result<RouterConfig> r, String source) {
    if (r.isOk()) {
      assertThat(r.value().profiles()).isNotEmpty();
      assertThat(r.value().warnings()).hasSizeLessThanOrEqualTo(ConfigLoader.MAX_REPORTED_ERRORS + 1);
      r.value().plugins().values().forEach(io.epp4j.api.Plugin::close);
      return;
    }
    List<String> errors = r.errors();
    assertThat(errors).isNotEmpty().hasSizeLessThanOrEqualTo(ConfigLoader.MAX_REPORTED_ERRORS + 1);
    assertThat(errors).allSatisfy(e -> assertThat(e)
        .startsWith(source + ": ")
        .hasSizeLessThanOrEqualTo(ConfigLoader.MAX_MESSAGE_CHARS)
        .doesNotContain("\n")
        .containsAnyOf("field '", "plugins[", "schedulingProfiles[", "line ", "document",
            "plugin '", "profiles need a profile handler", "more errors"));
  }

  @Provide
  Arbitrary<String> valid() {
    return Arbitraries.of(VALID);
  }

  @Provide
  Arbitrary<Mutation> mutations() {
    Arbitrary<Character> c = Arbitraries.oneOf(Arbitraries.of(YAML_CHARS.chars().mapToObj(ch -> (char) ch)
        .toArray(Character[]::new)), Arbitraries.chars());
    return Combinators.combine(Arbitraries.integers().between(0, 4), Arbitraries.doubles().between(0, 1), c)
        .as(Mutation::new);
  }
}
