package io.epp4j.testkit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.platform.engine.discovery.DiscoverySelectors.selectClass;

import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import org.junit.platform.engine.TestExecutionResult;
import org.junit.platform.engine.support.descriptor.MethodSource;
import org.junit.platform.testkit.engine.EngineExecutionResults;
import org.junit.platform.testkit.engine.EngineTestKit;
import org.junit.platform.testkit.engine.Event;

/**
 * Runs a contract subclass (a fixture: a correct or a deliberately broken plugin) on the Jupiter
 * engine, apart from the surrounding test run, and reports how each inherited contract test
 * ended. The fixtures carry the tag {@value #FIXTURE_TAG}, which surefire excludes, so they run
 * only from here.
 */
final class ContractRuns {
  static final String FIXTURE_TAG = "contract-fixture";

  private ContractRuns() {}

  /** How one contract test of a fixture ended. */
  record Outcome(String status, String message) {
    @Override
    public String toString() {
      return message.isEmpty() ? status : status + " (" + message + ")";
    }
  }

  /** Every contract test of {@code fixture}, by method name, with how it ended. */
  static Map<String, Outcome> run(Class<?> fixture) {
    EngineExecutionResults results = EngineTestKit.engine("junit-jupiter")
        .selectors(selectClass(fixture)).execute();
    assertThat(results.containerEvents().failed().count())
        .as("%s: failed containers %s", fixture.getSimpleName(),
            results.containerEvents().failed().list())
        .isZero();
    Map<String, Outcome> out = new TreeMap<>();
    for (Event e : results.testEvents().finished().list()) {
      TestExecutionResult r = e.getRequiredPayload(TestExecutionResult.class);
      String message = r.getThrowable()
          .map(t -> t.getClass().getSimpleName() + ": " + firstLine(t.getMessage()))
          .orElse("");
      out.put(method(e), new Outcome(r.getStatus().name(), message));
    }
    for (Event e : results.testEvents().skipped().list()) {
      out.put(method(e), new Outcome("SKIPPED", e.getPayload(String.class).orElse("")));
    }
    return out;
  }

  /**
   * Runs {@code fixture} and requires that exactly {@code failing} of its contract tests fail
   * and all the others pass (or are skipped, or aborted by an assumption): the broken rule is caught by the check meant for
   * it, and the other checks do not fail for a rule the plugin keeps.
   */
  static Map<String, Outcome> assertFailsExactly(Class<?> fixture, String... failing) {
    Map<String, Outcome> outcomes = run(fixture);
    assertThat(outcomes).as("%s ran no contract test", fixture.getSimpleName()).isNotEmpty();
    Set<String> failed = failed(outcomes);
    assertThat(failed).as("%s: contract tests that failed; all outcomes: %s",
        fixture.getSimpleName(), outcomes).containsExactlyInAnyOrder(failing);
    return outcomes;
  }

  /** Runs of a race fixture before its race counts as missed: see {@link #assertRaceCaught}. */
  static final int RACE_RUNS = 3;

  /**
   * {@link #assertFailsExactly} for a fixture whose only fault is a race: a run shows it only if
   * calls overlap, which a heavily loaded machine makes rarer (one run in three on 2 cores at a
   * load average of 4–5). It must show in one of {@value #RACE_RUNS} runs, and no run may fail
   * any other check.
   */
  static void assertRaceCaught(Class<?> fixture, String... failing) {
    Set<String> expected = Set.of(failing);
    Map<String, Outcome> outcomes = Map.of();
    for (int run = 0; run < RACE_RUNS; run++) {
      outcomes = run(fixture);
      assertThat(outcomes).as("%s ran no contract test", fixture.getSimpleName()).isNotEmpty();
      Set<String> failed = failed(outcomes);
      assertThat(expected).as("%s: contract tests that failed in run %d; all outcomes: %s",
          fixture.getSimpleName(), run + 1, outcomes).containsAll(failed);
      if (failed.equals(expected)) {
        return;
      }
    }
    throw new AssertionError(fixture.getSimpleName() + ": the race was missed in " + RACE_RUNS
        + " runs; expected failing " + expected + "; last outcomes: " + outcomes);
  }

  /** What the concurrency check's message says when a forced interleaving showed the fault. */
  static final String FORCED = PluginContract.FORCED;

  /**
   * {@link #assertFailsExactly} for a fixture whose fault shows when another thread makes a whole
   * call in the middle of one of its calls (a shared scratch buffer, a returned list that later
   * calls refill): the concurrency check forces that interleaving rather than waiting for the
   * threads to produce it, so one run must catch it, and say so.
   */
  static void assertCaughtByForcedInterleaving(Class<?> fixture, String check) {
    Map<String, Outcome> outcomes = assertFailsExactly(fixture, check);
    assertThat(outcomes.get(check).message())
        .as("%s: how %s failed", fixture.getSimpleName(), check).contains(FORCED);
  }

  /** Runs a correct fixture: every contract test passes (a skipped one is allowed by name). */
  static void assertPasses(Class<?> fixture, String... mayBeSkipped) {
    Map<String, Outcome> outcomes = run(fixture);
    assertThat(outcomes).as("%s ran no contract test", fixture.getSimpleName()).isNotEmpty();
    Set<String> skippable = Set.of(mayBeSkipped);
    outcomes.forEach((m, o) -> assertThat(o.status().equals("SUCCESSFUL")
        || skippable.contains(m) && (o.status().equals("SKIPPED") || o.status().equals("ABORTED")))
        .as("%s.%s: %s; all outcomes: %s", fixture.getSimpleName(), m, o, outcomes).isTrue());
  }

  /** The contract tests that failed, by method name. */
  private static Set<String> failed(Map<String, Outcome> outcomes) {
    Set<String> failed = new TreeSet<>();
    outcomes.forEach((m, o) -> {
      if (o.status().equals("FAILED")) {
        failed.add(m);
      }
    });
    return failed;
  }

  private static String method(Event e) {
    return e.getTestDescriptor().getSource()
        .filter(MethodSource.class::isInstance)
        .map(s -> ((MethodSource) s).getMethodName())
        .orElse(e.getTestDescriptor().getDisplayName());
  }

  private static String firstLine(String s) {
    if (s == null) {
      return "";
    }
    String t = s.strip();
    int nl = t.indexOf('\n');
    return nl < 0 ? t : t.substring(0, nl) + " ...";
  }
}
