package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.Filter;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Picker;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.PoolListener;
import io.epp4j.api.Result;
import io.epp4j.api.Scorer;
import io.epp4j.api.Ticker;
import io.epp4j.core.PluginRegistry;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.ServiceLoader;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.atomic.AtomicReference;
import java.util.stream.Stream;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/** Checks every built-in type for the behaviour the router relies on. */
class PluginContractTest {

  static Stream<String> types() {
    Set<String> ours = new TreeSet<>();
    for (io.epp4j.api.PluginProvider p : ServiceLoader.load(io.epp4j.api.PluginProvider.class)) {
      if (p instanceof BuiltinPluginProviders.Base) {
        ours.add(p.type());
      }
    }
    assertThat(ours).hasSize(22);
    return ours.stream();
  }

  static Plugin create(String type) {
    PluginContext ctx = new PluginContext() {
      @Override public String pluginName() { return type; }
      @Override public Ticker ticker() { return () -> 0L; }
      @Override public <T> Optional<T> service(Class<T> t) { return Optional.empty(); }
    };
    Result<? extends Plugin> r = PluginRegistry.fromServiceLoader().create(type, ctx, Parameters.empty());
    assertThat(r.errors()).as(type).isEmpty();
    return r.value();
  }

  static final InferenceRequest REQ = InferenceRequest.builder().model("m")
      .tokenIds(new int[100]).sessionKey("s").build();

  @ParameterizedTest
  @MethodSource("types")
  void emptyCandidatesAndUnknownMetricsAreHandled(String type) {
    Plugin plugin = create(type);
    List<Candidate> pool = TestCandidates.pool(3);
    if (plugin instanceof Scorer s) {
      s.score(REQ, TestCandidates.state(), List.of(), new double[0]);
      double[] scores = new double[3];
      s.score(REQ, TestCandidates.state(), pool, scores);
      for (double v : scores) {
        assertThat(v).as(type).isBetween(0.0, 1.0);
      }
    }
    if (plugin instanceof Filter f) {
      assertThat(f.filter(REQ, TestCandidates.state(), List.of())).isEmpty();
    }
    if (plugin instanceof Picker p) {
      assertThat(p.pick(REQ, TestCandidates.state(), List.of(), new double[0])).isEmpty();
      List<Candidate> picked = p.pick(REQ, TestCandidates.state(), pool, new double[] {1, 1, 1});
      assertThat(picked).as(type).hasSize(1);
      assertThat(pool).contains(picked.get(0));
    }
    if (plugin instanceof PoolListener l) {
      l.onEndpointRemoved(pool.get(0).endpoint());
      l.onEndpointRemoved(pool.get(0).endpoint()); // twice is harmless
    }
    plugin.close();
  }

  @ParameterizedTest
  @MethodSource("types")
  void concurrentUseDoesNotFail(String type) throws Exception {
    Plugin plugin = create(type);
    List<Candidate> pool = TestCandidates.pool(4);
    AtomicReference<Throwable> failure = new AtomicReference<>();
    List<Thread> threads = new ArrayList<>();
    for (int t = 0; t < 4; t++) {
      final int seed = t;
      Thread th = new Thread(() -> {
        try {
          for (int i = 0; i < 500; i++) {
            CycleState st = TestCandidates.state(0, seed * 1000L + i);
            if (plugin instanceof Scorer s) {
              s.score(REQ, st, pool, new double[4]);
            }
            if (plugin instanceof Filter f) {
              f.filter(REQ, st, pool);
            }
            if (plugin instanceof Picker p && p.pick(REQ, st, pool, new double[4]).isEmpty()) {
              throw new AssertionError(type + " picked nothing");
            }
          }
        } catch (Throwable e) {
          failure.compareAndSet(null, e);
        }
      });
      threads.add(th);
      th.start();
    }
    for (Thread th : threads) {
      th.join(30_000);
      assertThat(th.isAlive()).as(type + " thread finished").isFalse();
    }
    assertThat(failure.get()).as(type).isNull();
  }
}
