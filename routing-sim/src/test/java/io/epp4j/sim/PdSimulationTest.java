package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.within;

import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RequestListener;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.Router;
import io.epp4j.kvevents.KvEvent;
import io.epp4j.scorers.PdProfileHandler;
import io.epp4j.scorers.TokenCostPicker;
import io.epp4j.scorers.TokenCostPickerAccounts;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;

/**
 * Prefill/decode disaggregation in the simulator: a request routed with a prefill pick is
 * prefilled on that replica, its KV crosses the link, and it decodes on its primary endpoint,
 * with the router's lifecycle calls made as a gateway makes them.
 */
class PdSimulationTest {
  private static final HardwareProfile HW = HardwareProfile.qwen3H100Mps6();
  private static final String PREFILL = Simulation.endpoint(0).id();
  private static final String DECODE = Simulation.endpoint(1).id();

  /** {@code requests} users of one 2,000-token system prompt, one after the other. */
  private static Workload sequential(int requests) {
    return new SharedPrefixWorkload(1, requests, LengthDist.fixed(2000), LengthDist.fixed(200),
        LengthDist.fixed(20), requests, 1, 0);
  }

  private static Simulation.Settings settings(int replicas) {
    return new Simulation.Settings(HW, replicas, 1, 50_000_000L, null);
  }

  @Test
  void aPdRequestIsPrefilledOnThePrefillReplicaAndDecodedOnTheDecodeReplica() {
    Map<String, List<KvEvent.BlockStored>> stored = new ConcurrentHashMap<>();
    Map<String, List<Double>> storedAt = new ConcurrentHashMap<>();
    List<Simulation.RequestRecord> served = new ArrayList<>();
    Lifecycle lifecycle = new Lifecycle();
    PolicyResult r = new Simulation(settings(2), sequential(1), Policy.PD_EPP4J,
        (endpoint, batch) -> {
          for (KvEvent e : batch.events()) {
            if (e instanceof KvEvent.BlockStored s) {
              stored.computeIfAbsent(endpoint, k -> new ArrayList<>()).add(s);
              storedAt.computeIfAbsent(endpoint, k -> new ArrayList<>())
                  .add(batch.timestampSeconds());
            }
          }
        }, lifecycle).pd(1, 1).requestLog(served::add).run();

    assertThat(r.requests()).isEqualTo(1);
    assertThat(r.pd().disaggregated()).isEqualTo(1);
    // the router's picks: prefill on the prefill replica, decode (primary) on the decode one
    assertThat(lifecycle.prefillPicks).containsExactly(PREFILL);
    assertThat(lifecycle.primaries).containsExactly(DECODE);
    // the request is served, and its first token and end reported, on the decode replica
    assertThat(served).singleElement().extracting(Simulation.RequestRecord::replica)
        .isEqualTo(1);
    // and its record names the replica that prefilled it and how long its KV took to arrive
    Simulation.RequestRecord rec = served.get(0);
    assertThat(rec.disaggregated()).isTrue();
    assertThat(rec.prefillReplica()).isZero();
    assertThat(rec.decodeCachedTokens()).isZero();
    assertThat(rec.transferMs())
        .isEqualTo(KvLink.rdma400g().transferNanos(2200, HW.kvBytesPerToken()) / 1e6);
    assertThat(lifecycle.firstTokens).containsExactly(DECODE);
    assertThat(lifecycle.completions).containsExactly(DECODE);

    // the prefill replica computed the prompt's KV; the decode replica holds the same blocks
    // after the transfer (and its reply's), later than the prefill replica stored them
    Set<Long> prefilled = hashes(stored.get(PREFILL));
    Set<Long> decoded = hashes(stored.get(DECODE));
    assertThat(prefilled).hasSize(2200 / HW.blockSize());
    assertThat(decoded).containsAll(prefilled);
    double transferSeconds = KvLink.rdma400g().transferNanos(2200, HW.kvBytesPerToken()) / 1e9;
    assertThat(storedAt.get(DECODE).get(0))
        .isGreaterThanOrEqualTo(storedAt.get(PREFILL).get(0) + transferSeconds);
  }

  @Test
  void theTransferTakesTheKvBytesOverTheLinkRatePlusItsLatency() {
    KvLink link = new KvLink("test", 2e9, 0.004);
    assertThat(link.transferNanos(1000, 1000)).isEqualTo(Math.round((1e6 / 2e9 + 0.004) * 1e9));
    assertThat(KvLink.rdma400g().bytesPerSecond()).isEqualTo(400e9 / 8);

    // one request on an idle P/D pair: nothing is cached at decode, so the whole prompt moves
    PolicyResult r = new Simulation(settings(2), sequential(1), Policy.PD_EPP4J, null)
        .pd(1, 1).kvLink(link).run();
    assertThat(r.pd().transferredTokens()).isEqualTo(2200);
    assertThat(r.pd().transferMeanMs())
        .isEqualTo(link.transferNanos(2200, HW.kvBytesPerToken()) / 1e6);
  }

