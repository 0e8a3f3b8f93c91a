package com.example.epp4j.gateway;

import io.epp4j.api.Endpoint;
import io.epp4j.core.Router;
import io.epp4j.kvevents.KvBlockIndex;
import io.epp4j.sim.EmulatedReplicas;
import io.epp4j.sim.LengthDist;
import io.epp4j.sim.LoadGenerator;
import io.epp4j.sim.LoadReport;
import io.epp4j.sim.Policy;
import io.epp4j.sim.SharedPrefixWorkload;
import java.io.IOException;
import java.io.PrintStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ThreadLocalRandom;
import org.HdrHistogram.Histogram;
import org.jspecify.annotations.Nullable;

/**
 * The seed experiment on one machine through real sockets: for each policy in turn, fresh
 * emulated vLLM replicas ({@link EmulatedReplicas}), a {@link PlainGateway} in front of them
 * routing with that policy (precise mode subscribing to the replicas' KV events over ZeroMQ), and
 * the load generator sending the shared-prefix workload through the gateway; then the comparison
 * table and the gateway's own time per request. Everything is on loopback and bounded: a fixed
 * number of requests, each with a timeout.
 */
public final class EndToEnd {
  private static final Duration PRIME_DEADLINE = Duration.ofSeconds(20);

  /**
   * What to run.
   *
   * @param replicas    emulated replicas per policy
   * @param speed       emulated seconds per wall second
   * @param httpPort    HTTP port of the first policy's replica 0 (policy {@code k} uses
   *     {@code httpPort + k × replicas}); 0 picks free ports
   * @param kvEventsPort KV-event port of the first policy's replica 0 (policy {@code k} uses
   *     {@code kvEventsPort + 2k × replicas}); ignored when {@code httpPort} is 0
   * @param warmup      requests sent through a throwaway round-robin setup first, so that the
   *     first policy does not pay for the JIT alone; 0 for none
   */
  public record Settings(int replicas, double speed, int httpPort, int kvEventsPort,
      List<Policy> policies, SharedPrefixWorkload workload, long seed, Duration timeout,
      int warmup) {
    public Settings {
      policies = List.copyOf(policies);
    }
  }

  /** The gateway's own time and the replicas' time to first bytes, per policy, in wall µs. */
  public record Overhead(String policy, long requests, double ownP50Micros, double ownP99Micros,
      double upstreamP50Micros, double upstreamP99Micros) {}

  /** The comparison and the gateway's overhead. */
  public record Outcome(LoadReport.Scenario scenario, List<Overhead> overhead) {}

  private EndToEnd() {}

  /** Runs every policy in turn; progress lines go to {@code progress} when not null. */
  public static Outcome run(Settings s, @Nullable PrintStream progress)
      throws IOException, InterruptedException {
    if (s.warmup() > 0) {
      if (progress != null) {
        progress.printf("warm-up: %d requests through round-robin (not measured) ...%n",
            s.warmup());
      }
      SharedPrefixWorkload w = s.workload();
      SharedPrefixWorkload small = new SharedPrefixWorkload(w.groups(), w.usersPerGroup(),
          w.systemPromptLength(), w.questionLength(), w.outputLength(), s.warmup(),
          w.concurrency(), w.rate());
      runOne(s, Policy.ROUND_ROBIN, -1, small, s.seed() + 1, null);
    }
    List<LoadGenerator.Result> results = new ArrayList<>();
    List<Overhead> overhead = new ArrayList<>();
    for (int k = 0; k < s.policies().size(); k++) {
      Policy p = s.policies().get(k);
      if (progress != null) {
        progress.printf("running %s through the gateway with %s ...%n", s.workload().name(),
            p.name());
      }
      Histogram own = new Histogram(3_600_000_000L, 3);
      Histogram upstream = new Histogram(3_600_000_000L, 3);
      results.add(runOne(s, p, k, s.workload(), s.seed(), (o, u) -> {
        synchronized (own) {
          own.recordValue(Math.min(3_600_000_000L, Math.max(0, o / 1000)));
          upstream.recordValue(Math.min(3_600_000_000L, Math.max(0, u / 1000)));
        }
      }));
      synchronized (own) {
        overhead.add(new Overhead(p.name(), own.getTotalCount(),
            own.getValueAtPercentile(50), own.getValueAtPercentile(99),
            upstream.getValueAtPercentile(50), upstream.getValueAtPercentile(99)));
      }
    }
    LoadReport.Scenario scenario = LoadReport.Scenario.of(s.workload(),
        "a plain gateway per policy in front of " + s.replicas() + " emulated replicas",
        s.speed(), results);
    return new Outcome(scenario, overhead);
  }

