package io.epp4j.sim;

import io.epp4j.api.Endpoint;
import io.epp4j.kvevents.KvEvent;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;
import org.jspecify.annotations.Nullable;

/**
 * The simulator's replicas on a wall clock: the same {@link Replica} scheduler, {@link KvCache}
 * and {@link GpuShare} step-time model as {@link Simulation}, but a step ends when real time
 * times the speed factor reaches its simulated end, not when the event queue gets there.
 *
 * <p>One driver thread runs every replica, exactly as the simulation's loop does (a step's GPU
 * work is shared with the replicas on the same GPU, then its CPU overhead follows); callers add
 * requests from any thread. Emulated time is {@code (System.nanoTime() - start) * speed}, so at
 * speed 20 a step the profile prices at 20 ms takes 1 ms of wall time.
 */
final class EmulatedCluster implements AutoCloseable {

  /** What a request hears from its replica; called on the driver thread, must not block. */
  interface Listener {
    /** One output token ({@code first} for the first one). */
    void onToken(int tokenId, boolean first);

    /** The last token was generated; {@code cachedTokens} is the prefix-cache hit at admission. */
    void onFinished(int promptTokens, int cachedTokens, int completionTokens);

    /** The cluster stopped before the request finished. */
    void onAborted();
  }

  /** Receives each replica's KV events, one call per engine step that produced any. */
  interface KvSink {
    void publish(int replica, List<KvEvent> events);
  }