  @Test
  void aSlowerLinkDelaysTheFirstTokenByExactlyTheLongerTransfer() {
    KvLink slow = new KvLink("slow", 1e9, 0.010);
    double fast = onlyTtftMs(KvLink.rdma400g());
    double slower = onlyTtftMs(slow);
    long tokens = 2200;
    double expected = (slow.transferNanos(tokens, HW.kvBytesPerToken())
        - KvLink.rdma400g().transferNanos(tokens, HW.kvBytesPerToken())) / 1e6;
    assertThat(slower - fast).isCloseTo(expected, within(1e-6));
  }

  private static double onlyTtftMs(KvLink link) {
    List<Simulation.RequestRecord> served = new ArrayList<>();
    new Simulation(settings(2), sequential(1), Policy.PD_EPP4J, null).pd(1, 1).kvLink(link)
        .requestLog(served::add).run();
    assertThat(served).hasSize(1);
    return served.get(0).ttftMs();
  }

  @Test
  void theDecodeReplicaKeepsTheTransferredPrefixForTheNextRequest() {
    List<Simulation.RequestRecord> served = new ArrayList<>();
    PolicyResult r = new Simulation(settings(2), sequential(2), Policy.PD_EPP4J, null)
        .pd(1, 1).requestLog(served::add).run();
    assertThat(r.pd().disaggregated()).isEqualTo(2);
    // the second request shares the 2,000-token system prompt: its full blocks were on the
    // decode replica already and did not move again
    assertThat(r.pd().decodeHitTokens()).isEqualTo(2000 / HW.blockSize() * HW.blockSize());
    assertThat(r.pd().transferredTokens()).isEqualTo(2 * 2200 - r.pd().decodeHitTokens());
    // per request: the first moved everything, the second only what the decode replica lacked
    assertThat(served).extracting(Simulation.RequestRecord::decodeCachedTokens)
        .containsExactly(0, (int) r.pd().decodeHitTokens());
    assertThat(served.get(1).transferMs()).isEqualTo(KvLink.rdma400g()
        .transferNanos(2200 - r.pd().decodeHitTokens(), HW.kvBytesPerToken()) / 1e6);
  }

  @Test
  void firstTokenAndCompletionReachTheRouterSoThePrefillAccountEndsAtZero() {
    Workload w = new SharedPrefixWorkload(4, 6, LengthDist.fixed(3000),
        LengthDist.parse("300-700"), LengthDist.parse("20-60"), 96, 12, 0);
    Lifecycle lifecycle = new Lifecycle();
    List<TokenCostPicker> pickers = new ArrayList<>();
    AtomicLong maxPending = new AtomicLong();
    AtomicReference<Map<String, Long>> atEnd = new AtomicReference<>();
    String[] prefills = {Simulation.endpoint(0).id(), Simulation.endpoint(1).id()};
    lifecycle.onRouted = () -> {
      for (String p : prefills) {
        maxPending.accumulateAndGet(TokenCostPickerAccounts.pendingTokens(pickers.get(0), p),
            Math::max);
      }
    };
    PolicyResult r = new Simulation(settings(6), w, Policy.PD_EPP4J, null, lifecycle)
        .pd(2, 4)
        .observeRouters(router -> pickers.add(picker(router)), router -> {
          Map<String, Long> pending = new java.util.HashMap<>();
          for (String p : prefills) {
            pending.put(p, TokenCostPickerAccounts.pendingTokens(pickers.get(0), p));
          }
          pending.put("requests", (long) TokenCostPickerAccounts.pendingRequests(pickers.get(0)));
          atEnd.set(pending);
        })
        .run();

    assertThat(r.requests()).isEqualTo(96);
    assertThat(r.pd().disaggregated()).isPositive();
    // the picker counted prefill work on the prefill replicas while requests were in flight
    assertThat(maxPending.get()).isPositive();
    // every request's first token and end came back through its decision, on its decode replica
    assertThat(lifecycle.firstTokens).hasSize(96);
    assertThat(lifecycle.completions).hasSize(96);
    assertThat(new HashSet<>(lifecycle.completions)).doesNotContainAnyElementsOf(List.of(prefills));
    assertThat(lifecycle.prefillPicks).isNotEmpty().allMatch(id -> List.of(prefills).contains(id));
    // ... so nothing is left pending anywhere when the run is over
    assertThat(atEnd.get()).containsOnlyKeys(prefills[0], prefills[1], "requests")
        .allSatisfy((k, v) -> assertThat(v).as(k).isZero());
  }

