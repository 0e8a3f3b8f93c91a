package io.epp4j.scorers;

import static io.epp4j.scorers.RingHashOffRouteTest.candidates;
import static io.epp4j.scorers.RingHashOffRouteTest.weighted;
import static io.epp4j.scorers.TestCandidates.state;
import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RoutingDecision;
import io.epp4j.core.Router;
import io.epp4j.core.RouterConfig;
import io.epp4j.core.SchedulingProfile;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * A Maglev table of Envoy's largest size (5,000,011 slots) takes a long time to fill: it must be
 * built when the pool changes, off the routing thread, never by the route that first meets the
 * pool.
 */
class MaglevOffRouteTest {

  static InferenceRequest session(String key) {
    return InferenceRequest.builder().model("m").prompt("p").sessionKey(key).build();
  }

  static MaglevPicker largest() {
    return new MaglevPicker(HashKeySource.SESSION, MaglevPicker.MAX_TABLE_SIZE, 0, 1);
  }

  @Test
  void theFirstRouteAfterAPoolChangeDoesNotBuildTheTable() {
    MaglevPicker picker = largest();
    try (Router router = Router.builder()
        .config(RouterConfig.of(SchedulingProfile.builder("default").picker(picker).build()))
        .build()) {
      router.addEndpoint(Endpoint.parse("10.5.0.1:8000"));
      router.addEndpoint(Endpoint.parse("10.5.0.2:8000"));
      RoutingDecision d = router.route(session("alice"));
      assertThat(d.isRouted()).isTrue();
      assertThat(picker.routeBuilds.get()).as("tables built by routes").isZero();
    }
  }

  /** Envoy's Maglev table of {@code size} slots for {@code endpoints}; {@link #host} reads it. */
  static MaglevPicker.MaglevTable envoyTable(List<Endpoint> endpoints, int size) {
    return new MaglevPicker.MaglevTable(endpoints.toArray(new Endpoint[0]), size, false);
  }

  /** The endpoint {@code table} of {@code endpoints} gives {@code key}. */
  static String host(MaglevPicker.MaglevTable table, List<Endpoint> endpoints, String key) {
    return endpoints.get(table.hostAt(table.position(Xxh64.hash(key, 0)))).id();
  }

  @Test
  void onceThePoolsTableIsBuiltRoutesPlaceKeysAsEnvoyWithoutBuildingAnything() throws Exception {
    MaglevPicker picker = largest();
    List<Endpoint> pool = List.of(weighted("10.5.0.1:8000", 1), weighted("10.5.0.2:8000", 3),
        weighted("10.5.0.3:8000", 7));
    try (Router router = Router.builder()
        .config(RouterConfig.of(SchedulingProfile.builder("default").picker(picker).build()))
        .endpoints(pool).build()) {
      assertThat(picker.awaitBuilds(60, TimeUnit.SECONDS)).as("table built").isTrue();
      MaglevPicker.MaglevTable envoy = envoyTable(pool, MaglevPicker.MAX_TABLE_SIZE);
      for (int i = 0; i < 300; i++) {
        String key = "user-" + i;
        assertThat(router.route(session(key)).primary().id()).as(key)
            .isEqualTo(host(envoy, pool, key));
      }
      assertThat(picker.routeBuilds.get()).as("tables built by routes").isZero();
    }
  }

  /**
   * A weight label changed on members that stay (announced as a change, not a removal and an
   * addition): the pool's table is rebuilt with the new weights when the pool changes, so routes
   * place keys as a fresh table of the new weights does, from the first route on.
   */
  @Test
  void aWeightLabelChangeRebuildsThePoolsTableWithTheNewWeights() throws Exception {
    MaglevPicker picker = new MaglevPicker(HashKeySource.SESSION, LARGE, 0, 1);
    List<Endpoint> before = List.of(weighted("10.5.0.1:8000", 1), weighted("10.5.0.2:8000", 5),
        weighted("10.5.0.3:8000", 2));
    List<Endpoint> after = List.of(weighted("10.5.0.1:8000", 5), weighted("10.5.0.2:8000", 1),
        weighted("10.5.0.3:8000", 2));
    try (Router router = Router.builder()
        .config(RouterConfig.of(SchedulingProfile.builder("default").picker(picker).build()))
        .endpoints(before).build()) {
      assertThat(picker.awaitBuilds(60, TimeUnit.SECONDS)).as("first table built").isTrue();
      router.setEndpoints(after);
      assertThat(picker.awaitBuilds(60, TimeUnit.SECONDS)).as("second table built").isTrue();
      // a build a route asks for from now on waits: routes are answered by what is in place
      CountDownLatch hold = MaglevOffRouteTest.holdBuilder(picker);
      MaglevPicker.MaglevTable oldTable = envoyTable(before, LARGE);
      MaglevPicker.MaglevTable newTable = envoyTable(after, LARGE);
      int moved = 0;
      for (int i = 0; i < 300; i++) {
        String key = "user-" + i;
        String expected = host(newTable, after, key);
        moved += expected.equals(host(oldTable, before, key)) ? 0 : 1;
        assertThat(router.route(session(key)).primary().id()).as(key).isEqualTo(expected);
      }
      assertThat(moved).as("keys the new weights move").isPositive();
      hold.countDown();
      assertThat(picker.routeBuilds.get()).as("tables built by routes").isZero();
    }
  }

  /** A prime above Envoy's default table size, small enough to build quickly in a test. */
  static final int LARGE = 131_071;

