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
import io.epp4j.api.PluginProvider;
import io.epp4j.api.PoolListener;
import io.epp4j.api.Result;
import io.epp4j.api.Scorer;
import io.epp4j.api.Ticker;
import io.epp4j.core.PluginRegistry;
import java.lang.reflect.Modifier;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.ServiceLoader;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.atomic.AtomicReference;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/** Checks every built-in type for the behaviour the router relies on. */
class PluginContractTest {

  /** The providers of this module, as ServiceLoader finds them: the list is the services file. */
  static List<PluginProvider> ours() {
    List<PluginProvider> ours = new ArrayList<>();
    for (PluginProvider p : ServiceLoader.load(PluginProvider.class)) {
      if (p.getClass().getPackageName().equals(PluginContractTest.class.getPackageName())) {
        ours.add(p);
      }
    }
    assertThat(ours).as("built-in providers found by ServiceLoader").isNotEmpty();
    return ours;
  }

  static Stream<String> types() {
    Set<String> types = new TreeSet<>();
    ours().forEach(p -> types.add(p.type()));
    return types.stream();
  }

  @Test
  void everyProviderClassIsRegisteredForServiceLoader() throws Exception {
    Path classes = Path.of(PluginContractTest.class.getProtectionDomain().getCodeSource()
        .getLocation().toURI()).resolveSibling("classes")
        .resolve(PluginContractTest.class.getPackageName().replace('.', '/'));
    Set<String> registered = new TreeSet<>();
    ours().forEach(p -> registered.add(p.getClass().getName()));
    Set<String> declared = new TreeSet<>();
    try (Stream<Path> files = Files.list(classes)) {
      for (Path f : (Iterable<Path>) files::iterator) {
        String file = f.getFileName().toString();
        if (!file.endsWith(".class")) {
          continue;
        }
        Class<?> c = Class.forName(PluginContractTest.class.getPackageName() + "."
            + file.substring(0, file.length() - ".class".length()));
        if (PluginProvider.class.isAssignableFrom(c) && !Modifier.isAbstract(c.getModifiers())) {
          declared.add(c.getName());
        }
      }
    }
    assertThat(declared).as("provider classes in " + classes).isNotEmpty();
    assertThat(registered).as("META-INF/services/io.epp4j.api.PluginProvider")
        .containsExactlyInAnyOrderElementsOf(declared);
  }

  @Test
  void everyTypeHasASectionInThePluginDocs() throws Exception {
    List<String> headings = new ArrayList<>();
    for (String line : Files.readAllLines(Path.of("..", "docs", "plugins.md"))) {
      if (line.startsWith("#")) {
        headings.add(line);
      }
    }
    for (String type : types().toList()) {
      assertThat(headings).as("a heading of docs/plugins.md naming " + type)
          .anySatisfy(h -> assertThat(h).containsPattern("(^|[^a-z-])" + type + "($|[^a-z-])"));
    }
  }

  static Plugin create(String type) {
    PluginContext ctx = new PluginContext() {
      @Override public String pluginName() { return type; }
      @Override public Ticker ticker() { return () -> 0L; }
      @Override public <T> Optional<T> service(Class<T> t) { return Optional.empty(); }
    };
    Parameters params = Parameters.empty();
    if (type.equals("decision-tree-filter")) {
      // a tree needs the filters it names, defined before it
      ctx = BuiltinPluginContractsTest.treeContext();
      params = Parameters.of(BuiltinPluginContractsTest.TREE);
    } else if (type.equals("header-label-affinity-scorer")) {
      // both are required, as upstream
      params = Parameters.of(Map.of("headerName", "x-session-token", "labelKey", "zone"));
    } else if (type.equals("endpoint-attribute-filter")) {
      // the attribute must be one a core-metrics-extractor defined before it publishes
      ctx = EndpointAttributePluginsTest.context(type);
      params = Parameters.of(Map.of("attribute", "queue", "algorithm", Map.of("type",
          "threshold", "threshold", Map.of("operator", "LessThan", "value", 10))));
    } else if (type.equals("endpoint-attribute-scorer")) {
      ctx = EndpointAttributePluginsTest.context(type);
      params = Parameters.of(Map.of("attributeKey", "queue",
          "algorithm", Map.of("type", "linear_lower_is_better")));
    } else if (type.equals("by-label")) {
      // llm-d's filter has no default label
      params = Parameters.of(Map.of("label", "pool", "validValues", List.of("a")));
    } else if (type.equals("p2p-source-producer")) {
      // it reads the file's prefix-match producer
      Plugin producer = PluginRegistry.fromServiceLoader().create("approx-prefix-cache-producer",
          io.epp4j.testkit.ContractFixtures.context("approx-prefix-cache-producer"),
          Parameters.empty()).value();
      ctx = io.epp4j.testkit.ContractFixtures.context(type,
          Map.of("approx-prefix-cache-producer", producer));
    } else if (type.equals("session-id-producer")) {
      // llm-d's producer has no default source
      params = Parameters.of(Map.of("headerName", "x-session-id"));
    }
    Result<? extends Plugin> r = PluginRegistry.fromServiceLoader().create(type, ctx, params);
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
