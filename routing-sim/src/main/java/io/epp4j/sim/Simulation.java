package io.epp4j.sim;

import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RequestListener;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.Router;
import io.epp4j.kvevents.KvBlockIndex;
import java.io.PrintStream;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.PriorityQueue;
import java.util.Set;
import org.jspecify.annotations.Nullable;

/**
 * Runs one workload against one policy: a discrete-event loop over request arrivals, replica
 * engine steps, GPU sharing and metric scrapes, with the real {@link Router} deciding where each
 * request goes. Simulated time drives the router's ticker, so metric ages and TTLs behave as in
 * a live gateway. Deterministic for a given seed (the router is seeded too); only the measured
 * routing wall times vary between runs.
 */
public final class Simulation {

  /** Settings shared by every run of a comparison. */
  public record Settings(HardwareProfile profile, int replicas, long seed,
      long scrapeIntervalNanos, @Nullable PrintStream progress) {
    public Settings {
      if (replicas < 1) {
        throw new IllegalArgumentException("replicas must be >= 1");
      }
      if (scrapeIntervalNanos < 1) {
        throw new IllegalArgumentException("scrape interval must be > 0");
      }
    }
  }

  private static final int ARRIVAL = 0;
  private static final int GPU_DONE = 1;
  private static final int STEP_DONE = 2;
  private static final int SCRAPE = 3;

  private static final class Event {
    final long time;
    final long seq;
    final int type;
    final int index;
    final long version;
    final @Nullable RequestSpec spec;

    Event(long time, long seq, int type, int index, long version, @Nullable RequestSpec spec) {
      this.time = time;
      this.seq = seq;
      this.type = type;
      this.index = index;
      this.version = version;
      this.spec = spec;
    }
  }

  private final Settings settings;
  private final Workload workload;
  private final Policy policy;
  private final @Nullable KvEventListener kvListener;
  private final @Nullable RequestListener requestListener;
  /** Where the replicas' events go during a run: the caller's listener and/or the router's index. */
  private @Nullable KvEventListener eventSink;

  private final PriorityQueue<Event> events = new PriorityQueue<>(
      (a, b) -> a.time != b.time ? Long.compare(a.time, b.time) : Long.compare(a.seq, b.seq));
  private long seq;
  private long now;

  private Replica[] replicas;
  private GpuShare[] gpus;
  private int[] gpuOf;
  private final Map<String, Integer> replicaById = new HashMap<>();
  private long blockSeed;

  private final Samples ttft = new Samples();
  private final Samples itl = new Samples();
  private final Samples e2e = new Samples();
  private final Samples routing = new Samples();
  private List<Set<String>> sessionsPerReplica;
  private int completed;
  private int rejected;
  private int routerRejected;
  private @Nullable String firstRouterRejection;
  private long outputTokens;
  private long firstArrival = Long.MAX_VALUE;
  private long lastFinish;
  private int total;

  public Simulation(Settings settings, Workload workload, Policy policy,
      @Nullable KvEventListener kvListener) {
    this(settings, workload, policy, kvListener, null);
  }

  /**
   * A simulation whose router also reports every decision's lifecycle to
   * {@code requestListener} (as the router's own plugins see it).
   */
  public Simulation(Settings settings, Workload workload, Policy policy,
      @Nullable KvEventListener kvListener, @Nullable RequestListener requestListener) {
    this.settings = settings;
    this.workload = workload;
    this.policy = policy;
    this.kvListener = kvListener;
    this.requestListener = requestListener;
  }

  /** The endpoint of replica {@code i}: {@code 10.0.0.(i+1):8000}. */
  public static Endpoint endpoint(int i) {
    return Endpoint.parse("10.0." + (i / 250) + "." + (i % 250 + 1) + ":8000");
  }

