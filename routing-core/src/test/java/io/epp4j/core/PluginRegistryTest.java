package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.PluginProvider;
import io.epp4j.api.Result;
import java.util.List;
import org.junit.jupiter.api.Test;

class PluginRegistryTest {
  static class A implements PluginProvider {
    @Override public String type() { return "dup-type"; }
    @Override public Result<? extends Plugin> create(PluginContext c, Parameters p) { return Result.ok(new MaxScorePicker(1)); }
  }

  static class B extends A {}

  static class HighPriority extends A {
    @Override public int priority() { return 10; }
  }

  static class BadName extends A {
    @Override public String type() { return "Bad_Name"; }
  }

  @Test
  void duplicateTypesResolveDeterministicallyAndAreReported() {
    PluginRegistry r1 = PluginRegistry.of(List.of(new B(), new A()));
    PluginRegistry r2 = PluginRegistry.of(List.of(new A(), new B()));
    assertThat(r1.provider("dup-type")).isInstanceOf(A.class).isNotInstanceOf(B.class);
    assertThat(r2.provider("dup-type").getClass()).isEqualTo(r1.provider("dup-type").getClass());
    assertThat(r1.conflicts()).singleElement().satisfies(c -> assertThat(c).contains("dup-type").contains("2 providers"));
  }

  @Test
  void higherPriorityWins() {
    PluginRegistry r = PluginRegistry.of(List.of(new A(), new HighPriority()));
    assertThat(r.provider("dup-type")).isInstanceOf(HighPriority.class);
  }

  @Test
  void invalidTypeNamesAreIgnoredAndReported() {
    PluginRegistry r = PluginRegistry.of(List.of(new BadName()));
    assertThat(r.types()).isEmpty();
    assertThat(r.conflicts()).singleElement().satisfies(c -> assertThat(c).contains("Bad_Name"));
  }

  @Test
  void serviceLoaderFindsCorePlugins() {
    PluginRegistry r = PluginRegistry.fromServiceLoader(getClass().getClassLoader());
    assertThat(r.types()).contains("max-score-picker", "single-profile-handler");
  }

  @Test
  void throwingProviderBecomesAnError() {
    PluginProvider boom = new PluginProvider() {
      @Override public String type() { return "boom"; }
      @Override public Result<? extends Plugin> create(PluginContext c, Parameters p) { throw new IllegalStateException("x"); }
    };
    Result<? extends Plugin> r = PluginRegistry.of(List.of(boom)).create("boom", null, Parameters.empty());
    assertThat(r.errors()).singleElement().satisfies(e -> assertThat(e).contains("provider of 'boom' failed"));
  }
}
