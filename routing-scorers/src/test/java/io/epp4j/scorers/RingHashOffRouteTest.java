package io.epp4j.scorers;

import static io.epp4j.scorers.TestCandidates.cand;
import static io.epp4j.scorers.TestCandidates.state;
import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RoutingDecision;
import io.epp4j.core.Router;
import io.epp4j.core.RouterConfig;
import io.epp4j.core.SchedulingProfile;
import io.epp4j.api.Candidate;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * A ring of millions of entries takes most of a second to build: it must be built when the pool
 * changes, off the routing thread, never by the route that first meets the pool.
 */
class RingHashOffRouteTest {

  static Endpoint weighted(String id, int weight) {
    return Endpoint.parse(id, Map.of(ConsistentHashPicker.WEIGHT_LABEL, Integer.toString(weight)));
  }

  static InferenceRequest session(String key) {
    return InferenceRequest.builder().model("m").prompt("p").sessionKey(key).build();
  }

  /** Weights 1 and 1,000,000 with the default minimum ring: about a million entries. */
  @Test
  void theFirstRouteAfterAPoolChangeDoesNotBuildTheRing() {
    RingHashPicker picker = RingHashPicker.create();
    try (Router router = Router.builder()
        .config(RouterConfig.of(SchedulingProfile.builder("default").picker(picker).build()))
        .build()) {
      router.addEndpoint(weighted("10.4.0.1:8000", 1));
      router.addEndpoint(weighted("10.4.0.2:8000", 1_000_000));
      RoutingDecision d = router.route(session("alice"));
      assertThat(d.isRouted()).isTrue();
      assertThat(picker.routeBuilds.get()).as("rings built by routes").isZero();
    }
  }

  /** Envoy's ring for {@code endpoints} in this order; {@link #host} reads it. */
  static RingHashPicker.Ring envoyRing(List<Endpoint> endpoints) {
    return new RingHashPicker.Ring(endpoints.toArray(new Endpoint[0]), 1024,
        RingHashPicker.DEFAULT_MAXIMUM_RING_SIZE, false);
  }

  /** The endpoint {@code ring} of {@code endpoints} gives {@code key}. */
  static String host(RingHashPicker.Ring ring, List<Endpoint> endpoints, String key) {
    return endpoints.get(ring.hostAt(ring.position(Xxh64.hash(key, 0)))).id();
  }

  @Test
  void onceThePoolsRingIsBuiltRoutesPlaceKeysAsEnvoyWithoutBuildingAnything() throws Exception {
    RingHashPicker picker = RingHashPicker.create();
    List<Endpoint> pool = List.of(weighted("10.4.0.1:8000", 1), weighted("10.4.0.2:8000", 3_000),
        weighted("10.4.0.3:8000", 1_000_000));
    try (Router router = Router.builder()
        .config(RouterConfig.of(SchedulingProfile.builder("default").picker(picker).build()))
        .endpoints(pool).build()) {
      assertThat(picker.awaitBuilds(60, TimeUnit.SECONDS)).as("ring built").isTrue();
      RingHashPicker.Ring envoy = envoyRing(pool);
      for (int i = 0; i < 300; i++) {
        String key = "user-" + i;
        assertThat(router.route(session(key)).primary().id()).as(key)
            .isEqualTo(host(envoy, pool, key));
      }
      assertThat(picker.routeBuilds.get()).as("rings built by routes").isZero();
    }
  }

  /**
   * A weight label changed on members that stay (announced as a change, so the prefix index,
   * sessions and in-flight counts survive): the pool's ring is rebuilt with the new weights when
   * the pool changes, so routes place keys as a fresh ring of the new weights does, from the
   * first route on.
   */
  @Test
  void aWeightLabelChangeRebuildsThePoolsRingWithTheNewWeights() throws Exception {
    RingHashPicker picker = RingHashPicker.create();
    List<Endpoint> before = List.of(weighted("10.4.0.1:8000", 1),
        weighted("10.4.0.2:8000", 1_000_000), weighted("10.4.0.3:8000", 300_000));
    List<Endpoint> after = List.of(weighted("10.4.0.1:8000", 1_000_000),
        weighted("10.4.0.2:8000", 1), weighted("10.4.0.3:8000", 300_000));
    try (Router router = Router.builder()
        .config(RouterConfig.of(SchedulingProfile.builder("default").picker(picker).build()))
        .endpoints(before).build()) {
      assertThat(picker.awaitBuilds(60, TimeUnit.SECONDS)).as("first ring built").isTrue();
      router.setEndpoints(after);
      assertThat(picker.awaitBuilds(60, TimeUnit.SECONDS)).as("second ring built").isTrue();
      // a build a route asks for from now on waits: routes are answered by what is in place
      CountDownLatch hold = MaglevOffRouteTest.holdBuilder(picker);
      RingHashPicker.Ring oldRing = envoyRing(before);
      RingHashPicker.Ring newRing = envoyRing(after);
      int moved = 0;
      for (int i = 0; i < 300; i++) {
        String key = "user-" + i;
        String expected = host(newRing, after, key);
        moved += expected.equals(host(oldRing, before, key)) ? 0 : 1;
        assertThat(router.route(session(key)).primary().id()).as(key).isEqualTo(expected);
      }
      assertThat(moved).as("keys the new weights move").isPositive();
      hold.countDown();
      assertThat(picker.routeBuilds.get()).as("rings built by routes").isZero();
    }
  }