  @Test
  void anAggregatedPolicyOnAPdClusterSeesEveryReplicaAsBoth() {
    Workload w = new SharedPrefixWorkload(4, 6, LengthDist.fixed(3000),
        LengthDist.parse("300-700"), LengthDist.parse("20-60"), 96, 12, 0);
    Set<String> roles = ConcurrentHashMap.newKeySet();
    RequestListener seen = new RequestListener() {
      @Override
      public void afterRouting(InferenceRequest request, CycleState state,
          RoutingDecision decision) {
        roles.add(decision.primary().labels().getOrDefault(Endpoint.ROLE_LABEL, "none"));
      }
    };
    PolicyResult pd = new Simulation(settings(6), w, Policy.EPP_APPROXIMATE, null, seen)
        .pd(2, 4).run();
    PolicyResult plain = new Simulation(settings(6), w, Policy.EPP_APPROXIMATE, null).run();
    assertThat(roles).containsExactly(Simulation.BOTH_ROLE);
    assertThat(pd.pd().disaggregated()).isZero();
    // the labels change nothing for a configuration without role filters
    assertThat(new PolicyResult(pd.policy(), pd.prefixCacheHitRate(), pd.ttftP50Ms(),
        pd.ttftP95Ms(), pd.ttftP99Ms(), pd.itlP50Ms(), pd.e2eP50Ms(), pd.e2eP95Ms(),
        pd.outputTokensPerSec(), pd.requests(), pd.preemptions(), pd.evictions(),
        pd.maxRequestsPerReplica(), pd.meanRequestsPerReplica(), pd.maxSessionsPerReplica(),
        pd.meanSessionsPerReplica(), 0, 0, 0, 0, pd.clippedRequests(), pd.rejectedRequests(),
        pd.routerRejectedRequests(), pd.firstRouterRejection(), pd.simulatedSeconds(), 0, 0,
        pd.ttftCdfMs()).sameOutcomeAs(plain)).isTrue();
  }

  @Test
  void aPdPolicyOnAClusterWithoutRolesServesEveryRequestWhereItIsRouted() {
    // no replica carries the prefill role, so the prefill profile picks nothing
    PolicyResult r = new Simulation(settings(2), sequential(3), Policy.PD_EPP_APPROXIMATE, null)
        .run();
    assertThat(r.requests()).isEqualTo(3);
    assertThat(r.pd()).isEqualTo(PdStats.NONE);
  }

  @Test
  void onlyConfigurationsWithAPrefillProfileDisaggregate() {
    assertThat(Policy.PD_EPP4J.disaggregates()).isTrue();
    assertThat(Policy.PD_EPP_APPROXIMATE.disaggregates()).isTrue();
    for (Policy p : Policy.presets().values()) {
      assertThat(p.disaggregates()).as(p.name()).isFalse();
    }
  }

  private static TokenCostPicker picker(Router router) {
    return (TokenCostPicker) router.config().profiles().get(PdProfileHandler.PREFILL_PROFILE)
        .picker();
  }

  private static Set<Long> hashes(List<KvEvent.BlockStored> events) {
    Set<Long> out = new HashSet<>();
    for (KvEvent.BlockStored s : events) {
      for (long h : s.blockHashes()) {
        out.add(h);
      }
    }
    return out;
  }

  /** What the router's lifecycle reports, per call, in order (one simulation thread). */
  private static final class Lifecycle implements RequestListener {
    final List<String> primaries = new ArrayList<>();
    final List<String> prefillPicks = new ArrayList<>();
    final List<String> firstTokens = new ArrayList<>();
    final List<String> completions = new ArrayList<>();
    Runnable onRouted = () -> {};

    @Override
    public void afterRouting(InferenceRequest request, CycleState state,
        RoutingDecision decision) {
      primaries.add(decision.primary().id());
      Endpoint p = PdProfileHandler.prefillEndpoint(decision);
      if (p != null) {
        prefillPicks.add(p.id());
      }
      onRouted.run();
    }

    @Override
    public void onFirstToken(InferenceRequest request, Endpoint endpoint) {
      firstTokens.add(endpoint.id());
    }

    @Override
    public void onComplete(InferenceRequest request, Endpoint endpoint, Usage usage) {
      completions.add(endpoint.id());
    }
  }
}