  /**
   * Runs the simulation to the last request.
   *
   * @throws io.epp4j.core.ConfigException when the policy's configuration cannot be loaded
   */
  public PolicyResult run() {
    HardwareProfile hw = settings.profile();
    int n = settings.replicas();
    int numGpus = (n + hw.replicasPerGpu() - 1) / hw.replicasPerGpu();
    Router.Builder rb = Router.builder().ticker(() -> now).randomSeed(settings.seed());
    eventSink = kvListener;
    if (policy.kvEvents()) {
      // precise mode in process: the replicas' events go straight into the router's index
      KvBlockIndex index = KvBlockIndex.builder().ticker(() -> now)
          .defaultBlockSize(hw.blockSize()).build();
      rb.service(KvBlockIndex.class, index);
      KvEventListener feed = new KvIndexFeed(index);
      KvEventListener outer = kvListener;
      eventSink = outer == null ? feed : (id, t, evs) -> {
        feed.onKvEvents(id, t, evs);
        outer.onKvEvents(id, t, evs);
      };
    }
    replicas = new Replica[n];
    gpus = new GpuShare[numGpus];
    gpuOf = new int[n];
    sessionsPerReplica = new ArrayList<>(n);
    List<Endpoint> endpoints = new ArrayList<>(n);
    int blocks = hw.kvBlocksPerReplica();
    for (int g = 0; g < numGpus; g++) {
      gpus[g] = new GpuShare();
    }
    for (int i = 0; i < n; i++) {
      Endpoint e = endpoint(i);
      endpoints.add(e);
      replicas[i] = new Replica(i, e, hw, blocks);
      if (eventSink != null) {
        replicas[i].kv.enableEvents();
      }
      gpuOf[i] = i % numGpus;
      replicaById.put(e.id(), i);
      sessionsPerReplica.add(new HashSet<>());
    }
    blockSeed = BlockHasher.seed(hw.model());

    rb.endpoints(endpoints);
    if (requestListener != null) {
      rb.listener(requestListener);
    }
    if (policy.file() != null) {
      rb.configFile(policy.file());
    } else if (policy.yaml() != null) {
      rb.configYaml(policy.yaml(), "policy " + policy.name());
    }
    long wallStart = System.nanoTime();
    try (Router router = rb.build()) {
      Workload.Run run = workload.start(settings.seed());
      total = run.totalRequests();
      Workload.Submitter submitter = (at, spec) ->
          push(Math.max(at, now), ARRIVAL, 0, 0, spec);
      push(0, SCRAPE, 0, 0, null);
      run.begin(submitter);
      Replica.StepSink sink = new Sink(run, submitter);
      int[] finished = new int[n];
      long nextProgress = System.nanoTime() + 2_000_000_000L;
      long processed = 0;

      while (!events.isEmpty()) {
        Event ev = events.poll();
        now = ev.time;
        switch (ev.type) {
          case ARRIVAL -> arrive(router, ev.spec);
          case SCRAPE -> {
            scrape(router);
            // keep scraping while anything else can still happen
            if (completed + rejected < total && !events.isEmpty()) {
              push(now + settings.scrapeIntervalNanos(), SCRAPE, 0, 0, null);
            }
          }
          case GPU_DONE -> {
            GpuShare gpu = gpus[ev.index];
            if (ev.version == gpu.version) {
              int k = gpu.popFinished(now, finished);
              for (int i = 0; i < k; i++) {
                Replica r = replicas[finished[i]];
                push(now + Math.round(r.stepOverheadSeconds() * 1e9), STEP_DONE, r.index, 0, null);
              }
              scheduleGpu(ev.index);
            }
          }
          case STEP_DONE -> {
            Replica r = replicas[ev.index];
            r.completeStep(now, sink);
            publishKvEvents(r);
            startStep(r);
          }
          default -> throw new IllegalStateException("unknown event " + ev.type);
        }
        if ((++processed & 0x3FFF) == 0 && settings.progress() != null
            && System.nanoTime() > nextProgress) {
          nextProgress = System.nanoTime() + 2_000_000_000L;
          settings.progress().printf("  %s / %s: %d of %d requests, simulated %.1f s%n",
              workload.name(), policy.name(), completed + rejected, total, now / 1e9);
        }
      }
      if (completed + rejected < total && settings.progress() != null) {
        settings.progress().printf("  %s / %s: %d requests were never served (they cannot fit"
            + " in a replica's KV cache or were never submitted)%n", workload.name(), policy.name(),
            total - completed - rejected);
      }
      double wall = (System.nanoTime() - wallStart) / 1e9;
      return result(run, wall);
    }
  }

  private void arrive(Router router, RequestSpec spec) {
    firstArrival = Math.min(firstArrival, now);
    int[] tokens = spec.tokens().get();
    InferenceRequest req = InferenceRequest.builder()
        .requestId(spec.id())
        .model(settings.profile().model())
        .tokenIds(Arrays.copyOf(tokens, spec.promptLength()))
        .sessionKey(spec.sessionKey())
        .maxTokens(spec.outputLength())
        .stream(true)
        .build();
    if (spec.promptLength() + spec.outputLength() > settings.profile().maxModelLen()) {
      // vLLM answers 400 for a request longer than max_model_len; it never reaches a replica
      rejected++;
      return;
    }
    long t0 = System.nanoTime();
    RoutingDecision d = router.route(req);
    routing.add((System.nanoTime() - t0) / 1e3);
    if (!d.isRouted()) {
      rejected++;
      routerRejected++;
      if (firstRouterRejection == null) {
        firstRouterRejection = d.rejection().message();
      }
      return;
    }
    Integer idx = replicaById.get(d.primary().id());
    if (idx == null) {
      throw new IllegalStateException("router picked an unknown endpoint " + d.primary());
    }
    Replica r = replicas[idx];
    sessionsPerReplica.get(idx).add(spec.sessionKey());
    r.enqueue(new SimRequest(spec, tokens, now, d, blockSeed, settings.profile().blockSize()));
    if (!r.isStepping()) {
      startStep(r);
    }
  }

