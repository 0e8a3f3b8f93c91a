package io.epp4j.api;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;

/**
 * A string parameter given a number or a boolean: the upstream EPP decodes parameters into typed
 * Go fields, and a JSON number or boolean where a string field is declared fails the plugin's
 * creation. Taken as its text here, {@code scorerName: 5} loaded a file upstream refuses, and
 * {@code 1e3} stood for the text "1000.0", which the file does not show.
 */
class ParametersStringTypeTest {

  @Test
  void aNumberOrABooleanForAStringIsOneErrorNamingTheParameterAndGivesTheDefault() {
    Parameters p = Parameters.of(Map.of("scorerName", 5, "header", true, "ratio", 1e3));
    assertThat(p.getString("scorerName", "dflt")).isEqualTo("dflt");
    assertThat(p.getString("header", null)).isNull();
    assertThat(p.getString("ratio", "r")).isEqualTo("r");
    assertThat(p.errors()).containsExactly(
        "parameter 'scorerName' must be a string, got a number ('5') (write it in quotes if it"
            + " is meant as text)",
        "parameter 'header' must be a string, got a boolean ('true') (write it in quotes if it"
            + " is meant as text)",
        "parameter 'ratio' must be a string, got a number ('1000.0') (write it in quotes if it"
            + " is meant as text)");
  }

  @Test
  void textStaysText() {
    Parameters p = Parameters.of(Map.of("scorerName", "5", "header", "true"));
    assertThat(p.getString("scorerName", null)).isEqualTo("5");
    assertThat(p.getString("header", null)).isEqualTo("true");
    assertThat(p.errors()).isEmpty();
  }

  @Test
  void anEnumGivenANumberIsOneErrorAboutItsType() {
    Parameters p = Parameters.of(Map.of("mode", 1));
    assertThat(p.getEnum("mode", "a", Set.of("a", "1"))).isEqualTo("a");
    assertThat(p.errors()).singleElement().asString()
        .startsWith("parameter 'mode' must be a string, got a number ('1')");
  }

  @Test
  void aNumberInAListOfStringsIsOneErrorNamingTheParameterAndThePosition() {
    Parameters p = Parameters.of(Map.of("validValues", Arrays.asList("decode", 2, false)));
    assertThat(p.getStringList("validValues", List.of("x"))).containsExactly("x");
    assertThat(p.errors()).singleElement().asString()
        .startsWith("parameter 'validValues' must be a list of strings, found a number ('2') at"
            + " [1]");
    Parameters text = Parameters.of(Map.of("validValues", List.of("decode", "2")));
    assertThat(text.getStringList("validValues", List.of())).containsExactly("decode", "2");
    assertThat(text.errors()).isEmpty();
  }

  @Test
  void aSingleStringForAListOfStringsIsOneErrorShowingTheList() {
    // upstream decodes the parameter into a []string field, and a JSON string is refused there
    Parameters p = Parameters.of(Map.of("validValues", "decode"));
    assertThat(p.getStringList("validValues", List.of("x"))).containsExactly("x");
    assertThat(p.errors()).containsExactly("parameter 'validValues' must be a list of strings,"
        + " got a single string 'decode' (write a one-item list: ['decode'])");
  }
}
