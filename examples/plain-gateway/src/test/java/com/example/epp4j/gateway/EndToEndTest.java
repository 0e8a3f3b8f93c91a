package com.example.epp4j.gateway;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RequestListener;
import io.epp4j.api.RoutingDecision;
import io.epp4j.core.Router;
import io.epp4j.kvevents.KvBlockIndex;
import io.epp4j.kvevents.PreciseMatch;
import io.epp4j.sim.EmulatedReplicas;
import io.epp4j.sim.HardwareProfile;
import io.epp4j.sim.LengthDist;
import io.epp4j.sim.LoadGenerator;
import io.epp4j.sim.Policy;
import io.epp4j.sim.SharedPrefixWorkload;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.BooleanSupplier;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Emulated replicas, the plain gateway and the load generator over loopback sockets, as the e2e
 * command runs them, at small scale and a speed factor; each test is bounded in time.
 */
@Timeout(60)
class EndToEndTest {
  private static final Duration DEADLINE = Duration.ofSeconds(20);
  private static final HardwareProfile PROFILE = HardwareProfile.qwen3H100Mps6();
  private final List<AutoCloseable> open = new ArrayList<>();
  private final HttpClient http = HttpClient.newBuilder()
      .connectTimeout(Duration.ofSeconds(5)).build();

  @AfterEach
  void closeAll() throws Exception {
    for (int i = open.size() - 1; i >= 0; i--) {
      open.get(i).close();
    }
  }

  private EmulatedReplicas replicas(int n, double speed) {
    EmulatedReplicas r = EmulatedReplicas.startOnFreePorts(n, false, speed, 1);
    open.add(r);
    return r;
  }