  private void startStep(Replica r) {
    if (r.isStepping() || !r.hasWork()) {
      return;
    }
    double work = r.scheduleStep();
    if (work < 0) {
      return;
    }
    int g = gpuOf[r.index];
    gpus[g].add(now, r.index, work);
    scheduleGpu(g);
    // vLLM publishes a step's events (the evictions of its scheduling included) once, after the
    // step has run: they go out with the STEP_DONE that follows
  }

  private void scheduleGpu(int g) {
    long t = gpus[g].nextCompletionNanos();
    if (t >= 0) {
      push(Math.max(t, now), GPU_DONE, g, gpus[g].version, null);
    }
  }

  private void scrape(Router router) {
    Map<String, EndpointMetrics> m = new LinkedHashMap<>();
    for (Replica r : replicas) {
      m.put(r.endpoint.id(), r.metrics(now));
    }
    router.updateMetrics(m);
  }

  private void publishKvEvents(Replica r) {
    if (eventSink == null) {
      return;
    }
    List<KvEvent> batch = r.kv.drainEvents();
    if (!batch.isEmpty()) {
      eventSink.onKvEvents(r.endpoint.id(), now, batch);
    }
  }

  private void push(long time, int type, int index, long version, @Nullable RequestSpec spec) {
    events.add(new Event(time, seq++, type, index, version, spec));
  }

  private final class Sink implements Replica.StepSink {
    private final Workload.Run run;
    private final Workload.Submitter submitter;

    Sink(Workload.Run run, Workload.Submitter submitter) {
      this.run = run;
      this.submitter = submitter;
    }

    @Override
    public void onToken(Replica replica, SimRequest r, long nowNanos, boolean first) {
      outputTokens++;
      if (first) {
        r.firstTokenNanos = nowNanos;
        ttft.add((nowNanos - r.arrivalNanos) / 1e6);
        if (r.decision != null) {
          r.decision.onFirstToken();
        }
      } else {
        itl.add((nowNanos - r.lastTokenNanos) / 1e6);
      }
      r.lastTokenNanos = nowNanos;
    }

    @Override
    public void onFinished(Replica replica, SimRequest r, long nowNanos) {
      completed++;
      lastFinish = Math.max(lastFinish, nowNanos);
      e2e.add((nowNanos - r.arrivalNanos) / 1e6);
      if (r.decision != null) {
        r.decision.onComplete(new Usage(r.promptLength, Math.max(0, r.cachedAtFirstAdmission),
            r.outputLength));
      }
      run.onFinished(r.spec, nowNanos, submitter);
    }
  }

  private PolicyResult result(Workload.Run run, double wallSeconds) {
    long queried = 0;
    long hit = 0;
    long preemptions = 0;
    long evictions = 0;
    int maxReq = 0;
    long sumReq = 0;
    int maxSessions = 0;
    long sumSessions = 0;
    for (Replica r : replicas) {
      queried += r.promptTokensQueried;
      hit += r.promptTokensHit;
      preemptions += r.preemptions;
      evictions += r.kv.evictions();
      maxReq = (int) Math.max(maxReq, r.requestsReceived);
      sumReq += r.requestsReceived;
      int s = sessionsPerReplica.get(r.index).size();
      maxSessions = Math.max(maxSessions, s);
      sumSessions += s;
    }
    double span = (lastFinish - (firstArrival == Long.MAX_VALUE ? 0 : firstArrival)) / 1e9;
    return new PolicyResult(
        policy.name(),
        queried == 0 ? 0 : hit / (double) queried,
        ttft.percentile(50), ttft.percentile(95), ttft.percentile(99),
        itl.percentile(50),
        e2e.percentile(50), e2e.percentile(95),
        span > 0 ? outputTokens / span : 0,
        completed,
        preemptions,
        evictions,
        maxReq,
        sumReq / (double) replicas.length,
        maxSessions,
        sumSessions / (double) replicas.length,
        routing.mean(),
        routing.percentile(99),
        run.clippedRequests(),
        rejected,
        routerRejected,
        firstRouterRejection == null ? "" : firstRouterRejection,
        lastFinish / 1e9,
        wallSeconds,
        wallSeconds > 0 ? (completed + rejected) / wallSeconds : 0,
        ttft.sortedValues());
  }
}
