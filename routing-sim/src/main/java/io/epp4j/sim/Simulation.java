package io.epp4j.sim;

import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RequestListener;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.Router;
import io.epp4j.kvevents.KvBlockIndex;
import io.epp4j.kvevents.KvEvent;
import io.epp4j.kvevents.KvEventBatch;
import io.epp4j.scorers.PdProfileHandler;
import java.io.PrintStream;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.PriorityQueue;
import java.util.Set;
import java.util.function.BiConsumer;
import java.util.function.Consumer;
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
  /** A hint another gateway's router learnt reaches the others ({@link HintBus}). */
  private static final int DELIVER = 4;
  /** The gateways' routers publish their in-flight figures ({@link HintBus}). */
  private static final int FLUSH = 5;
  /** A disaggregated request's prompt KV has reached its decode replica. */
  private static final int KV_ARRIVED = 6;

  /** The role label's values a {@code --pd} cluster gives its replicas. */
  static final String PREFILL_ROLE = "prefill";
  static final String DECODE_ROLE = "decode";
  static final String BOTH_ROLE = "both";

  private static final class Event {
    final long time;
    final long seq;
    final int type;
    final int index;
    final long version;
    final @Nullable RequestSpec spec;
    final @Nullable Runnable action;

    Event(long time, long seq, int type, int index, long version, @Nullable RequestSpec spec,
        @Nullable Runnable action) {
      this.time = time;
      this.seq = seq;
      this.type = type;
      this.index = index;
      this.version = version;
      this.spec = spec;
      this.action = action;
    }
  }

  private final Settings settings;
  private final Workload workload;
  private final Policy policy;
  private final @Nullable BiConsumer<String, KvEventBatch> kvListener;
  private final @Nullable RequestListener requestListener;
  /** Each router's index in precise mode; the replicas' events are applied to them in process. */
  private KvBlockIndex[] kvIndexes = new KvBlockIndex[0];
  /** Gateways in front of the replicas, each with its own router; requests go round-robin. */
  private int gateways = 1;
  private boolean replicated;
  private long replicationDelayNanos;
  private @Nullable HintBus bus;
  private long nextGateway;
  /** Events that are not periodic (scrapes, flushes): while there are some, time goes on. */
  private long pendingWork;
  /** {@code --pd P:D}: prefill and decode replicas; 0 and 0 for a cluster without roles. */
  private int prefillReplicas;
  private int decodeReplicas;
  /** The link the KV of a disaggregated request crosses. */
  private KvLink kvLink = KvLink.rdma400g();

  private static final java.util.Comparator<Event> ORDER =
      (a, b) -> a.time != b.time ? Long.compare(a.time, b.time) : Long.compare(a.seq, b.seq);
  /** Events that are not periodic: arrivals, steps, deliveries, transfers. */
  private final PriorityQueue<Event> events = new PriorityQueue<>(ORDER);
  /**
   * The periodic events (the next scrape, the next flush), apart so that the next event of
   * {@link #events} is the next thing that can change what a scrape or a flush sees. The loop
   * takes both queues in one (time, sequence) order.
   */
  private final PriorityQueue<Event> ticks = new PriorityQueue<>(ORDER);
  private long seq;
  private long now;

  // sized by run(); empty until then so no field is ever null
  private Replica[] replicas = new Replica[0];
  private GpuShare[] gpus = new GpuShare[0];
  private int[] gpuOf = new int[0];
  private final Map<String, Integer> replicaById = new HashMap<>();
  private long blockSeed;

  private final Samples ttft = new Samples();
  private @Nullable Consumer<RequestRecord> requestLog;
  /** For tests: sees each router once built, and again when the last request is done. */
  private @Nullable Consumer<Router> routerBuilt;
  private @Nullable Consumer<Router> routerDone;
  private final Samples itl = new Samples();
  private final Samples e2e = new Samples();
  private final Samples routing = new Samples();
  private final Samples transferMs = new Samples();
  private int disaggregated;
  private long transferredTokens;
  private long decodeHitTokens;
  /** Routing times of the decisions made in the second half of the run; see {@link #arrive}. */
  private final Samples routingWarm = new Samples();
  private List<Set<String>> sessionsPerReplica = List.of();
  private int completed;
  /** Scrapes and hint flushes made; idle stretches are skipped unless a test turns that off. */
  private long scrapes;
  private long flushes;
  private boolean skipIdleScrapes = true;
  private int rejected;
  private int routerRejected;
  private @Nullable String firstRouterRejection;
  private long outputTokens;
  private long firstArrival = Long.MAX_VALUE;
  private long lastFinish;
  private int total;

  /**
   * A simulation that hands every replica's KV events to {@code kvListener} (may be null): one
   * {@link KvEventBatch} per engine step, as vLLM publishes them, called with the replica's
   * endpoint ID when the step ends, in simulated time order. The batch's timestamp is the
   * simulated time of the step in seconds (the simulated engine's clock starts at zero).
   */
  public Simulation(Settings settings, Workload workload, Policy policy,
      @Nullable BiConsumer<String, KvEventBatch> kvListener) {
    this(settings, workload, policy, kvListener, null);
  }

  /**
   * A simulation whose router also reports every decision's lifecycle to
   * {@code requestListener} (as the router's own plugins see it).
   */
  public Simulation(Settings settings, Workload workload, Policy policy,
      @Nullable BiConsumer<String, KvEventBatch> kvListener,
      @Nullable RequestListener requestListener) {
    // a precise configuration names the block size its engines publish events in: the simulated
    // engines run with it, so the router reads events of the size the file expects
    Integer bs = policy.blockSize();
    this.settings = bs == null || bs == settings.profile().blockSize() ? settings
        : new Settings(settings.profile().withBlockSize(bs), settings.replicas(), settings.seed(),
            settings.scrapeIntervalNanos(), settings.progress());
    this.workload = workload;
    this.policy = policy;
    this.kvListener = kvListener;
    this.requestListener = requestListener;
  }

  /**
   * Puts {@code n} gateways, each with its own router, in front of the replicas; requests go to
   * them round-robin, as a load balancer would spread them. With {@code replicated}, the routers
   * share what they learn (prefixes sent, sessions, in-flight load) {@code delayNanos} after
   * they learn it, as {@code redis-replication} makes them; without, each knows only its own
   * traffic. One gateway (the default) is the single router of every other run.
   */
  public Simulation gateways(int n, boolean replicated, long delayNanos) {
    if (n < 1) {
      throw new IllegalArgumentException("gateways must be >= 1, got " + n);
    }
    if (delayNanos < 0) {
      throw new IllegalArgumentException("replication delay must be >= 0, got " + delayNanos);
    }
    this.gateways = n;
    this.replicated = replicated;
    this.replicationDelayNanos = delayNanos;
    return this;
  }

  /**
   * Gives the replicas prefill/decode roles (label {@value Endpoint#ROLE_LABEL}): for a policy
   * that disaggregates ({@link Policy#disaggregates()}), the first {@code prefill} replicas are
   * {@code prefill} and the next {@code decode} ones {@code decode}; for any other policy all of
   * them are {@code both}, the aggregated cluster on the same GPUs. The settings' replica count
   * must be {@code prefill + decode}.
   */
  public Simulation pd(int prefill, int decode) {
    if (prefill < 1 || decode < 1) {
      throw new IllegalArgumentException("a P/D cluster needs at least one prefill and one"
          + " decode replica, got " + prefill + ":" + decode);
    }
    if (prefill + decode != settings.replicas()) {
      throw new IllegalArgumentException("P/D " + prefill + ":" + decode + " is not the "
          + settings.replicas() + " replicas of the settings");
    }
    this.prefillReplicas = prefill;
    this.decodeReplicas = decode;
    return this;
  }

  /** The link disaggregated requests move their KV over (default {@link KvLink#rdma400g()}). */
  public Simulation kvLink(KvLink link) {
    this.kvLink = Objects.requireNonNull(link, "link");
    return this;
  }

  /** The endpoint of replica {@code i}: {@code 10.0.0.(i+1):8000}. */
  public static Endpoint endpoint(int i) {
    return Endpoint.parse("10.0." + (i / 250) + "." + (i % 250 + 1) + ":8000");
  }

  /** The endpoint of replica {@code i} with a prefill/decode role, or without one when null. */
  static Endpoint endpoint(int i, @Nullable String role) {
    Endpoint e = endpoint(i);
    return role == null ? e : Endpoint.parse(e.id(), Map.of(Endpoint.ROLE_LABEL, role));
  }

  /**
   * The role of replica {@code i} in this run, or null in a cluster without roles;
   * {@code disaggregates}: whether the policy runs a prefill profile.
   */
  private @Nullable String roleOf(int i, boolean disaggregates) {
    if (prefillReplicas == 0) {
      return null;
    }
    if (!disaggregates) {
      return BOTH_ROLE;
    }
    return i < prefillReplicas ? PREFILL_ROLE : DECODE_ROLE;
  }

  /**
   * One served request, as {@code --requests-csv} writes it: where it went, when it arrived
   * (simulated seconds), its time to first token and end to end, its prompt, the part of it the
   * replica had cached when it was first admitted, its output, how often it was preempted, and
   * what the replica held when it arrived (waiting and running requests, KV usage 0..1). For a
   * request prefilled on another replica: that replica ({@code prefillReplica}, -1 for one that
   * was not), the prompt tokens its decode replica ({@code replica}) held already, which did not
   * cross the link, and how long the rest took to cross it (0 for a request that was not).
   */
  public record RequestRecord(String id, String session, int replica, double arrivalSeconds,
      double ttftMs, double e2eMs, int promptTokens, int cachedTokens, int outputTokens,
      int preemptions, int waitingAtArrival, int runningAtArrival, double kvUsageAtArrival,
      int prefillReplica, int decodeCachedTokens, double transferMs) {

    /** Whether another replica computed the prompt (prefill/decode disaggregation). */
    public boolean disaggregated() {
      return prefillReplica >= 0;
    }
  }

  /**
   * Hands every request that completes to {@code log}, in simulated time order, on the thread
   * that runs the simulation. Requests the router or a replica rejected are not in it.
   */
  public Simulation requestLog(Consumer<RequestRecord> log) {
    this.requestLog = log;
    return this;
  }

  /**
   * Hands each router to {@code built} once it is built and to {@code done} when the run is over,
   * before it is closed: for tests that read a plugin's own accounts.
   */
  Simulation observeRouters(Consumer<Router> built, Consumer<Router> done) {
    this.routerBuilt = built;
    this.routerDone = done;
    return this;
  }

  /**
   * For tests: scrape (and flush the hint bus) at every tick even while nothing happens (the
   * outcome must not change).
   */
  Simulation scrapeEveryTick() {
    this.skipIdleScrapes = false;
    return this;
  }

  /** Scrapes the last {@link #run} made. */
  long scrapes() {
    return scrapes;
  }

  /** Hint bus flushes the last {@link #run} made (0 without a replicated bus). */
  long flushes() {
    return flushes;
  }

  /**
   * Runs the simulation to the last request.
   *
   * @throws io.epp4j.core.ConfigException when the policy's configuration cannot be loaded
   * @throws Workload.ArrivalTooLate when the workload would submit a request later than the
   *     simulated clock holds ({@link Workload#MAX_ARRIVAL_NANOS})
   */
  public PolicyResult run() {
    createKvIndexes();
    List<Endpoint> endpoints = createReplicas();
    blockSeed = ChainedBlockHash.seed(settings.profile().model());
    if (replicated && gateways > 1) {
      bus = new HintBus(replicationDelayNanos, (at, delivery) -> push(at, DELIVER, delivery));
    }
    long wallStart = System.nanoTime();
    Router[] routers = new Router[gateways];
    try {
      for (int g = 0; g < gateways; g++) {
        // gateway 0 is seeded as the single router always was, so one gateway changes nothing
        Router.Builder rb = Router.builder().ticker(() -> now).randomSeed(settings.seed() + g);
        if (kvIndexes.length > 0) {
          rb.service(KvBlockIndex.class, kvIndexes[g]);
        }
        rb.endpoints(endpoints);
        configure(rb);
        HintBus b = bus;
        if (b != null) {
          rb.listener(b.capture(g));
        }
        routers[g] = rb.build();
        if (routerBuilt != null) {
          routerBuilt.accept(routers[g]);
        }
        if (b != null) {
          b.register(routers[g].hints());
        }
      }
      Workload.Run run = workload.start(settings.seed());
      total = run.totalRequests();
      Workload.Submitter submitter = (at, spec) ->
          push(Math.max(at, now), ARRIVAL, 0, 0, spec);
      push(0, SCRAPE, 0, 0, null);
      if (bus != null) {
        push(0, FLUSH, 0, 0, null);
      }
      run.begin(submitter);
      processEvents(routers, new Sink(run, submitter));
      if (routerDone != null) {
        for (Router r : routers) {
          routerDone.accept(r);
        }
      }
      reportUnserved();
      double wall = (System.nanoTime() - wallStart) / 1e9;
      return result(run, wall);
    } finally {
      for (Router r : routers) {
        if (r != null) {
          r.close();
        }
      }
    }
  }

  /**
   * Precise mode in process: gives the router a KV index that the replicas' events go straight
   * into, in place of vLLM's ZeroMQ publisher and epp4j's subscriber.
   */
  private void createKvIndexes() {
    if (policy.kvEvents()) {
      // one per router, as each gateway subscribes to the engines' events itself
      kvIndexes = new KvBlockIndex[gateways];
      for (int g = 0; g < gateways; g++) {
        kvIndexes[g] = KvBlockIndex.builder().ticker(() -> now)
            .defaultBlockSize(settings.profile().blockSize()).build();
      }
    }
  }

  /** Creates the replicas and their GPU shares; returns their endpoints in replica order. */
  private List<Endpoint> createReplicas() {
    HardwareProfile hw = settings.profile();
    int n = settings.replicas();
    int numGpus = (n + hw.replicasPerGpu() - 1) / hw.replicasPerGpu();
    replicas = new Replica[n];
    gpus = new GpuShare[numGpus];
    gpuOf = new int[n];
    sessionsPerReplica = new ArrayList<>(n);
    List<Endpoint> endpoints = new ArrayList<>(n);
    int blocks = hw.kvBlocksPerReplica();
    for (int g = 0; g < numGpus; g++) {
      gpus[g] = new GpuShare();
    }
    boolean events = kvListener != null || kvIndexes.length > 0;
    boolean disaggregates = prefillReplicas > 0 && policy.disaggregates();
    for (int i = 0; i < n; i++) {
      Endpoint e = endpoint(i, roleOf(i, disaggregates));
      endpoints.add(e);
      replicas[i] = new Replica(i, e, hw, blocks);
      if (events) {
        replicas[i].kv.enableEvents();
      }
      gpuOf[i] = i % numGpus;
      replicaById.put(e.id(), i);
      sessionsPerReplica.add(new HashSet<>());
    }
    return endpoints;
  }

  /** The caller's request listener and the policy's configuration. */
  private void configure(Router.Builder rb) {
    if (requestListener != null) {
      rb.listener(requestListener);
    }
    if (policy.file() != null) {
      rb.configFile(policy.file());
    } else if (policy.yaml() != null) {
      rb.configYaml(policy.yaml(), "policy " + policy.name());
    }
  }

  /** The discrete-event loop: runs until no event is left, printing progress now and then. */
  private void processEvents(Router[] routers, Sink sink) {
    int[] finished = new int[replicas.length];
    long nextProgress = System.nanoTime() + 2_000_000_000L;
    long processed = 0;
    while (!events.isEmpty() || !ticks.isEmpty()) {
      Event ev = ticks.isEmpty()
          || (!events.isEmpty() && ORDER.compare(events.peek(), ticks.peek()) < 0)
          ? events.poll() : ticks.poll();
      now = ev.time;
      if (ev.type != SCRAPE && ev.type != FLUSH) {
        pendingWork--;
      }
      HintBus b = bus;
      if (b != null) {
        b.tick(now);
      }
      switch (ev.type) {
        case ARRIVAL -> arrive(routers[(int) (nextGateway++ % routers.length)],
            Objects.requireNonNull(ev.spec, "arrival without a request"), sink);
        case SCRAPE -> scrapeAndReschedule(routers);
        case DELIVER -> Objects.requireNonNull(ev.action, "delivery without a hint").run();
        case KV_ARRIVED -> Objects.requireNonNull(ev.action, "transfer without a request").run();
        case FLUSH -> {
          long next = Objects.requireNonNull(b, "flush without a hint bus").flushInFlight(now);
          flushes++;
          if (completed + rejected < total && pendingWork > 0) {
            push(nextFlush(b, next), FLUSH, 0, 0, null);
          }
        }
        case GPU_DONE -> gpuDone(ev, finished);
        case STEP_DONE -> stepDone(replicas[ev.index], sink);
        default -> throw new IllegalStateException("unknown event " + ev.type);
      }
      if ((++processed & 0x3FFF) == 0 && settings.progress() != null
          && System.nanoTime() > nextProgress) {
        nextProgress = System.nanoTime() + 2_000_000_000L;
        settings.progress().printf("  %s / %s: %d of %d requests, simulated %.1f s%n",
            workload.name(), policy.name(), completed + rejected, total, now / 1e9);
      }
    }
  }

  private void scrapeAndReschedule(Router[] routers) {
    for (Router r : routers) {
      scrape(r);
    }
    scrapes++;
    // keep scraping while anything else can still happen
    if (completed + rejected < total && pendingWork > 0) {
      push(nextScrape(), SCRAPE, 0, 0, null);
    }
  }

  /**
   * When the next scrape is due. A replica's figures change only in an event, so the scrapes
   * between now and the next event would all publish what this one did: while nothing happens
   * for more than two intervals, the next scrape is the last tick before that event. The router
   * then holds the same figures, stamped with the same time, as if every tick had run (a tick
   * at the event's own time came after the event, and still does), and idle simulated time (a
   * trace's gaps, slow Poisson arrivals, long think times) costs no wall time. A hint bus's
   * flushes are periodic too and change no replica's figures; its deliveries are events.
   */
  private long nextScrape() {
    return lastTickBeforeNextEvent(settings.scrapeIntervalNanos());
  }

  /**
   * When the hint bus's next flush is due, {@code due} unless it is {@link HintBus#quiet}: then
   * no router has anything in flight, and until an event routes or finishes a request every
   * flush would send nothing, so the next one is the last tick before that event, as for
   * scrapes. The heartbeats of the flushes left out are accounted for by the bus.
   */
  private long nextFlush(HintBus b, long due) {
    if (!b.quiet()) {
      return due;
    }
    long at = lastTickBeforeNextEvent(HintBus.FLUSH_INTERVAL_NANOS);
    if (at - due > 0) {
      b.skipFlushes(due, at);
    }
    return at;
  }

  /**
   * {@code now} plus the whole number of {@code interval}s (at least one) that ends last before
   * the next event that is not periodic; {@code now + interval} when none is pending or idle
   * time is not skipped.
   */
  private long lastTickBeforeNextEvent(long interval) {
    Event next = events.peek();
    if (!skipIdleScrapes || next == null) {
      return now + interval;
    }
    long n = Math.max(1, (next.time - now - 1) / interval);
    return now + n * interval;
  }

  /** A GPU finished some replicas' work: their steps end after each one's step overhead. */
  private void gpuDone(Event ev, int[] finished) {
    GpuShare gpu = gpus[ev.index];
    if (ev.version != gpu.version) {
      return; // superseded by a later reschedule of this GPU
    }
    int k = gpu.popFinished(now, finished);
    for (int i = 0; i < k; i++) {
      Replica r = replicas[finished[i]];
      push(now + Math.round(r.stepOverheadSeconds() * 1e9), STEP_DONE, r.index, 0, null);
    }
    scheduleGpu(ev.index);
  }

  private void stepDone(Replica r, Replica.StepSink sink) {
    r.completeStep(now, sink);
    publishKvEvents(r);
    startStep(r);
  }

  private void reportUnserved() {
    if (completed + rejected < total && settings.progress() != null) {
      settings.progress().printf("  %s / %s: %d requests were never served (they cannot fit"
          + " in a replica's KV cache or were never submitted)%n", workload.name(), policy.name(),
          total - completed - rejected);
    }
  }

  private void arrive(Router router, RequestSpec spec, Sink sink) {
    firstArrival = Math.min(firstArrival, now);
    if (spec.promptLength() + spec.outputLength() > settings.profile().maxModelLen()) {
      // vLLM answers 400 for a request longer than max_model_len; it never reaches a replica
      rejected++;
      rejected += sink.run.onRejected(spec, true, now, sink.submitter);
      return;
    }
    int[] tokens = spec.tokens().get();
    InferenceRequest req = InferenceRequest.builder()
        .requestId(spec.id())
        .model(settings.profile().model())
        .tokenIds(Arrays.copyOf(tokens, spec.promptLength()))
        .sessionKey(spec.sessionKey())
        .maxTokens(spec.outputLength())
        .stream(true)
        .build();
    long t0 = System.nanoTime();
    RoutingDecision d = router.route(req);
    double micros = (System.nanoTime() - t0) / 1e3;
    // A default run makes 288-1536 decisions per policy in about a second of wall time: the first
    // few hundred run in the interpreter and C1 code and dominate the mean (the JIT's C2 tier
    // needs thousands of calls). The second half of the run is past that and shows what a
    // long-running router costs per decision; it still includes GC pauses and preemption.
    if (routing.size() >= total / 2) {
      routingWarm.add(micros);
    }
    routing.add(micros);
    if (!d.isRouted()) {
      rejected++;
      routerRejected++;
      if (firstRouterRejection == null) {
        firstRouterRejection = Objects.requireNonNull(d.rejection()).message();
      }
      // the gateway answers an error; the client counts it and goes on
      rejected += sink.run.onRejected(spec, false, now, sink.submitter);
      return;
    }
    Integer idx = replicaById.get(d.primary().id());
    if (idx == null) {
      throw new IllegalStateException("router picked an unknown endpoint " + d.primary());
    }
    Replica r = replicas[idx];
    sessionsPerReplica.get(idx).add(spec.sessionKey());
    SimRequest served = new SimRequest(spec, tokens, now, d, blockSeed,
        settings.profile().blockSize());
    // a gateway reads the prefill pick as PdProfileHandler names it and hands it to the decode
    // side (x-prefiller-host-port); a pick equal to the decode endpoint means no disaggregation
    Endpoint prefill = PdProfileHandler.prefillEndpoint(d);
    if (prefill != null && !prefill.id().equals(d.primary().id())) {
      Integer p = replicaById.get(prefill.id());
      if (p == null) {
        throw new IllegalStateException("router picked an unknown prefill endpoint " + prefill);
      }
      startPrefill(served, idx, replicas[p], tokens);
      return;
    }
    r.enqueue(served);
    if (!r.isStepping()) {
      startStep(r);
    }
  }

  /**
   * The prefill half of a disaggregated request, as vLLM's P/D proxy sends it to the prefill
   * server: the prompt with {@code max_tokens} 1. Its replica computes the prompt's KV (taking
   * what its prefix cache holds) and keeps the blocks until the decode replica has read them;
   * the decode request joins the decode replica's queue when the prefill is done.
   */
  private void startPrefill(SimRequest decode, int decodeIdx, Replica prefill, int[] tokens) {
    RequestSpec spec = decode.spec;
    int[] prefillTokens = Arrays.copyOf(tokens, spec.promptLength() + 1);
    RequestSpec prefillSpec = new RequestSpec(spec.id() + "/prefill", spec.sessionKey(),
        spec.promptLength(), 1, () -> prefillTokens, spec.clipped(), spec.tag());
    SimRequest pr = new SimRequest(prefillSpec, prefillTokens, now, null, blockSeed,
        settings.profile().blockSize());
    pr.decodeRequest = decode;
    pr.decodeReplica = decodeIdx;
    decode.remotePrefill = true;
    decode.prefillRequest = pr;
    decode.prefillReplica = prefill.index;
    disaggregated++;
    prefill.enqueue(pr);
    if (!prefill.isStepping()) {
      startStep(prefill);
    }
  }

  /** The prefill of {@code pr} is done: its decode request goes to the decode replica's queue. */
  private void prefillDone(SimRequest pr) {
    SimRequest decode = Objects.requireNonNull(pr.decodeRequest, "not a prefill request");
    decode.cachedAtFirstAdmission = pr.cachedAtFirstAdmission;
    decode.preemptions += pr.preemptions;
    Replica d = replicas[pr.decodeReplica];
    d.enqueue(decode);
    if (!d.isStepping()) {
      startStep(d);
    }
  }

  /**
   * Starts the transfers of the decode requests {@code r} admitted: each moves the KV of the
   * prompt tokens {@code r} had not cached, {@code bytes / bandwidth + latency}.
   */
  private void startTransfers(Replica r) {
    for (SimRequest decode : r.drainKvTransfers()) {
      long tokens = decode.promptLength - decode.localHitTokens;
      long nanos = kvLink.transferNanos(tokens, settings.profile().kvBytesPerToken());
      transferredTokens += tokens;
      decodeHitTokens += decode.localHitTokens;
      transferMs.add(nanos / 1e6);
      decode.transferNanos = nanos;
      push(now + nanos, KV_ARRIVED, () -> kvArrived(r, decode));
    }
  }

  /** The KV is on the decode replica: the prefill replica frees its copy, both go on. */
  private void kvArrived(Replica decodeReplica, SimRequest decode) {
    decodeReplica.kvArrived(decode);
    Replica prefill = replicas[decode.prefillReplica];
    prefill.releasePrefilled(Objects.requireNonNull(decode.prefillRequest, "no prefill"));
    startStep(prefill);
    startStep(decodeReplica);
  }

  private void startStep(Replica r) {
    if (r.isStepping() || !r.hasWork()) {
      return;
    }
    double work = r.scheduleStep();
    startTransfers(r);
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
    List<KvEvent> events = r.kv.drainEvents();
    if (events.isEmpty()) {
      return;
    }
    String id = r.endpoint.id();
    // a batch's wall-clock stamp only feeds the index's lag metric, which means nothing in
    // simulated time: the indexes get the batch unstamped
    for (KvBlockIndex index : kvIndexes) {
      index.apply(id, KvEventBatch.of(0, events));
    }
    if (kvListener != null) {
      kvListener.accept(id, KvEventBatch.of(now / 1e9, events));
    }
  }

  private void push(long time, int type, int index, long version, @Nullable RequestSpec spec) {
    Event e = new Event(time, seq++, type, index, version, spec, null);
    if (type == SCRAPE || type == FLUSH) {
      ticks.add(e);
    } else {
      pendingWork++;
      events.add(e);
    }
  }

  private void push(long time, int type, Runnable action) {
    pendingWork++;
    events.add(new Event(time, seq++, type, 0, 0, null, action));
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
      if (r.isPrefillOnly()) {
        return; // the prefill server's token goes back to the proxy, not to the client
      }
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
      if (r.isPrefillOnly()) {
        prefillDone(r);
        return;
      }
      completed++;
      lastFinish = Math.max(lastFinish, nowNanos);
      e2e.add((nowNanos - r.arrivalNanos) / 1e6);
      Consumer<RequestRecord> log = requestLog;
      if (log != null) {
        log.accept(new RequestRecord(r.spec.id(), r.spec.sessionKey(), replica.index,
            r.arrivalNanos / 1e9, (r.firstTokenNanos - r.arrivalNanos) / 1e6,
            (nowNanos - r.arrivalNanos) / 1e6, r.promptLength,
            Math.max(0, r.cachedAtFirstAdmission), r.outputLength, r.preemptions,
            r.waitingAtArrival, r.runningAtArrival, r.kvUsageAtArrival,
            r.prefillRequest != null ? r.prefillReplica : -1,
            r.prefillRequest != null ? Math.max(0, r.localHitTokens) : 0,
            r.prefillRequest != null && r.transferNanos >= 0 ? r.transferNanos / 1e6 : 0));
      }
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
        // no prompt looked up (every request refused or too long): no figure, not 0% hits
        queried == 0 ? Double.NaN : hit / (double) queried,
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
        routingWarm.mean(),
        routingWarm.percentile(99),
        run.clippedRequests(),
        rejected,
        routerRejected,
        firstRouterRejection == null ? "" : firstRouterRejection,
        lastFinish / 1e9,
        wallSeconds,
        wallSeconds > 0 ? (completed + rejected) / wallSeconds : 0,
        ttft.sortedValues(),
        prefillReplicas == 0 && disaggregated == 0 ? PdStats.NONE
            : new PdStats(prefillReplicas > 0, disaggregated, transferredTokens, decodeHitTokens,
                transferMs.mean(), transferMs.percentile(95), itl.percentile(95)),
        total - completed - rejected);
  }
}