  private PlainGateway gateway(Router router) throws Exception {
    PlainGateway g = new PlainGateway(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0),
        router);
    open.add(g);
    return g;
  }

  private static void await(String what, BooleanSupplier condition) throws InterruptedException {
    long end = System.nanoTime() + DEADLINE.toNanos();
    while (!condition.getAsBoolean()) {
      assertThat(System.nanoTime() < end).as("within %s: %s", DEADLINE, what).isTrue();
      Thread.sleep(10);
    }
  }

  private HttpResponse<String> complete(int port, int[] prompt) throws Exception {
    StringBuilder b = new StringBuilder("{\"model\":\"" + PROFILE.model() + "\",\"prompt\":[");
    for (int i = 0; i < prompt.length; i++) {
      b.append(i == 0 ? "" : ",").append(prompt[i]);
    }
    b.append("],\"max_tokens\":2}");
    return http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port
            + "/v1/completions")).timeout(DEADLINE).header("content-type", "application/json")
        .POST(HttpRequest.BodyPublishers.ofString(b.toString())).build(),
        HttpResponse.BodyHandlers.ofString());
  }

  /**
   * 16 system prompts of 2,000 tokens, 96 requests, 4 replicas, 4 clients. Round-robin sends each
   * system prompt to every replica, so each (prompt, replica) pair it draws misses once: about
   * 64 × (1 − e^(−96/64)) ≈ 50 misses of 96. A prefix-affine policy needs one miss per prompt
   * (16). With 90% of each prompt a system prompt, that is about 46% against 80% of the tokens;
   * the issue asks for a gap of at least 25 points.
   */
  @Test
  void eppApproximateHitsAtLeast25PointsMoreThanRoundRobinThroughTheGateway() throws Exception {
    SharedPrefixWorkload w = new SharedPrefixWorkload(16, 4, LengthDist.fixed(2000),
        LengthDist.parse("50-100"), LengthDist.parse("8-16"), 96, 4, 0);
    EndToEnd.Settings s = new EndToEnd.Settings(4, 10, 0, 0,
        List.of(Policy.ROUND_ROBIN, Policy.EPP_APPROXIMATE), w, 1, Duration.ofSeconds(30), 0);
    EndToEnd.Outcome o = EndToEnd.run(s, null);

    List<LoadGenerator.Result> runs = o.scenario().runs();
    for (LoadGenerator.Result r : runs) {
      assertThat(r.errors()).as(r.result().policy()).isEmpty();
      assertThat(r.result().requests()).isEqualTo(96);
      // every answer named its replica: the per-replica columns are measured, not zero. The
      // mean is over the replicas that served something: a prefix-affine policy may leave one
      // of the four idle (16 prompts, timing-dependent metrics), so it is 96 / k for k of 1-4
      double mean = r.result().meanRequestsPerReplica();
      assertThat(mean).as(r.result().policy()).isIn(96.0, 48.0, 32.0, 24.0);
    }
    assertThat(runs.get(0).result().meanRequestsPerReplica()).as("round-robin uses all four")
        .isEqualTo(24.0);
    double rr = runs.get(0).result().prefixCacheHitRate();
    double approx = runs.get(1).result().prefixCacheHitRate();
    assertThat(approx).as("epp-approximate %.3f vs round-robin %.3f", approx, rr)
        .isGreaterThanOrEqualTo(rr + 0.25);
    assertThat(o.overhead()).hasSize(2).allSatisfy(x -> assertThat(x.requests()).isEqualTo(96));

    java.io.ByteArrayOutputStream text = new java.io.ByteArrayOutputStream();
    EndToEnd.print(o, new java.io.PrintStream(text, true, java.nio.charset.StandardCharsets.UTF_8));
    assertThat(text.toString(java.nio.charset.StandardCharsets.UTF_8)).contains("round-robin")
        .contains("epp-approximate").contains("own p50");
  }

  @Test
  void preciseModeRoutesOnEventsItReadsOverZeroMqFromTheEmulator() throws Exception {
    EmulatedReplicas emu = replicas(2, 10);
    KvBlockIndex index = KvBlockIndex.create();
    AtomicReference<PreciseMatch> lastMatch = new AtomicReference<>();
    RequestListener captor = new RequestListener() {
      @Override
      public void afterRouting(InferenceRequest request, CycleState state,
          RoutingDecision decision) {
        PreciseMatch m = state.get(PreciseMatch.KEY);
        if (m != null) {
          lastMatch.set(m);
        }
      }
    };
    PlainGateway g = gateway(EndToEnd.router(Policy.EPP_PRECISE, emu.endpoints(), index,
        captor));
    EndToEnd.prime(emu, index);

    int[] prompt = new int[200];
    for (int i = 0; i < prompt.length; i++) {
      prompt[i] = 50_000 + i;
    }
    HttpResponse<String> first = complete(g.port(), prompt);
    assertThat(first.statusCode()).isEqualTo(200);
    String holder = first.headers().firstValue("x-gateway-destination-endpoint").orElseThrow();
    // the replica's BlockStored events travel over ZeroMQ to the index; until they are in, the
    // same prompt may go anywhere. Once they are, precise mode sees all its full blocks there.
    String[] dest = new String[1];
    double[] hit = new double[2];
    await("a decision that finds the prompt's blocks on " + holder, () -> {
      try {
        HttpResponse<String> r = complete(g.port(), prompt);
        dest[0] = r.headers().firstValue("x-gateway-destination-endpoint").orElseThrow();
      } catch (Exception e) {
        throw new AssertionError(e);
      }
      PreciseMatch m = lastMatch.get();
      for (int i = 0; m != null && i < m.size(); i++) {
        if (m.endpointId(i).equals(holder)) {
          hit[0] = m.cachedBlocks(i);
          hit[1] = m.totalBlocks(i);
        }
      }
      return hit[0] > 0;
    });
    assertThat(hit[1]).isEqualTo(200 / 16);
    assertThat(hit[0]).isEqualTo(hit[1]);
    assertThat(dest[0]).isEqualTo(holder);
    assertThat(index.metrics().decodeErrors()).isZero();
  }

  @Test
  void theGatewaysScraperReadsTheEmulatorsMetrics() throws Exception {
    EmulatedReplicas emu = replicas(2, 10);
    PlainGateway g = gateway(Router.builder().endpoints(emu.endpoints()).build());
    assertThat(complete(g.port(), new int[] {1, 2, 3, 4}).statusCode()).isEqualTo(200);
    await("both replicas scraped", () -> g.router().endpoints().stream()
        .map(Candidate::metrics).allMatch(m -> m.kvCapacityBlocks() > 0));
    for (Candidate c : g.router().endpoints()) {
      EndpointMetrics m = c.metrics();
      assertThat(m.kvCapacityBlocks()).isEqualTo(PROFILE.kvBlocksPerReplica());
      assertThat(m.blockSizeTokens()).isEqualTo(PROFILE.blockSize());
      assertThat(m.kvCacheUsage()).isBetween(0.0, 1.0);
    }
  }

  /**
   * Three replicas, every decision naming all three (primary then fallbacks), four clients. Once
   * ten answers have begun, the replica with an answer streaming is stopped. Only requests
   * streaming from it at that moment can fail (at most the four clients'); every later request
   * whose decision picks it first goes to a fallback and succeeds, so the run ends on its own
   * with every request accounted for.
   */
  @Test
  void aReplicaKilledMidRunFailsOverAndTheClientCountsErrorsInsteadOfHanging() throws Exception {
    EmulatedReplicas emu = replicas(3, 10);
    AtomicReference<String> killed = new AtomicReference<>("");
    AtomicInteger routedToKilled = new AtomicInteger();
    AtomicInteger failedToKilled = new AtomicInteger();
    RequestListener afterKill = new RequestListener() {
      @Override
      public void afterRouting(InferenceRequest request, CycleState state,
          RoutingDecision decision) {
        if (decision.isRouted() && decision.primary().id().equals(killed.get())) {
          routedToKilled.incrementAndGet();
        }
      }

      @Override
      public void onFailure(InferenceRequest request, Endpoint endpoint, Throwable cause) {
        failedToKilled.incrementAndGet();
      }
    };
    Router router = Router.builder().endpoints(emu.endpoints()).listener(afterKill).configYaml("""
        plugins:
        - type: prefix-cache-scorer
        - type: queue-scorer
        - type: max-score-picker
          parameters: {maxNumOfEndpoints: 3}
        schedulingProfiles:
        - name: default
          plugins:
          - {pluginRef: prefix-cache-scorer, weight: 3}
          - {pluginRef: queue-scorer, weight: 2}
          - {pluginRef: max-score-picker}
        """, "fallbacks").build();
    PlainGateway g = gateway(router);
    AtomicInteger begun = new AtomicInteger();
    g.ownTimeListener((own, upstream) -> begun.incrementAndGet());
    SharedPrefixWorkload w = new SharedPrefixWorkload(6, 4, LengthDist.fixed(512),
        LengthDist.parse("32-64"), LengthDist.parse("40-80"), 60, 4, 0);
    LoadGenerator gen = new LoadGenerator(new LoadGenerator.Settings(
        URI.create("http://127.0.0.1:" + g.port()), PROFILE.model(), Duration.ofSeconds(10),
        Integer.MAX_VALUE, 10, 1, null));
    open.add(gen::close);
    ExecutorService pool = Executors.newSingleThreadExecutor();
    open.add(pool::shutdownNow);
    Future<LoadGenerator.Result> run = pool.submit(() -> gen.run(w, "kill"));
    int[] victim = {-1};
    await("ten answers begun and one streaming", () -> {
      if (begun.get() < 10) {
        return false;
      }
      List<Candidate> candidates = g.router().endpoints();
      for (int i = 0; i < candidates.size(); i++) {
        if (candidates.get(i).inFlightRequests() > 0) {
          victim[0] = i;
          return true;
        }
      }
      return false;
    });
    String id = g.router().endpoints().get(victim[0]).id();
    int port = Integer.parseInt(id.substring(id.lastIndexOf(':') + 1));
    int failedBefore = failedToKilled.get();
    killed.set(id);
    emu.kill(port - emu.httpPort(0));
    LoadGenerator.Result r = run.get(45, TimeUnit.SECONDS);
    assertThat(r.sent()).isEqualTo(60);
    assertThat(r.result().requests() + r.failed()).isEqualTo(60);
    assertThat(r.failed()).as("failures %s", r.errors()).isLessThanOrEqualTo(4);
    assertThat(r.errors().keySet()).allSatisfy(k -> assertThat(k).isEqualTo("stream cut"));
    // the router has no health check and keeps the stopped replica's prefixes: requests for
    // them still pick it first, and their fallbacks serve them
    assertThat(routedToKilled.get()).isPositive();
    // the router heard of exactly the client's failures: the requests sent to the stopped
    // replica after it stopped went elsewhere and completed
    assertThat(failedToKilled.get() - failedBefore).isEqualTo(r.failed());
    // a streamed answer is complete for the client at data: [DONE], which the gateway relays
    // before it reads the replica's end of body and reports the completion: the last report may
    // come just after the client's count
    await("every decision ended", () -> g.router().endpoints().stream()
        .mapToInt(Candidate::inFlightRequests).sum() == 0);
  }

  @Test
  void theE2eCommandPrintsTheComparisonAndWritesJson(@TempDir Path dir) throws Exception {
    Path json = dir.resolve("e2e.json");
    StringWriter out = new StringWriter();
    StringWriter err = new StringWriter();
    int code = Main.commandLine(new PrintWriter(out), new PrintWriter(err)).execute("e2e",
        "--replicas", "2", "--speed", "10", "--requests", "12", "--concurrency", "3",
        "--groups", "2", "--output-len", "4", "--warmup", "0",
        "--policies", "round-robin,epp-precise", "--json", json.toString());
    assertThat(code).as(err.toString()).isZero();
    assertThat(out.toString()).contains("== shared-prefix").contains("round-robin")
        .contains("epp-precise: 12 sent, 12 completed, 0 failed").contains("own p50");
    assertThat(err.toString()).contains("running shared-prefix through the gateway with epp-precise");
    com.fasterxml.jackson.databind.JsonNode root =
        new com.fasterxml.jackson.databind.ObjectMapper().readTree(json.toFile());
    assertThat(root.at("/scenarios/0/results/1/policy").asText()).isEqualTo("epp-precise");
    assertThat(root.at("/gatewayOverhead/1/requests").asInt()).isEqualTo(12);
    assertThat(root.at("/run/replicas").asInt()).isEqualTo(2);
  }

  @Test
  void theE2eCommandRefusesAJsonPathItCannotWriteBeforeRunningAnything(@TempDir Path dir)
      throws Exception {
    Path aFile = java.nio.file.Files.writeString(dir.resolve("a-file"), "x");
    for (Path bad : List.of(dir.resolve("no-such-dir").resolve("e2e.json"), dir,
        aFile.resolve("e2e.json"))) {
      StringWriter out = new StringWriter();
      StringWriter err = new StringWriter();
      int code = Main.commandLine(new PrintWriter(out), new PrintWriter(err)).execute("e2e",
          "--replicas", "1", "--requests", "2", "--concurrency", "1", "--groups", "1",
          "--output-len", "2", "--warmup", "0", "--policies", "round-robin",
          "--json", bad.toString());
      assertThat(code).as(bad + ": " + err).isEqualTo(2);
      assertThat(err.toString().lines().findFirst().orElseThrow()).as(bad.toString())
          .contains("--json").contains(bad.toString());
      assertThat(err.toString()).as("nothing ran").doesNotContain("running shared-prefix")
          .doesNotContain("Exception");
      assertThat(out.toString()).as("no report").isEmpty();
    }
  }

  @Test
  void e2eSizesTheGatewaysRequestLimitForItsWorkloadSoTheGatewayTurnsNoneOfItAway() {
    // closed loop above the gateway's default limit of 1,024: every client's request is taken
    SharedPrefixWorkload closed = EndToEnd.defaultWorkload(2400, 2000);
    assertThat(EndToEnd.gatewayOptions(closed).maxConcurrentRequests())
        .isGreaterThanOrEqualTo(2400);
    // more clients than requests: no more than the requests are ever in flight, still at least
    // the concurrency
    assertThat(EndToEnd.gatewayOptions(EndToEnd.defaultWorkload(240, 2000))
        .maxConcurrentRequests()).isGreaterThanOrEqualTo(2000);
    // Poisson arrivals do not wait for answers: every request may be in flight at once
    SharedPrefixWorkload d = EndToEnd.defaultWorkload(5000, 1);
    SharedPrefixWorkload open = new SharedPrefixWorkload(d.groups(), d.usersPerGroup(),
        d.systemPromptLength(), d.questionLength(), d.outputLength(), 5000, 1, 800);
    assertThat(EndToEnd.gatewayOptions(open).maxConcurrentRequests())
        .isGreaterThanOrEqualTo(5000);
    // the small default run keeps the gateway's defaults
    assertThat(EndToEnd.gatewayOptions(EndToEnd.defaultWorkload(240, 24)))
        .isEqualTo(PlainGateway.Options.defaults());
  }

  @Test
  void theE2eCommandRejectsAnUnknownPolicy() {
    StringWriter err = new StringWriter();
    int code = Main.commandLine(new PrintWriter(new StringWriter()), new PrintWriter(err))
        .execute("e2e", "--policies", "round-robin,nope");
    assertThat(code).isEqualTo(2);
    assertThat(err.toString()).contains("unknown policy 'nope'").contains("epp-precise");
  }
}
