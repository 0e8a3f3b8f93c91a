package io.epp4j.core;

import static io.epp4j.core.TestPlugins.ep;
import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.AttributeKey;
import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.PluginProvider;
import io.epp4j.api.PoolListener;
import io.epp4j.api.RequestListener;
import io.epp4j.api.Result;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Scorer;
import io.epp4j.api.Usage;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.BooleanSupplier;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class ReconfigureTest {
  static final InferenceRequest REQ =
      InferenceRequest.builder().model("m").prompt("hello").maxTokens(10).build();
  @SuppressWarnings("unchecked")
  static final AttributeKey<List<String>> TAGS =
      AttributeKey.of("test.tags", (Class<List<String>>) (Class<?>) List.class);

  /**
   * A scorer that writes its tag into the cycle state, listens to requests and the pool, and
   * counts what it saw, so a request run by plugins of two configurations is detectable.
   */
  static class TagScorer implements Scorer, RequestListener, PoolListener {
    final String tag;
    final AtomicInteger closes = new AtomicInteger();
    final AtomicLong scored = new AtomicLong();
    final AtomicInteger mixed = new AtomicInteger();
    final AtomicInteger unannounced = new AtomicInteger();
    final AtomicInteger usedClosed = new AtomicInteger();
    final Set<String> pool = ConcurrentHashMap.newKeySet();
    volatile boolean closed;

    TagScorer(String tag) {
      this.tag = tag;
    }

    @Override
    public void score(InferenceRequest r, CycleState state, List<Candidate> cs, double[] scores) {
      if (closed) {
        usedClosed.incrementAndGet();
      }
      for (Candidate c : cs) {
        if (!pool.contains(c.id())) {
          unannounced.incrementAndGet(); // routed before hearing the whole pool
        }
      }
      List<String> tags = state.get(TAGS);
      if (tags == null) {
        tags = new ArrayList<>();
        state.put(TAGS, tags);
      }
      tags.add(tag);
      scored.incrementAndGet();
    }

    @Override
    public void afterRouting(InferenceRequest r, CycleState state, RoutingDecision d) {
      List<String> tags = state.get(TAGS);
      // one letter per configuration: a request sees a1,a2 or b1,b2, never a mix
      if (tag.length() == 2 && (tags == null || tags.size() != 3
          || tags.get(0).charAt(0) != tags.get(1).charAt(0) || tags.get(0).charAt(0) != tag.charAt(0)
          || !tags.get(2).equals("shared"))) {
        mixed.incrementAndGet();
      }
    }

    @Override
    public void onEndpointAdded(Endpoint e) {
      pool.add(e.id());
    }

    @Override
    public void onEndpointRemoved(Endpoint e) {
      pool.remove(e.id());
    }

    @Override
    public void close() {
      closed = true;
      closes.incrementAndGet();
    }
  }

  /** Creates tag scorers and remembers every instance. */
  static final class TagProvider implements PluginProvider {
    final ConcurrentLinkedQueue<TagScorer> created = new ConcurrentLinkedQueue<>();

    @Override
    public String type() {
      return "tag-scorer";
    }

    @Override
    public Result<? extends Plugin> create(PluginContext context, Parameters p) {
      String tag = p.getString("tag", null);
      if (tag == null) {
        p.error("tag", "is required");
        return Result.errors(p.errors());
      }
      TagScorer s = new TagScorer(tag);
      created.add(s);
      return Result.ok(s);
    }

    TagScorer named(String tag) {
      TagScorer last = null;
      for (TagScorer s : created) {
        if (s.tag.equals(tag)) {
          last = s;
        }
      }
      return last;
    }
  }

  static String config(String letter) {
    return """
        plugins:
        - name: first
          type: tag-scorer
          parameters: {tag: %s1}
        - name: second
          type: tag-scorer
          parameters: {tag: %s2}
        - name: shared
          type: tag-scorer
          parameters: {tag: shared}
        - type: max-score-picker
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: first
          - pluginRef: second
          - pluginRef: shared
          - pluginRef: max-score-picker
        """.formatted(letter, letter);
  }

  private static Router router(TagProvider tags, Duration closeDelay) {
    return Router.builder()
        .registry(TestPlugins.registry().with(tags))
        .configYaml(config("a"), "a.yaml")
        .retiredPluginCloseDelay(closeDelay)
        .endpoints(List.of(ep("10.0.0.1:80", Map.of()), ep("10.0.0.2:80", Map.of())))
        .build();
  }

  private static void await(BooleanSupplier condition, String what) throws InterruptedException {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    while (!condition.getAsBoolean()) {
      assertThat(System.nanoTime() - deadline).as("timed out waiting until " + what).isNegative();
      Thread.sleep(5);
    }
  }

  @Test
  void reloadUnderEightRoutingThreadsIsNeverHalfAppliedAndClosesEachDroppedPluginOnce()
      throws Exception {
    TagProvider tags = new TagProvider();
    // the grace must outlast the longest stall of a route: on a loaded two-core machine a route
    // was seen to take 660 ms, so 2 s here (5 s by default)
    Router router = router(tags, Duration.ofSeconds(2));
    TagScorer shared = tags.named("shared");
    AtomicBoolean stop = new AtomicBoolean();
    AtomicLong routed = new AtomicLong();
    ExecutorService pool = Executors.newFixedThreadPool(8);
    List<Future<?>> workers = new ArrayList<>();
    for (int t = 0; t < 8; t++) {
      int seed = t;
      workers.add(pool.submit(() -> {
        for (int i = 0; i < 200_000 && !stop.get(); i++) {
          RoutingDecision d = router.route(REQ);
          assertThat(d.isRouted()).as("%s", d).isTrue();
          routed.incrementAndGet();
          if ((i + seed) % 3 == 0) {
            d.onFailure(new RuntimeException("upstream"));
          } else {
            d.onComplete(Usage.NONE);
          }
        }
      }));
    }
    int reloads = 200;
    try {
      // reloads under traffic: on a busy machine the 200 could all be done before a routing
      // thread first ran, leaving nothing tested and routed at zero
      await(() -> routed.get() > 0, "a routing thread routed");
      for (int i = 0; i < reloads; i++) {
        Result<RouterConfig> r = router.reconfigure(config(i % 2 == 0 ? "b" : "a"), "reload");
        assertThat(r.isOk()).as("%s", r).isTrue();
      }
    } finally {
      stop.set(true);
      pool.shutdown();
      assertThat(pool.awaitTermination(30, TimeUnit.SECONDS)).isTrue();
    }
    for (Future<?> f : workers) {
      f.get(1, TimeUnit.SECONDS); // rethrows a worker's assertion
    }
    assertThat(routed.get()).isPositive();
    assertThat(tags.created).hasSize(1 + 2 + 2 * reloads); // shared once, first/second each time
    assertThat(tags.created.stream().mapToInt(s -> s.mixed.get()).sum())
        .as("requests that saw plugins of two configurations").isZero();
    assertThat(tags.created.stream().mapToInt(s -> s.unannounced.get()).sum())
        .as("routes through a plugin that had not heard the whole pool").isZero();
    assertThat(tags.created.stream().mapToInt(s -> s.usedClosed.get()).sum())
        .as("routes through a closed plugin").isZero();
    assertThat(shared.scored.get()).as("the unchanged plugin is kept").isEqualTo(routed.get());
    assertThat(router.endpoints()).allSatisfy(c -> {
      assertThat(c.inFlightRequests()).isZero();
      assertThat(c.inFlightTokens()).isZero();
    });
    TagScorer current1 = tags.named("a1");
    await(() -> tags.created.stream()
            .filter(s -> s != shared && s != current1 && s != tags.named("a2"))
            .allMatch(s -> s.closes.get() == 1),
        "every dropped plugin is closed");
    assertThat(shared.closes.get()).isZero();
    router.close();
    assertThat(tags.created).allSatisfy(s -> assertThat(s.closes.get()).as(s.tag).isEqualTo(1));
  }

  @Test
  void aBadConfigIsAnErrorAndLeavesTheRunningOneAndItsPluginsAlone(@TempDir Path dir)
      throws Exception {
    TagProvider tags = new TagProvider();
    try (Router router = router(tags, Duration.ZERO)) {
      RouterConfig before = router.config();
      // same shared plugin (would be kept), plus a type nobody provides
      String bad = config("b").replace("- type: max-score-picker", "- type: no-such-type");
      Result<RouterConfig> r = router.reconfigure(bad, "bad.yaml");
      assertThat(r.isOk()).isFalse();
      assertThat(r.errors()).anySatisfy(e -> assertThat(e).contains("bad.yaml", "no-such-type"));
      assertThat(router.config()).isSameAs(before);
      assertThat(tags.named("shared").closes.get()).as("kept plugin survives the failed load")
          .isZero();
      assertThat(tags.named("a1").closes.get()).isZero();
      TagScorer failedB1 = tags.named("b1");
      assertThat(failedB1.closes.get()).as("created by the failed load").isEqualTo(1);
      Result<RouterConfig> missing = router.reconfigure(dir.resolve("nope.yaml"));
      assertThat(missing.errors()).singleElement().asString().contains("nope.yaml", "cannot read");

      Path file = dir.resolve("b.yaml");
      Files.writeString(file, config("b"));
      assertThat(router.reconfigure(file).isOk()).isTrue();
      router.route(REQ).onComplete(Usage.NONE);
      assertThat(failedB1.scored.get()).isZero();
      assertThat(tags.named("b1")).isNotSameAs(failedB1);
      assertThat(tags.named("b1").scored.get()).isEqualTo(1);
      assertThat(tags.named("shared").scored.get()).as("kept through both reloads").isEqualTo(1);
      assertThat(tags.created.stream().filter(s -> s.tag.equals("shared"))).hasSize(1);
    }
  }

  @Test
  void aConfigBuiltInCodeKeepsTheSameInstancesAndClosesTheOthers() throws Exception {
    TagScorer kept = new TagScorer("kept");
    TagScorer dropped = new TagScorer("dropped");
    TagScorer added = new TagScorer("added");
    try (Router router = Router.builder()
        .profile(SchedulingProfile.builder("default").scorer(kept).scorer(dropped).build())
        .retiredPluginCloseDelay(Duration.ZERO)
        .endpoints(List.of(ep("10.0.0.1:80", Map.of())))
        .build()) {
      RoutingDecision inFlight = router.route(REQ);
      assertThat(router.endpoints().get(0).inFlightRequests()).isEqualTo(1);
      Result<RouterConfig> r = router.reconfigure(
          RouterConfig.of(SchedulingProfile.builder("default").scorer(kept).scorer(added).build()));
      assertThat(r.isOk()).isTrue();
      assertThat(added.pool).as("heard the pool before routing").containsExactly("10.0.0.1:80");
      await(() -> dropped.closes.get() == 1, "the dropped scorer is closed");
      inFlight.onComplete(Usage.NONE); // routed under the old config, released once
      inFlight.onComplete(Usage.NONE);
      assertThat(router.endpoints().get(0).inFlightRequests()).isZero();
      router.route(REQ).onComplete(Usage.NONE);
      assertThat(kept.scored.get()).isEqualTo(2);
      assertThat(added.scored.get()).isEqualTo(1);
      assertThat(dropped.scored.get()).isEqualTo(1);
      assertThat(kept.closes.get() + added.closes.get()).isZero();
    }
    assertThat(List.of(kept.closes.get(), dropped.closes.get(), added.closes.get()))
        .containsExactly(1, 1, 1);
  }

  /** A scorer that notes, in a list shared with others, when it is closed. */
  static final class OrderedClose extends TagScorer {
    private final List<String> closed;

    OrderedClose(String tag, List<String> closed) {
      super(tag);
      this.closed = closed;
    }

    @Override
    public void close() {
      super.close();
      closed.add(tag);
    }
  }

  /**
   * The router closes the plugins a reload retired (still waiting for their delay) before the
   * running ones: a plugin whose instances hand over to one another (redis-replication) would
   * otherwise see the running instance go first and the retired one take over again, only to be
   * closed next. A retired plugin a later reload took back is running, and is closed once, last.
   */
  @Test
  void closingTheRouterClosesRetiredPluginsBeforeTheRunningOnes() {
    List<String> closedInOrder = java.util.Collections.synchronizedList(new ArrayList<>());
    OrderedClose first = new OrderedClose("first", closedInOrder);
    OrderedClose second = new OrderedClose("second", closedInOrder);
    OrderedClose third = new OrderedClose("third", closedInOrder);
    Router router = Router.builder()
        .profile(SchedulingProfile.builder("default").scorer(first).scorer(second).build())
        .retiredPluginCloseDelay(Duration.ofMinutes(10))
        .endpoints(List.of(ep("10.0.0.1:80", Map.of())))
        .build();
    // first and second retire; then first is taken back while second still waits
    assertThat(router.reconfigure(RouterConfig.of(
        SchedulingProfile.builder("default").scorer(third).build())).isOk()).isTrue();
    assertThat(router.reconfigure(RouterConfig.of(
        SchedulingProfile.builder("default").scorer(third).scorer(first).build())).isOk())
        .isTrue();
    assertThat(closedInOrder).as("closed before the router").isEmpty();
    router.close();
    assertThat(closedInOrder.get(0)).as("closed first").isEqualTo("second");
    assertThat(closedInOrder).as("each closed once").containsExactlyInAnyOrder("second", "third",
        "first");
  }

  /**
   * A configuration built in code can give a reload back a plugin instance an earlier reload
   * dropped: it heard no pool change meanwhile, so it must hear then that the endpoints which
   * left since are gone, or it keeps their state for good.
   */
  @Test
  void aListenerTakenBackByAReloadHearsTheRemovalsMadeWhileItWasDropped() {
    TagScorer p = new TagScorer("p");
    TagScorer other = new TagScorer("o");
    Endpoint a = ep("10.0.0.1:80", Map.of());
    Endpoint b = ep("10.0.0.2:80", Map.of());
    Endpoint c = ep("10.0.0.3:80", Map.of());
    Router router = Router.builder()
        .profile(SchedulingProfile.builder("default").scorer(p).build())
        .retiredPluginCloseDelay(Duration.ofMinutes(10))
        .endpoints(List.of(a, b))
        .build();
    assertThat(p.pool).containsExactlyInAnyOrder(a.id(), b.id());
    assertThat(router.reconfigure(RouterConfig.of(
        SchedulingProfile.builder("default").scorer(other).build())).isOk()).isTrue();
    router.removeEndpoint(b.id());
    router.addEndpoint(c);
    assertThat(router.reconfigure(RouterConfig.of(
        SchedulingProfile.builder("default").scorer(p).build())).isOk()).isTrue();
    assertThat(p.pool).as("what the pool holds now").containsExactlyInAnyOrder(a.id(), c.id());
    router.close();
  }

  /** A scorer that counts the lifecycle calls it hears after it was closed. */
  static final class ClosingListener extends TagScorer {
    final AtomicInteger heardClosed = new AtomicInteger();

    ClosingListener(String tag) {
      super(tag);
    }

    @Override
    public void onComplete(InferenceRequest r, Endpoint e, Usage u) {
      if (closed) {
        heardClosed.incrementAndGet();
      }
    }
  }

  @Test
  void aPluginKeptByOneReloadAndDroppedByTheNextNoLongerHearsRequestsRoutedBeforeBoth()
      throws Exception {
    ClosingListener p = new ClosingListener("p");
    TagScorer other = new TagScorer("other");
    try (Router router = Router.builder()
        .profile(SchedulingProfile.builder("default").scorer(p).build())
        .retiredPluginCloseDelay(Duration.ZERO)
        .endpoints(List.of(ep("10.0.0.1:80", Map.of())))
        .build()) {
      RoutingDecision routedUnderA = router.route(REQ);
      // B keeps p; C drops it, which closes it
      assertThat(router.reconfigure(RouterConfig.of(
          SchedulingProfile.builder("default").scorer(p).scorer(other).build())).isOk()).isTrue();
      assertThat(router.reconfigure(RouterConfig.of(
          SchedulingProfile.builder("default").scorer(other).build())).isOk()).isTrue();
      await(() -> p.closes.get() == 1, "the dropped scorer is closed");
      routedUnderA.onComplete(Usage.NONE);
      assertThat(p.heardClosed.get()).as("lifecycle calls into the closed plugin").isZero();
      assertThat(router.endpoints().get(0).inFlightRequests()).isZero();
    }
  }

  /** A scorer that counts the requests it saw routed and has not heard end. */
  static final class InFlightCounter extends TagScorer {
    final AtomicInteger open = new AtomicInteger();

    InFlightCounter(String tag) {
      super(tag);
    }

    @Override
    public void afterRouting(InferenceRequest r, CycleState state, RoutingDecision d) {
      open.incrementAndGet();
    }

    @Override
    public void onComplete(InferenceRequest r, Endpoint e, Usage u) {
      open.decrementAndGet();
    }

    @Override
    public void onFailure(InferenceRequest r, Endpoint e, Throwable cause) {
      open.decrementAndGet();
    }
  }

  /**
   * A plugin a reload drops hears how the requests it saw routed end until it is closed: one a
   * later reload takes back counts none of them in flight any more, and one never taken back
   * hears nothing once closed.
   */
  @Test
  void aDroppedPluginHearsTheEndsOfItsRequestsUntilItIsClosed() throws Exception {
    InFlightCounter p = new InFlightCounter("p");
    TagScorer other = new TagScorer("other");
    try (Router router = Router.builder()
        .profile(SchedulingProfile.builder("default").scorer(p).build())
        .retiredPluginCloseDelay(Duration.ofMinutes(10))
        .endpoints(List.of(ep("10.0.0.1:80", Map.of())))
        .build()) {
      RoutingDecision completed = router.route(REQ);
      RoutingDecision failed = router.route(REQ);
      assertThat(p.open.get()).isEqualTo(2);
      assertThat(router.reconfigure(RouterConfig.of(
          SchedulingProfile.builder("default").scorer(other).build())).isOk()).isTrue();
      completed.onComplete(Usage.NONE);
      failed.onFailure(new IllegalStateException("reset"));
      assertThat(p.open.get()).as("ends heard while dropped").isZero();
      assertThat(router.reconfigure(RouterConfig.of(
          SchedulingProfile.builder("default").scorer(p).build())).isOk()).isTrue();
      assertThat(p.open.get()).as("taken back: nothing left in flight").isZero();
    }

    ClosingListener q = new ClosingListener("q");
    try (Router router = Router.builder()
        .profile(SchedulingProfile.builder("default").scorer(q).build())
        .retiredPluginCloseDelay(Duration.ZERO)
        .endpoints(List.of(ep("10.0.0.1:80", Map.of())))
        .build()) {
      RoutingDecision d = router.route(REQ);
      assertThat(router.reconfigure(RouterConfig.of(
          SchedulingProfile.builder("default").scorer(other).build())).isOk()).isTrue();
      await(() -> q.closes.get() == 1, "the dropped scorer is closed");
      d.onComplete(Usage.NONE);
      assertThat(q.heardClosed.get()).as("lifecycle calls into the closed plugin").isZero();
    }
  }

  @Test
  void aKeptPluginIsWarnedAboutTheSameUnreadParametersAsWhenItWasCreated() {
    TagProvider tags = new TagProvider();
    String yaml = config("a").replace("{tag: shared}", "{tag: shared, bogus: 1}");
    try (Router router = Router.builder()
        .registry(TestPlugins.registry().with(tags))
        .configYaml(yaml, "a.yaml")
        .build()) {
      TagScorer shared = tags.named("shared");
      assertThat(router.config().warnings())
          .anySatisfy(w -> assertThat(w).contains("'shared'", "'bogus'"));
      Result<RouterConfig> r = router.reconfigure(yaml.replace("a1", "c1"), "b.yaml");
      assertThat(r.isOk()).isTrue();
      assertThat(tags.named("shared")).isSameAs(shared);
      assertThat(r.value().warnings()).singleElement().asString()
          .contains("b.yaml", "'shared'", "'bogus'");
      assertThat(r.value().plugins().get("shared")).as("the instance, not a view").isSameAs(shared);
    }
  }

  @Test
  void aClosedRouterRefusesReloadsAndClosesWhatTheRefusedLoadCreated() {
    TagProvider tags = new TagProvider();
    Router router = router(tags, Duration.ofMinutes(1));
    router.close();
    Result<RouterConfig> r = router.reconfigure(config("b"), "b.yaml");
    assertThat(r.errors()).containsExactly("router is closed");
    assertThat(tags.created).hasSize(5).allSatisfy(s -> assertThat(s.closes.get()).isEqualTo(1));
    TagScorer mine = new TagScorer("mine");
    assertThat(router.reconfigure(RouterConfig.of(
        SchedulingProfile.builder("p").scorer(mine).build())).isOk()).isFalse();
    assertThat(mine.closes.get()).as("a config built in code stays its caller's").isZero();
  }
}