  /** Holds the builder thread until the returned latch is counted down. */
  static CountDownLatch holdBuilder(ConsistentHashPicker picker) {
    CountDownLatch hold = new CountDownLatch(1);
    picker.onBuilder(() -> {
      try {
        hold.await(60, TimeUnit.SECONDS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    });
    return hold;
  }

  /**
   * Before any table exists the route answers from a stand-in: Envoy's construction in its
   * default size, 65,537 slots; the exact table replaces it once built.
   */
  @Test
  void beforeAnyTableIsBuiltTheStandInIsAMaglevTableOfTheDefaultSize() throws Exception {
    MaglevPicker picker = new MaglevPicker(HashKeySource.SESSION, LARGE, 0, 1);
    List<Endpoint> four = List.of(weighted("10.5.0.1:8000", 1), weighted("10.5.0.2:8000", 2),
        weighted("10.5.0.3:8000", 3), weighted("10.5.0.4:8000", 4));
    List<Candidate> all = candidates(four);
    CountDownLatch hold = holdBuilder(picker);
    MaglevPicker.MaglevTable standIn = envoyTable(four, MaglevPicker.DEFAULT_TABLE_SIZE);
    MaglevPicker.MaglevTable exact = envoyTable(four, LARGE);
    int differ = 0;
    for (int i = 0; i < 300; i++) {
      String key = "user-" + i;
      assertThat(picker.pick(session(key), state(), all, new double[4]).get(0).id()).as(key)
          .isEqualTo(host(standIn, four, key));
      differ += host(standIn, four, key).equals(host(exact, four, key)) ? 0 : 1;
    }
    assertThat(differ).as("keys the two sizes place apart").isPositive();
    hold.countDown();
    assertThat(picker.awaitBuilds(60, TimeUnit.SECONDS)).isTrue();
    for (int i = 0; i < 300; i++) {
      String key = "user-" + i;
      assertThat(picker.pick(session(key), state(), all, new double[4]).get(0).id()).as(key)
          .isEqualTo(host(exact, four, key));
    }
    assertThat(picker.routeBuilds.get()).as("tables built by routes").isZero();
    picker.close();
  }

  /**
   * Candidates nobody announced (a filter's subset, a picker used without a router): the route
   * answers from the last exact table, read for them, and their own follows off the routing
   * thread.
   */
  @Test
  void anUnannouncedCandidateListIsServedByTheLastTableUntilItsOwnIsBuilt() throws Exception {
    MaglevPicker picker = new MaglevPicker(HashKeySource.SESSION, LARGE, 0, 1);
    List<Endpoint> three = List.of(weighted("10.5.0.1:8000", 5), weighted("10.5.0.2:8000", 1),
        weighted("10.5.0.3:8000", 2));
    List<Candidate> all = candidates(three);
    picker.pick(session("k"), state(), all, new double[3]);
    assertThat(picker.awaitBuilds(60, TimeUnit.SECONDS)).isTrue();
    MaglevPicker.MaglevTable envoyThree = envoyTable(three, LARGE);
    List<String> before = new ArrayList<>();
    for (int i = 0; i < 300; i++) {
      String key = "user-" + i;
      String got = picker.pick(session(key), state(), all, new double[3]).get(0).id();
      assertThat(got).as(key).isEqualTo(host(envoyThree, three, key));
      before.add(got);
    }
    // the first host leaves: until the two-host table is built (held back here), keys whose
    // host stays keep it
    CountDownLatch hold = holdBuilder(picker);
    List<Endpoint> two = three.subList(1, 3);
    List<Candidate> rest = candidates(two);
    for (int i = 0; i < 300; i++) {
      String key = "user-" + i;
      String got = picker.pick(session(key), state(), rest, new double[2]).get(0).id();
      if (!before.get(i).equals("10.5.0.1:8000")) {
        assertThat(got).as(key).isEqualTo(before.get(i));
      } else {
        assertThat(got).as(key).isIn("10.5.0.2:8000", "10.5.0.3:8000");
      }
    }
    hold.countDown();
    assertThat(picker.awaitBuilds(60, TimeUnit.SECONDS)).isTrue();
    MaglevPicker.MaglevTable envoyTwo = envoyTable(two, LARGE);
    for (int i = 0; i < 300; i++) {
      String key = "user-" + i;
      assertThat(picker.pick(session(key), state(), rest, new double[2]).get(0).id()).as(key)
          .isEqualTo(host(envoyTwo, two, key));
    }
    assertThat(picker.routeBuilds.get()).as("tables built by routes").isZero();
    picker.close();
  }

  /** Envoy's default table stays built on the route, so its first answer is exact. */
  @Test
  void theDefaultTableIsBuiltOnTheRouteAndStartsNoThread() {
    MaglevPicker picker =
        new MaglevPicker(HashKeySource.SESSION, MaglevPicker.DEFAULT_TABLE_SIZE, 0, 1);
    List<Candidate> hosts = TestCandidates.pool(6);
    TestCandidates.joined(picker, hosts);
    List<Endpoint> eps = new ArrayList<>();
    hosts.forEach(c -> eps.add(c.endpoint()));
    assertThat(picker.pick(session("alice"), state(), hosts, new double[6]).get(0).id())
        .isEqualTo(host(envoyTable(eps, MaglevPicker.DEFAULT_TABLE_SIZE), eps, "alice"));
    assertThat(picker.routeBuilds.get()).isEqualTo(1);
    assertThat(picker.builderStarted()).as("builder thread started").isFalse();
  }
}