  /**
   * While a joined endpoint's ring is being built, routes read the previous ring, which has no
   * place for it: it still completes the fallbacks a picker of maxNumOfEndpoints returns, after
   * the endpoints the previous ring places.
   */
  @Test
  void aNewcomerWithoutAPlaceInTheStandInStillCompletesTheFallbacks() throws Exception {
    // a ring of 131,072 entries for even weights: built off the routing thread
    RingHashPicker picker = RingHashPicker.create("session", 1 << 17,
        RingHashPicker.DEFAULT_MAXIMUM_RING_SIZE, 0, 3);
    try {
      List<Endpoint> two = List.of(Endpoint.parse("10.4.1.1:8000"),
          Endpoint.parse("10.4.1.2:8000"));
      TestCandidates.joined(picker, candidates(two));
      assertThat(picker.awaitBuilds(60, TimeUnit.SECONDS)).as("ring of two built").isTrue();
      CountDownLatch hold = MaglevOffRouteTest.holdBuilder(picker);
      Endpoint newcomer = Endpoint.parse("10.4.1.3:8000");
      picker.onEndpointAdded(newcomer);
      List<Endpoint> three = List.of(two.get(0), two.get(1), newcomer);
      for (int i = 0; i < 20; i++) {
        List<Candidate> picked = picker.pick(session("user-" + i), state(), candidates(three),
            new double[3]);
        assertThat(picked).extracting(Candidate::id).as("user-" + i)
            .containsExactlyInAnyOrder("10.4.1.1:8000", "10.4.1.2:8000", "10.4.1.3:8000");
        assertThat(picked.get(2).id()).as("placed by no ring yet: last").isEqualTo(newcomer.id());
      }
      hold.countDown();
    } finally {
      picker.close();
    }
  }

  /**
   * Two routes that miss at once each install a stand-in, and the exact ring replaces only one.
   * Once the exact ring has left the cache (other candidate lists took its slot), the stand-in
   * that stayed must not answer for good: the route it answers asks for the exact ring again.
   */
  @Test
  void aStandInThatOutlivesItsExactRingIsReplacedAgain() throws Exception {
    int minRing = 1 << 17; // every ring here is built off the routing thread
    RingHashPicker picker = RingHashPicker.create("session", minRing,
        RingHashPicker.DEFAULT_MAXIMUM_RING_SIZE, 0, 1);
    try {
      List<Endpoint> three = List.of(Endpoint.parse("10.4.2.1:8000"),
          Endpoint.parse("10.4.2.2:8000"), Endpoint.parse("10.4.2.3:8000"));
      Endpoint[] eps = three.toArray(new Endpoint[0]);
      List<Candidate> all = candidates(three);
      CountDownLatch hold = MaglevOffRouteTest.holdBuilder(picker);
      picker.pick(session("first"), state(), all, new double[3]); // a stand-in, build queued
      RingHashPicker.Ring second = picker.provisional(eps);
      picker.install(second); // the racing route's stand-in
      hold.countDown();
      assertThat(picker.awaitBuilds(60, TimeUnit.SECONDS)).isTrue();
      // three other candidate lists' tables push the exact ring out; the second stand-in stays
      for (int i = 0; i < 3; i++) {
        picker.install(picker.provisional(new Endpoint[] {
            Endpoint.parse("10.4.3." + (i + 1) + ":8000"), Endpoint.parse("10.4.4.1:8000")}));
      }
      picker.pick(session("again"), state(), all, new double[3]);
      assertThat(picker.awaitBuilds(60, TimeUnit.SECONDS)).isTrue();
      RingHashPicker.Ring exact = new RingHashPicker.Ring(eps, minRing,
          RingHashPicker.DEFAULT_MAXIMUM_RING_SIZE, false);
      int standInDiffers = 0;
      for (int i = 0; i < 500; i++) {
        String key = "user-" + i;
        long hash = Xxh64.hash(key, 0);
        String expected = three.get(exact.hostAt(exact.position(hash))).id();
        if (!three.get(second.hostAt(second.position(hash))).id().equals(expected)) {
          standInDiffers++;
        }
        assertThat(picker.pick(session(key), state(), all, new double[3]).get(0).id()).as(key)
            .isEqualTo(expected);
      }
      assertThat(standInDiffers).as("keys the stand-in places elsewhere").isPositive();
    } finally {
      picker.close();
    }
  }

