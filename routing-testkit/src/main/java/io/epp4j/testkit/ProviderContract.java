package io.epp4j.testkit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatCode;

import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.PluginProvider;
import io.epp4j.api.Result;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.ServiceConfigurationError;
import java.util.ServiceLoader;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

/**
 * Contract of a {@link PluginProvider}: extend it in a JUnit 5 test and implement
 * {@link #provider()}; override {@link #validParameters()} when the plugin needs some and
 * {@link #badParameters()} to list values it must reject. Checks the type name, that valid
 * parameters give a plugin, that unknown parameter names are left unread (the config loader
 * reports them from {@link Parameters#unreadNames()}), that each bad value is rejected with a
 * message naming its parameter, that values of the wrong type give errors naming the parameter
 * rather than exceptions or silent defaults (see {@link #mustReject}), and that
 * {@link ServiceLoader} finds the provider.
 */
public abstract class ProviderContract {
  private static final Pattern KEBAB = Pattern.compile("[a-z0-9]+(-[a-z0-9]+)*");
  private static final String UNKNOWN = "noSuchParameterOfThisPlugin";

  /** The provider under test. */
  protected abstract PluginProvider provider();

  /** Parameters that make a working plugin; empty by default. */
  protected Map<String, ?> validParameters() {
    return Map.of();
  }

  /**
   * Parameter sets the provider must reject, each keyed by the parameter name its error must
   * mention (e.g. {@code "blockSizeTokens" -> {blockSizeTokens: 0}}). Empty by default, which
   * skips that test.
   */
  protected Map<String, Map<String, ?>> badParameters() {
    return Map.of();
  }

  /**
   * The context plugins are created in; override it for a plugin that refers to others defined
   * before it (see {@link ContractFixtures#context(String, java.util.Map)}).
   */
  protected PluginContext context() {
    return ContractFixtures.context(provider().type());
  }

  private Result<? extends Plugin> create(Parameters p) {
    return provider().create(context(), p);
  }

  private static void closeIfOk(Result<? extends Plugin> r) {
    if (r.isOk()) {
      r.value().close();
    }
  }

  @Test
  void typeIsLowerKebabCase() {
    assertThat(provider().type()).matches(KEBAB);
  }

  /**
   * Loads the providers as the router does (the thread's context class loader): a provider that
   * cannot be loaded is skipped, so another jar's broken provider does not fail this check, and
   * when this provider is not found the loader's problems are in the message (one of them may be
   * why this provider could not be made, e.g. its public no-argument constructor throws).
   */
  @Test
  void serviceLoaderFindsTheProvider() {
    Class<?> wanted = provider().getClass();
    boolean found = false;
    List<String> problems = new ArrayList<>();
    Iterator<PluginProvider> it = ServiceLoader.load(PluginProvider.class).iterator();
    while (true) {
      try {
        if (!it.hasNext()) {
          break;
        }
        found |= it.next().getClass() == wanted;
      } catch (ServiceConfigurationError e) {
        problems.add(e.getMessage()
            + (e.getCause() == null ? "" : " (" + e.getCause() + ")"));
      }
    }
    assertThat(found).as("%s listed in META-INF/services/%s and made by the service loader;"
        + " the loader's problems: %s", wanted.getName(), PluginProvider.class.getName(),
        problems).isTrue();
  }

  @Test
  void validParametersCreateAPlugin() {
    Parameters p = Parameters.of(validParameters());
    Result<? extends Plugin> r = create(p);
    assertThat(r.errors()).as("errors for %s", validParameters()).isEmpty();
    assertThat(p.errors()).isEmpty();
    assertThatCode(() -> {
      r.value().close();
      r.value().close();
    }).doesNotThrowAnyException();
  }

  @Test
  void unknownParametersAreLeftForTheLoaderToReport() {
    Map<String, Object> values = new LinkedHashMap<>(validParameters());
    values.put(UNKNOWN, 1);
    Parameters p = Parameters.of(values);
    Result<? extends Plugin> r = create(p);
    closeIfOk(r);
    assertThat(p.unreadNames()).as("names the provider did not read").containsExactly(UNKNOWN);
  }

  /**
   * Whether {@code error} names parameter {@code name}: quoted whole ({@code 'k'}), or as the
   * start of a path into it ({@code 'k.x'}, {@code 'k[0]'}); {@code 'kvCacheThreshold'} does not
   * name {@code k}.
   */
  static boolean namesParameter(String error, String name) {
    String q = "'" + name;
    return error.contains(q + "'") || error.contains(q + ".") || error.contains(q + "[");
  }

  @Test
  void badValuesAreRejectedNamingTheParameter() {
    Map<String, Map<String, ?>> bad = badParameters();
    Assumptions.assumeFalse(bad.isEmpty(), "no bad parameters listed");
    bad.forEach((name, values) -> {
      Result<? extends Plugin> r = create(Parameters.of(values));
      closeIfOk(r);
      assertThat(r.isOk()).as("%s accepted", values).isFalse();
      assertThat(r.errors()).as("errors for %s, one naming '%s'", values, name)
          .anyMatch(e -> namesParameter(e, name));
    });
  }

  /**
   * Whether {@code wrong}, given for parameter {@code name} in place of {@code valid} (its value
   * in {@link #validParameters()}), must be rejected: a value of a kind that no reading of the
   * parameter can take. For a number or a boolean: a string that is not one, a list or an object;
   * for a string or a list: an object (a string may stand for a one-element list and the other
   * way round); for an object: a list. Override it for a parameter that takes several kinds.
   */
  protected boolean mustReject(String name, Object valid, Object wrong) {
    if (valid instanceof Number || valid instanceof Boolean) {
      return wrong instanceof List || wrong instanceof Map
          || wrong instanceof String w && !w.equals("true") && !w.equals("false")
              && !w.matches("-?[0-9.eE+]+");
    }
    if (valid instanceof String || valid instanceof List) {
      return wrong instanceof Map;
    }
    if (valid instanceof Map) {
      return wrong instanceof List;
    }
    return false;
  }

  /**
   * Each parameter of {@link #validParameters()} in turn set to a string, a list, an object and
   * -1: no call throws, and a value {@link #mustReject} names is rejected with an error naming the
   * parameter (not silently replaced by a default).
   */
  @Test
  void valuesOfTheWrongTypeGiveErrorsNotExceptions() {
    validParameters().forEach((name, valid) -> {
      for (Object wrong : List.<Object>of("not-a-number", List.of(1), Map.of("x", 1), -1)) {
        Map<String, Object> values = new LinkedHashMap<>(validParameters());
        values.put(name, wrong);
        List<Result<? extends Plugin>> result = new ArrayList<>(1);
        assertThatCode(() -> result.add(create(Parameters.of(values))))
            .as("%s = %s", name, wrong).doesNotThrowAnyException();
        Result<? extends Plugin> r = result.get(0);
        closeIfOk(r);
        if (mustReject(name, valid, wrong)) {
          assertThat(r.isOk()).as("%s = %s (valid: %s) accepted", name, wrong, valid).isFalse();
          assertThat(r.errors()).as("errors for %s = %s, one naming '%s'", name, wrong, name)
              .anyMatch(e -> namesParameter(e, name));
        }
      }
    });
  }
}
