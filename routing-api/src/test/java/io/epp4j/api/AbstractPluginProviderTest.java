package io.epp4j.api;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.Map;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;

class AbstractPluginProviderTest {
  static final PluginContext CONTEXT = new PluginContext() {
    @Override
    public String pluginName() {
      return "p";
    }

    @Override
    public Ticker ticker() {
      return () -> 0L;
    }

    @Override
    public <T> Optional<T> service(Class<T> type) {
      return Optional.empty();
    }
  };

  /** Counts closes, so a test sees whether a half-built plugin was released. */
  static final class Counting implements Plugin {
    final AtomicInteger closes = new AtomicInteger();

    @Override
    public void close() {
      closes.incrementAndGet();
    }
  }

  static final class SizeProvider extends AbstractPluginProvider {
    final Counting built = new Counting();

    SizeProvider() {
      super("size-plugin");
    }

    @Override
    protected Plugin build(PluginContext context, Parameters p) {
      p.getInt("size", 1, 1, 10);
      p.getBoolean("fast", false);
      if (p.has("explode")) {
        throw new IllegalArgumentException("size and explode cannot be combined");
      }
      return built;
    }
  }

  @Test
  void validParametersGiveThePluginUnclosed() {
    SizeProvider provider = new SizeProvider();
    Result<? extends Plugin> r = provider.create(CONTEXT, Parameters.of(Map.of("size", 3)));
    assertThat(r.isOk()).isTrue();
    assertThat(r.value()).isSameAs(provider.built);
    assertThat(provider.built.closes).hasValue(0);
    assertThat(provider.type()).isEqualTo("size-plugin");
  }

  @Test
  void everyParameterErrorIsReportedAndTheHalfBuiltPluginClosedOnce() {
    SizeProvider provider = new SizeProvider();
    Result<? extends Plugin> r = provider.create(CONTEXT,
        Parameters.of(Map.of("size", 99, "fast", "yes")));
    assertThat(r.isOk()).isFalse();
    assertThat(r.errors()).hasSize(2)
        .anySatisfy(e -> assertThat(e).contains("'size'"))
        .anySatisfy(e -> assertThat(e).contains("'fast'"));
    assertThat(provider.built.closes).hasValue(1);
  }

  @Test
  void anIllegalArgumentBecomesTheErrorUnlessParameterErrorsNameTheProblemBetter() {
    SizeProvider alone = new SizeProvider();
    assertThat(alone.create(CONTEXT, Parameters.of(Map.of("explode", true))).errors())
        .containsExactly("size and explode cannot be combined");
    SizeProvider withErrors = new SizeProvider();
    assertThat(withErrors.create(CONTEXT, Parameters.of(Map.of("explode", true, "size", 0)))
        .errors()).singleElement().asString().contains("'size'");
  }

  @Test
  void checkedResultClosesAnOkPluginWhenParametersRecordedErrors() {
    Counting plugin = new Counting();
    Parameters p = Parameters.of(Map.of("size", 0));
    p.getInt("size", 1, 1, 10);
    Result<Counting> r = AbstractPluginProvider.checked(p, Result.ok(plugin));
    assertThat(r.errors()).singleElement().asString().contains("'size'");
    assertThat(plugin.closes).hasValue(1);

    Result<Counting> failed = Result.error("could not connect");
    assertThat(AbstractPluginProvider.checked(p, failed)).isSameAs(failed);
    Counting clean = new Counting();
    assertThat(AbstractPluginProvider.checked(Parameters.empty(), Result.ok(clean)).value())
        .isSameAs(clean);
    assertThat(clean.closes).hasValue(0);
  }
}
