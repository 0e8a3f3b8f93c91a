package io.epp4j.testkit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.platform.engine.discovery.DiscoverySelectors.selectMethod;

import io.epp4j.api.Plugin;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.platform.engine.TestExecutionResult;
import org.junit.platform.testkit.engine.EngineExecutionResults;
import org.junit.platform.testkit.engine.EngineTestKit;

/** What {@link PluginContract} does with the plugins a test created, once the test is over. */
class PluginContractMetaTest {
  /** Closes of {@link Recording} plugins, in order, by name. */
  static final List<String> CLOSED = new CopyOnWriteArrayList<>();

  /** A plugin that notes its close and then throws, when told to. */
  static final class Recording implements Plugin {
    String name = "?";
    boolean fails;

    @Override
    public void close() {
      CLOSED.add(name);
      if (fails) {
        throw new IllegalStateException("close of " + name + " failed");
      }
    }
  }

  @Tag(ContractRuns.FIXTURE_TAG)
  static class ThreePlugins extends PluginContract<Recording> {
    @Override
    protected Recording createPlugin() {
      return new Recording();
    }

    @Test
    void createsThree() {
      String[] names = {"a", "b", "c"};
      for (String n : names) {
        Recording r = plugin();
        r.name = n;
        r.fails = !n.equals("c"); // a and b throw; c, after them, must still be closed
      }
    }
  }

  @Test
  void aCloseThatThrowsLeavesNoOtherPluginOpenAndTheFailureIsReported() {
    // before, the first close that threw ended the loop: c was never closed
    CLOSED.clear();
    EngineExecutionResults results = EngineTestKit.engine("junit-jupiter")
        .selectors(selectMethod(ThreePlugins.class, "createsThree")).execute();
    assertThat(CLOSED).containsExactly("a", "b", "c");
    TestExecutionResult r = results.testEvents().finished().list().get(0)
        .getRequiredPayload(TestExecutionResult.class);
    assertThat(r.getStatus()).isEqualTo(TestExecutionResult.Status.FAILED);
    Throwable t = r.getThrowable().orElseThrow();
    assertThat(t).hasMessage("close of a failed");
    assertThat(t.getSuppressed()).extracting(Throwable::getMessage)
        .containsExactly("close of b failed");
  }
}