  /** One policy: fresh replicas and gateway, the workload through it, everything closed. */
  private static LoadGenerator.Result runOne(Settings s, Policy policy, int index,
      SharedPrefixWorkload workload, long seed, PlainGateway.@Nullable OwnTimeListener own)
      throws IOException, InterruptedException {
    try (EmulatedReplicas emu = s.httpPort() == 0 || index < 0
        ? EmulatedReplicas.startOnFreePorts(s.replicas(), false, s.speed(), seed)
        : EmulatedReplicas.start(s.replicas(), s.httpPort() + index * s.replicas(),
            s.kvEventsPort() + 2 * index * s.replicas(), false, s.speed(), seed)) {
      KvBlockIndex kvIndex = policy.kvEvents() ? KvBlockIndex.create() : null;
      Router router = router(policy, emu.endpoints(), kvIndex);
      try (PlainGateway gateway = new PlainGateway(
          new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), router,
          gatewayOptions(workload))) {
        if (kvIndex != null) {
          prime(emu, kvIndex);
        }
        gateway.ownTimeListener(own);
        LoadGenerator gen = new LoadGenerator(new LoadGenerator.Settings(
            URI.create("http://127.0.0.1:" + gateway.port()), emu.model(), s.timeout(),
            Integer.MAX_VALUE, s.speed(), seed, null));
        try {
          return gen.run(workload, policy.name());
        } finally {
          gen.close();
        }
      }
    }
  }

  /**
   * The gateway's settings for {@code workload}: its limit on requests handled at once never
   * binds, so that every failure in the report is the policy's and the replicas', not the
   * gateway under test turning the generator's own requests away with 503. The limit is at least
   * the workload's requests, all of which could be in flight at once: Poisson arrivals do not wait
   * for answers, and in a closed loop a request the generator gave up on (its timeout) may still
   * hold a gateway thread while its client's next request arrives. Threads start only as
   * requests need them, so a high limit costs nothing until it is used.
   */
  static PlainGateway.Options gatewayOptions(SharedPrefixWorkload workload) {
    PlainGateway.Options d = PlainGateway.Options.defaults();
    int inFlight = Math.max(workload.requests(),
        workload.rate() > 0 ? 0 : workload.concurrency());
    return d.withMaxConcurrentRequests(Math.max(d.maxConcurrentRequests(), inFlight));
  }

  /**
   * The router for {@code policy}. A policy that reads KV events gets {@code index} as a service
   * and subscribes per endpoint, to each replica's publisher named by its endpoint labels, so the
   * run can tell when the events flow.
   */
  static Router router(Policy policy, List<Endpoint> endpoints, @Nullable KvBlockIndex index,
      Object... listeners) {
    Router.Builder b = Router.builder().endpoints(endpoints);
    for (Object l : listeners) {
      b.listener(l);
    }
    String yaml = policy.yaml();
    if (index != null && yaml != null) {
      b.service(KvBlockIndex.class, index);
      // with an index service the scorers default to in-process feeding: ask for the sockets
      yaml = yaml.replaceAll("(?m)^- type: (precise|hybrid)-prefix-cache-scorer$",
          "- type: $1-prefix-cache-scorer\n  parameters:\n    kvEvents: {mode: per-endpoint}");
    }
    if (policy.file() != null) {
      b.configFile(policy.file());
    } else if (yaml != null) {
      b.configYaml(yaml, policy.name());
    }
    return b.build();
  }

  /**
   * ZeroMQ subscriptions connect in the background and a publisher drops what is sent before
   * (as vLLM's does): one small request per replica, direct, until its events reach the index.
   */
  static void prime(EmulatedReplicas emu, KvBlockIndex index)
      throws IOException, InterruptedException {
    HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();
    List<Endpoint> eps = emu.endpoints();
    for (int i = 0; i < emu.size(); i++) {
      long deadline = System.nanoTime() + PRIME_DEADLINE.toNanos();
      while (index.blockCount(eps.get(i).id()) == 0) {
        if (System.nanoTime() > deadline) {
          throw new IOException("no KV events from replica " + i + " (tcp://127.0.0.1:"
              + emu.kvEventsPort(i) + ") within " + PRIME_DEADLINE.toSeconds() + " s");
        }
        StringBuilder prompt = new StringBuilder("[");
        int base = ThreadLocalRandom.current().nextInt(1_000, 100_000);
        for (int t = 0; t < 32; t++) {
          prompt.append(t == 0 ? "" : ",").append(base + t);
        }
        http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + emu.httpPort(i)
                + "/v1/completions")).timeout(Duration.ofSeconds(10))
            .header("content-type", "application/json")
            .POST(HttpRequest.BodyPublishers.ofString("{\"prompt\":" + prompt
                + "],\"max_tokens\":1}")).build(), HttpResponse.BodyHandlers.discarding());
      }
    }
  }

  /** The table, then the gateway's own time per policy. */
  public static void print(Outcome o, PrintStream out) {
    LoadReport.print(o.scenario(), out);
    out.println("   gateway's own time per request (wall µs, not scaled by the speed): body,"
        + " routing, forwarding, first chunk relayed;");
    out.println("   replica: from handing the request to the HTTP client to the replica's first"
        + " bytes (wall µs)");
    int w = o.overhead().stream().mapToInt(x -> x.policy().length()).max().orElse(6);
    out.printf(Locale.ROOT, "   %-" + w + "s %8s %8s %8s %12s %12s%n", "policy", "requests",
        "own p50", "own p99", "replica p50", "replica p99");
    for (Overhead x : o.overhead()) {
      out.printf(Locale.ROOT, "   %-" + w + "s %8d %8.0f %8.0f %12.0f %12.0f%n", x.policy(),
          x.requests(), x.ownP50Micros(), x.ownP99Micros(), x.upstreamP50Micros(),
          x.upstreamP99Micros());
    }
  }

  /**
   * Writes the load report's JSON with a {@code gatewayOverhead} array; {@code scrapeIntervalMs}
   * is the gateway's (50 ms of wall time).
   */
  public static void writeJson(Outcome o, Settings s, List<String> arguments, Path p)
      throws IOException {
    Map<String, Object> extra = new LinkedHashMap<>();
    List<Map<String, Object>> rows = new ArrayList<>();
    for (Overhead x : o.overhead()) {
      Map<String, Object> m = new LinkedHashMap<>();
      m.put("policy", x.policy());
      m.put("requests", x.requests());
      m.put("ownP50Micros", x.ownP50Micros());
      m.put("ownP99Micros", x.ownP99Micros());
      m.put("upstreamP50Micros", x.upstreamP50Micros());
      m.put("upstreamP99Micros", x.upstreamP99Micros());
      rows.add(m);
    }
    extra.put("gatewayOverhead", rows);
    LoadReport.writeJson(LoadReport.runInfo(s.seed(), s.replicas(), true, 50, arguments),
        List.of(o.scenario()), extra, p);
  }

  /** The small-scale defaults of the e2e command (see the README). */
  public static SharedPrefixWorkload defaultWorkload(int requests, int concurrency) {
    return new SharedPrefixWorkload(28, 8, LengthDist.fixed(6000), LengthDist.parse("300-700"),
        LengthDist.parse("50-150"), requests, concurrency, 0);
  }
}