  static List<Candidate> candidates(List<Endpoint> endpoints) {
    List<Candidate> out = new ArrayList<>();
    for (Endpoint e : endpoints) {
      out.add(new TestCandidates.Cand(e, io.epp4j.api.EndpointMetrics.UNKNOWN, 0, 0));
    }
    return out;
  }

  /**
   * Candidates nobody announced (a filter's subset, a picker used without a router): the route
   * answers from another table at hand and the exact ring follows off the routing thread.
   */
  @Test
  void anUnannouncedLargeCandidateListIsServedByTheLastRingUntilItsOwnIsBuilt() throws Exception {
    RingHashPicker picker = RingHashPicker.create();
    List<Endpoint> three = List.of(weighted("10.4.0.1:8000", 5), weighted("10.4.0.2:8000", 1),
        weighted("10.4.0.3:8000", 1_000_000));
    List<Candidate> all = candidates(three);
    String first = picker.pick(session("k"), state(), all, new double[3]).get(0).id();
    assertThat(three.stream().map(Endpoint::id)).contains(first);
    assertThat(picker.awaitBuilds(60, TimeUnit.SECONDS)).isTrue();
    RingHashPicker.Ring envoyThree = envoyRing(three);
    List<String> before = new ArrayList<>();
    for (int i = 0; i < 200; i++) {
      String key = "user-" + i;
      String got = picker.pick(session(key), state(), all, new double[3]).get(0).id();
      assertThat(got).as(key).isEqualTo(host(envoyThree, three, key));
      before.add(got);
    }
    // the first host leaves: until the two-host ring is built (held back here), keys
    // whose host stays keep it
    CountDownLatch hold = new CountDownLatch(1);
    picker.onBuilder(() -> {
      try {
        hold.await(60, TimeUnit.SECONDS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    });
    List<Endpoint> two = three.subList(1, 3);
    List<Candidate> rest = candidates(two);
    for (int i = 0; i < 200; i++) {
      String key = "user-" + i;
      String got = picker.pick(session(key), state(), rest, new double[2]).get(0).id();
      if (!before.get(i).equals("10.4.0.1:8000")) {
        assertThat(got).as(key).isEqualTo(before.get(i));
      } else {
        assertThat(got).as(key).isIn("10.4.0.2:8000", "10.4.0.3:8000");
      }
    }
    hold.countDown();
    assertThat(picker.awaitBuilds(60, TimeUnit.SECONDS)).isTrue();
    RingHashPicker.Ring envoyTwo = envoyRing(two);
    for (int i = 0; i < 200; i++) {
      String key = "user-" + i;
      assertThat(picker.pick(session(key), state(), rest, new double[2]).get(0).id()).as(key)
          .isEqualTo(host(envoyTwo, two, key));
    }
    assertThat(picker.routeBuilds.get()).as("rings built by routes").isZero();
    picker.close();
  }

  /** Rings of Envoy's default size stay built on the route, so their first answer is exact. */
  @Test
  void smallRingsAreBuiltOnTheRouteAndStartNoThread() throws Exception {
    RingHashPicker picker = RingHashPicker.create();
    List<Candidate> hosts = TestCandidates.pool(6);
    TestCandidates.joined(picker, hosts);
    List<Endpoint> eps = new ArrayList<>();
    hosts.forEach(c -> eps.add(c.endpoint()));
    assertThat(picker.pick(session("alice"), state(), hosts, new double[6]).get(0).id())
        .isEqualTo(host(envoyRing(eps), eps, "alice"));
    assertThat(picker.routeBuilds.get()).isEqualTo(1);
    assertThat(picker.builderStarted()).as("builder thread started").isFalse();
  }
}