  /** vLLM's TTFT histogram bucket bounds, in seconds. */
  static final double[] TTFT_BUCKETS = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25,
      0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};

  /** A scrape of one replica, in vLLM's terms. */
  record Stats(int waiting, int running, double kvUsage, long prefixQueries, long prefixHits,
      int numGpuBlocks, int blockSize, long[] ttftBucketCounts, double ttftSumSeconds,
      long ttftCount, long promptTokens, long generationTokens, long requestsFinished,
      Set<String> runningLoraAdapters, Set<String> waitingLoraAdapters) {}

  private final HardwareProfile hw;
  private final double speed;
  private final KvSink kvSink;
  private final Replica[] replicas;
  private final GpuShare[] gpus;
  private final int[] gpuOf;
  private final long blockSeed;
  private final long[] stepDoneAt;
  private final Map<SimRequest, Listener> listeners = new HashMap<>();
  private final long[][] ttftBuckets;
  private final double[] ttftSum;
  private final long[] ttftCount;
  private final long[] promptTokens;
  private final long[] generationTokens;
  private final long[] finished;

  private final ReentrantLock lock = new ReentrantLock();
  private final Condition changed = lock.newCondition();
  private final Thread driver;
  private final long startNanos = System.nanoTime();
  private long nextId;
  private boolean closed;
  private @Nullable Throwable failure;
  private int maxLoras;

  EmulatedCluster(HardwareProfile hw, int n, double speed, long seed, KvSink kvSink) {
    if (n < 1) {
      throw new IllegalArgumentException("replicas must be >= 1");
    }
    if (!(speed > 0) || Double.isInfinite(speed)) {
      throw new IllegalArgumentException("speed must be a positive number, got " + speed);
    }
    this.hw = hw;
    this.speed = speed;
    this.kvSink = kvSink;
    int numGpus = (n + hw.replicasPerGpu() - 1) / hw.replicasPerGpu();
    replicas = new Replica[n];
    gpus = new GpuShare[numGpus];
    gpuOf = new int[n];
    stepDoneAt = new long[n];
    Arrays.fill(stepDoneAt, -1);
    for (int g = 0; g < numGpus; g++) {
      gpus[g] = new GpuShare();
    }
    for (int i = 0; i < n; i++) {
      // the endpoint only names the replica inside the model; the server knows its own address
      replicas[i] = new Replica(i, Endpoint.of("127.0.0.1", 1 + i), hw, hw.kvBlocksPerReplica());
      replicas[i].kv.enableEvents();
      gpuOf[i] = i % numGpus;
    }
    ttftBuckets = new long[n][TTFT_BUCKETS.length];
    ttftSum = new double[n];
    ttftCount = new long[n];
    promptTokens = new long[n];
    generationTokens = new long[n];
    finished = new long[n];
    blockSeed = ChainedBlockHash.seed(hw.model());
    nextId = seed;
    driver = new Thread(this::drive, "epp4j-emulator-driver");
    driver.setDaemon(true);
    driver.start();
  }

  HardwareProfile profile() {
    return hw;
  }

  int size() {
    return replicas.length;
  }

  /** Emulated nanoseconds since the cluster started. */
  private long now() {
    return (long) ((System.nanoTime() - startNanos) * speed);
  }

  /**
   * Queues a request on replica {@code replica}: {@code prompt} then {@code maxTokens} generated
   * tokens (filler IDs). The caller has checked it fits the model's context.
   */
  void submit(int replica, int[] prompt, int maxTokens, Listener listener) {
    submit(replica, prompt, maxTokens, -1, null, null, listener);
  }

  /**
   * As {@link #submit(int, int[], int, Listener)} for a request on LoRA adapter
   * {@code loraName} (id {@code loraId}; null for the base model) with {@code cacheSalt}: like
   * vLLM, its blocks hash apart from the same tokens under another adapter or salt, and its KV
   * events carry both.
   *
   * @return the request, for {@link #abort}; null when the cluster is closed (the listener
   *     heard {@link Listener#onAborted()})
   */
  @Nullable SimRequest submit(int replica, int[] prompt, int maxTokens, int loraId,
      @Nullable String loraName, @Nullable String cacheSalt, Listener listener) {
    return submit(replica, prompt, maxTokens, loraId, loraName, cacheSalt, null, listener);
  }

  /**
   * As {@link #submit(int, int[], int, int, String, String, Listener)} with a request's
   * {@code seed}: as with vLLM's, the same prompt with the same seed generates the same token
   * IDs; without one, each request draws its own.
   */
  @Nullable SimRequest submit(int replica, int[] prompt, int maxTokens, int loraId,
      @Nullable String loraName, @Nullable String cacheSalt, @Nullable Long outputSeed,
      Listener listener) {
    int[] tokens = Arrays.copyOf(prompt, prompt.length + maxTokens);
    lock.lock();
    try {
      if (closed) {
        listener.onAborted();
        return null;
      }
      long id = nextId++;
      // filler output in the model's ordinary vocabulary (Llama's is smaller than Qwen3's)
      long outputKey = outputSeed == null ? SyntheticTokens.key(id, 0x6f7574L)
          : SyntheticTokens.key(outputSeed, 0x73656564L, Arrays.hashCode(prompt));
      SyntheticTokens.fill(outputKey, tokens, prompt.length, maxTokens, hw.ordinaryTokens());
      RequestSpec spec = new RequestSpec("emu-" + id, "", prompt.length, maxTokens,
          () -> tokens, false, "");
      long now = now(); // one instant for arrival and step start, as in the simulation
      long seed = loraName == null && cacheSalt == null ? blockSeed
          : ChainedBlockHash.seed(hw.model() + "\u0000" + (loraName == null ? "" : loraName)
              + "\u0000" + (cacheSalt == null ? "" : cacheSalt));
      SimRequest r = new SimRequest(spec, tokens, now, null, seed, hw.blockSize());
      r.loraId = loraName == null ? -1 : loraId;
      r.loraName = loraName;
      r.cacheSalt = cacheSalt;
      listeners.put(r, listener);
      promptTokens[replica] += prompt.length;
      Replica rep = replicas[replica];
      rep.enqueue(r);
      startStep(rep, now);
      changed.signalAll();
      return r;
    } finally {
      lock.unlock();
    }
  }

  /**
   * Drops request {@code r} of replica {@code replica} (its client went away), as vLLM aborts
   * it: it leaves the queue or the running batch, its blocks are freed and its listener hears
   * nothing more. Nothing happens when it has finished already.
   */
  void abort(int replica, SimRequest r) {
    lock.lock();
    try {
      if (listeners.remove(r) == null) {
        return; // finished, or aborted by close()
      }
      replicas[replica].abort(r);
      changed.signalAll();
    } finally {
      lock.unlock();
    }
  }

  /**
   * Limits every replica to {@code n} LoRA adapters per step, as vLLM's {@code --max-loras}
   * (0: no limit, the default).
   */
  void maxLoras(int n) {
    lock.lock();
    try {
      for (Replica r : replicas) {
        r.maxLoras(n);
      }
      maxLoras = n;
    } finally {
      lock.unlock();
    }
  }

  /** The limit {@link #maxLoras(int)} set; 0 for none. */
  int maxLoras() {
    lock.lock();
    try {
      return maxLoras;
    } finally {
      lock.unlock();
    }
  }

  Stats stats(int i) {
    lock.lock();
    try {
      Replica r = replicas[i];
      Set<String> runningAdapters = new TreeSet<>();
      Set<String> waitingAdapters = new TreeSet<>();
      r.loraAdapters(runningAdapters, waitingAdapters);
      // the gauges as vLLM shows them: computed once per step, when the step ends
      return new Stats(r.statsWaiting(), r.statsRunning(), r.statsKvUsage(), r.promptTokensQueried,
          r.promptTokensHit, r.kv.numBlocks(), r.kv.blockSize(), ttftBuckets[i].clone(),
          ttftSum[i], ttftCount[i], promptTokens[i], generationTokens[i], finished[i],
          runningAdapters, waitingAdapters);
    } finally {
      lock.unlock();
    }
  }

  /** Blocks in replica {@code i}'s prefix cache. */
  int cachedBlocks(int i) {
    lock.lock();
    try {
      return replicas[i].kv.cachedBlocks();
    } finally {
      lock.unlock();
    }
  }

  /** Whether replica {@code i} has nothing queued or running. */
  boolean idle(int i) {
    lock.lock();
    try {
      return !replicas[i].hasWork() && !replicas[i].isStepping();
    } finally {
      lock.unlock();
    }
  }

  /** Stops the driver; requests still in flight hear {@link Listener#onAborted()}. */
  @Override
  public void close() {
    lock.lock();
    try {
      if (closed) {
        return;
      }
      closed = true;
      for (Listener l : listeners.values()) {
        l.onAborted();
      }
      listeners.clear();
      changed.signalAll();
    } finally {
      lock.unlock();
    }
    try {
      driver.join(5_000);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  /** The simulation's event loop with a wall-clock wait between events. */
  private void drive() {
    int[] done = new int[replicas.length];
    lock.lock();
    try {
      while (!closed) {
        long next = nextEventAt();
        long now = now();
        if (next < 0 || next > now) {
          long waitNanos = next < 0 ? TimeUnit.SECONDS.toNanos(1)
              : Math.max(1, (long) Math.ceil((next - now) / speed));
          changed.awaitNanos(waitNanos);
          continue;
        }
        // the events due now, in the simulation's order: GPU completions, then step ends
        for (int g = 0; g < gpus.length; g++) {
          long t = gpus[g].nextCompletionNanos();
          if (t >= 0 && t <= now) {
            int k = gpus[g].popFinished(t, done);
            for (int j = 0; j < k; j++) {
              Replica r = replicas[done[j]];
              stepDoneAt[r.index] = t + Math.round(r.stepOverheadSeconds() * 1e9);
            }
          }
        }
        for (Replica r : replicas) {
          long t = stepDoneAt[r.index];
          if (t >= 0 && t <= now) {
            stepDoneAt[r.index] = -1;
            r.completeStep(t, sink);
            List<KvEvent> events = r.kv.drainEvents();
            if (!events.isEmpty()) {
              kvSink.publish(r.index, events);
            }
            startStep(r, t);
          }
        }
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    } catch (RuntimeException | Error e) {
      // a defect of the model: every request would wait for ever; end them all instead, as a
      // dead vLLM engine does, and say so
      failure = e;
      closed = true;
      for (Listener l : listeners.values()) {
        l.onAborted();
      }
      listeners.clear();
      System.err.println("error: the emulated engine stopped: " + e);
      e.printStackTrace();
    } finally {
      lock.unlock();
    }
  }

  /**
   * What stopped the engine's driver, or null while it runs (or after {@link #close}). Once set,
   * requests in flight have heard {@link Listener#onAborted()} and new ones hear it at once.
   */
  @Nullable Throwable failure() {
    lock.lock();
    try {
      return failure;
    } finally {
      lock.unlock();
    }
  }

  private long nextEventAt() {
    long next = -1;
    for (GpuShare g : gpus) {
      long t = g.nextCompletionNanos();
      if (t >= 0 && (next < 0 || t < next)) {
        next = t;
      }
    }
    for (long t : stepDoneAt) {
      if (t >= 0 && (next < 0 || t < next)) {
        next = t;
      }
    }
    return next;
  }

  private void startStep(Replica r, long now) {
    if (r.isStepping() || stepDoneAt[r.index] >= 0 || !r.hasWork()) {
      return;
    }
    double work = r.scheduleStep();
    if (work >= 0) {
      gpus[gpuOf[r.index]].add(now, r.index, work);
    }
  }

  private final Replica.StepSink sink = new Replica.StepSink() {
    @Override
    public void onToken(Replica replica, SimRequest r, long nowNanos, boolean first) {
      int i = replica.index;
      generationTokens[i]++;
      if (first) {
        double s = Math.max(0, nowNanos - r.arrivalNanos) / 1e9;
        ttftSum[i] += s;
        ttftCount[i]++;
        for (int b = 0; b < TTFT_BUCKETS.length; b++) {
          if (s <= TTFT_BUCKETS[b]) {
            ttftBuckets[i][b]++;
          }
        }
      }
      Listener l = listeners.get(r);
      if (l != null) {
        l.onToken(r.tokens[r.promptLength + r.numOutput - 1], first);
      }
    }

    @Override
    public void onFinished(Replica replica, SimRequest r, long nowNanos) {
      finished[replica.index]++;
      Listener l = listeners.remove(r);
      if (l != null) {
        l.onFinished(r.promptLength, Math.max(0, r.cachedAtFirstAdmission), r.outputLength);
      }
    }
  };
}
