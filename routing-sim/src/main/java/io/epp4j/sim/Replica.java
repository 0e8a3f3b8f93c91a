package io.epp4j.sim;

import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;

/**
 * One simulated vLLM replica: a waiting queue, a running batch and a {@link KvCache}, stepped by
 * the v1 scheduler's rules.
 *
 * <p>Each step first serves running requests in order (a decode is one token, a prefill gets a
 * chunk), all within {@code max_num_batched_tokens}; a running request that cannot get a block
 * preempts the newest running request (its blocks are freed and it is recomputed later, from the
 * front of the queue). Only when nothing was preempted does the step admit waiting requests, in
 * arrival order, while {@code max_num_seqs}, the token budget and free blocks allow (blocks for a
 * request's whole sequence, though it may compute only a chunk of it); an admitted request takes
 * its cached prefix from the prefix cache first. The full blocks a step will compute enter the
 * prefix cache as the step is planned, as in vLLM, so a request admitted later in the same step
 * hits the prefix that one admitted before it is computing. With a {@link #maxLoras} limit, a
 * request whose adapter would exceed it is passed over and keeps its place.
 */
final class Replica {

  /** Receives what a finished step produced. */
  interface StepSink {
    /** A token was generated for {@code r} ({@code first} for the first output token). */
    void onToken(Replica replica, SimRequest r, long nowNanos, boolean first);

    /** {@code r} generated its last token and left the replica. */
    void onFinished(Replica replica, SimRequest r, long nowNanos);
  }

  final int index;
  final Endpoint endpoint;
  final KvCache kv;
  private final HardwareProfile hw;
  private final ArrayDeque<SimRequest> waiting = new ArrayDeque<>();
  private final List<SimRequest> running = new ArrayList<>();
  /** Decode requests admitted with blocks for their prompt, waiting for its KV to arrive. */
  private final List<SimRequest> awaitingKv = new ArrayList<>();
  /** Decode requests admitted since the last {@link #drainKvTransfers()}. */
  private final List<SimRequest> kvTransfers = new ArrayList<>();

  private SimRequest[] stepRequests = new SimRequest[64];
  private int[] stepTokens = new int[64];
  private int stepSize;
  private boolean stepping;
  private int maxLoras;

  long preemptions;
  /**
   * vLLM's prefix-cache counters ({@code vllm:prefix_cache_queries}/{@code hits}), in tokens:
   * queried and hit when a request is admitted for the first time.
   */
  long promptTokensQueried;
  long promptTokensHit;
  /**
   * The same for the admissions of preempted requests, which vLLM keeps apart from the counters
   * above ({@code preempted_queries}/{@code preempted_hits}): a recomputation finding its own
   * freed blocks is not a prefix the cache was asked to share.
   */
  long preemptedTokensQueried;
  long preemptedTokensHit;
  long requestsReceived;

  /**
   * The gauges as of the end of the last step: vLLM's scheduler computes the figures its
   * {@code /metrics} shows ({@code make_stats}: running and waiting requests, KV usage) once per
   * step, when the step's output is processed, so a scrape between steps shows the last step's
   * figures, not requests that arrived since.
   */
  private int statsWaiting;
  private int statsRunning;
  private double statsKvUsage;

  /**
   * Sets how many LoRA adapters one step may run, as vLLM's {@code --max-loras}: a waiting
   * request on another adapter than those of the step's running requests waits, once they are
   * that many, and the requests behind it may go first. 0 (the default): no limit.
   */
  void maxLoras(int n) {
    if (n < 0) {
      throw new IllegalArgumentException("maxLoras must be >= 0, got " + n);
    }
    maxLoras = n;
  }

  private java.util.Set<Integer> stepLoras() {
    java.util.Set<Integer> loras = new java.util.HashSet<>();
    for (int i = 0; i < stepSize; i++) {
      if (stepRequests[i].loraId >= 0) {
        loras.add(stepRequests[i].loraId);
      }
    }
    return loras;
  }

  Replica(int index, Endpoint endpoint, HardwareProfile hw, int numBlocks) {
    this.index = index;
    this.endpoint = endpoint;
    this.hw = hw;
    this.kv = new KvCache(numBlocks, hw.blockSize());
  }

  void enqueue(SimRequest r) {
    r.waitingAtArrival = waiting.size();
    r.runningAtArrival = running.size();
    r.kvUsageAtArrival = kv.usage();
    waiting.addLast(r);
    requestsReceived++;
  }

  boolean isStepping() {
    return stepping;
  }

  boolean hasWork() {
    return !waiting.isEmpty() || !running.isEmpty();
  }

  int waitingCount() {
    return waiting.size();
  }

  int runningCount() {
    return running.size();
  }

  /**
   * Adds the LoRA adapters of the running requests to {@code runningAdapters} and those of the
   * waiting ones to {@code waitingAdapters} (base-model requests have none).
   */
  void loraAdapters(java.util.Set<String> runningAdapters, java.util.Set<String> waitingAdapters) {
    for (SimRequest r : running) {
      if (r.loraName != null) {
        runningAdapters.add(r.loraName);
      }
    }
    for (SimRequest r : waiting) {
      if (r.loraName != null) {
        waitingAdapters.add(r.loraName);
      }
    }
  }

  /** Waiting requests as the last completed step left them (vLLM's gauge); 0 before any step. */
  int statsWaiting() {
    return statsWaiting;
  }

  /** Running requests as the last completed step left them (vLLM's gauge). */
  int statsRunning() {
    return statsRunning;
  }

  /** KV-cache usage as the last completed step left it (vLLM's gauge). */
  double statsKvUsage() {
    return statsKvUsage;
  }

  /**
   * What a scrape of this replica would show now: the gauges as the last completed step left
   * them (all 0 before the first step).
   */
  EndpointMetrics metrics(long nowNanos) {
    return EndpointMetrics.builder()
        .waitingRequests(statsWaiting)
        .runningRequests(statsRunning)
        .kvCacheUsage(statsKvUsage)
        .kvCapacityBlocks(kv.numBlocks())
        .blockSizeTokens(kv.blockSize())
        .scrapedAtNanos(nowNanos)
        .build();
  }

  /**
   * Plans the next step. Returns the step's cost on an unshared GPU in seconds, or a negative
   * value when there is nothing to run.
   */
  double scheduleStep() {
    if (stepping) {
      throw new IllegalStateException("replica " + index + " is already stepping");
    }
    stepSize = 0;
    int budget = hw.maxNumBatchedTokens();
    boolean preempted = false;

    for (int i = 0; i < running.size() && budget > 0; ) {
      SimRequest r = running.get(i);
      int n = Math.min(r.numTokens() - r.numComputed, budget);
      if (n <= 0) {
        i++;
        continue;
      }
      boolean scheduled = false;
      while (true) {
        if (kv.allocateSlots(r, n)) {
          scheduled = true;
          break;
        }
        SimRequest victim = running.remove(running.size() - 1);
        preempt(victim);
        preempted = true;
        if (victim == r) {
          break;
        }
      }
      if (!scheduled) {
        break;
      }
      // as vLLM's allocate_slots: the blocks this step fills enter the prefix cache now
      kv.cacheFullBlocks(r, r.numComputed + n);
      addToStep(r, n);
      budget -= n;
      i++;
    }

    if (!preempted) {
      // the adapters of the step's running requests, when a limit applies (vLLM's max_loras)
      java.util.Set<Integer> loras = maxLoras > 0 ? stepLoras() : null;
      java.util.Iterator<SimRequest> queue = waiting.iterator();
      while (queue.hasNext() && budget > 0 && running.size() < hw.maxNumSeqs()) {
        SimRequest r = queue.next();
        if (r.remotePrefill) {
          // vLLM's KV connector: blocks for the whole prompt now (its local prefix hit first),
          // the rest is read from the prefill replica; no compute, so no token budget
          int hit = kv.cachedPrefixBlocks(r);
          if (!kv.allocateForAdmission(r, hit, r.numTokens() - hit * kv.blockSize())) {
            break;
          }
          queue.remove();
          r.numComputed = hit * kv.blockSize();
          r.localHitTokens = r.numComputed;
          awaitingKv.add(r);
          kvTransfers.add(r);
          continue;
        }
        if (loras != null && r.loraId >= 0 && loras.size() >= maxLoras
            && !loras.contains(r.loraId)) {
          continue; // as vLLM: another adapter would exceed max_loras; it keeps its place
        }
        int hitBlocks = kv.cachedPrefixBlocks(r);
        int hitTokens = hitBlocks * kv.blockSize();
        int n = Math.min(r.numTokens() - hitTokens, budget);
        // as vLLM (scheduler_reserve_full_isl, on by default): the whole sequence must fit, not
        // only this step's chunk, or a long prompt admitted chunk by chunk runs out of blocks
        // half-way and is preempted
        if (!kv.fits(r, hitBlocks, r.numTokens()) || !kv.allocateForAdmission(r, hitBlocks, n)) {
          break;
        }
        queue.remove();
        if (loras != null && r.loraId >= 0) {
          loras.add(r.loraId);
        }
        r.numComputed = hitTokens;
        kv.cacheFullBlocks(r, hitTokens + n);
        if (r.preemptions == 0) {
          promptTokensQueried += r.numTokens();
          promptTokensHit += hitTokens;
        } else {
          preemptedTokensQueried += r.numTokens();
          preemptedTokensHit += hitTokens;
        }
        if (r.cachedAtFirstAdmission < 0) {
          r.cachedAtFirstAdmission = Math.min(hitTokens, r.promptLength);
        }
        running.add(r);
        addToStep(r, n);
        budget -= n;
      }
    }

    if (stepSize == 0) {
      return -1;
    }
    stepping = true;
    return cost();
  }

  /** Applies the planned step: computes its tokens, emits output tokens, retires finished requests. */
  void completeStep(long nowNanos, StepSink sink) {
    if (!stepping) {
      throw new IllegalStateException("replica " + index + " is not stepping");
    }
    stepping = false;
    for (int i = 0; i < stepSize; i++) {
      SimRequest r = stepRequests[i];
      stepRequests[i] = null;
      if (r.numBlocks == 0) {
        continue; // aborted after it was planned (preemption within one step cannot do this)
      }
      r.numComputed += stepTokens[i];
      if (r.numComputed >= r.numTokens()) {
        boolean first = r.numOutput == 0;
        r.numOutput++;
        sink.onToken(this, r, nowNanos, first);
        if (r.isFinished()) {
          running.remove(r);
          if (!r.isPrefillOnly()) {
            kv.free(r); // a prefill request keeps its blocks until its KV has been read
          }
          sink.onFinished(this, r, nowNanos);
        }
      }
    }
    stepSize = 0;
    // as vLLM's update_from_output, which ends with make_stats; a request waiting for its KV
    // stays in vLLM's waiting queue (WAITING_FOR_REMOTE_KVS)
    statsWaiting = waiting.size() + awaitingKv.size();
    statsRunning = running.size();
    statsKvUsage = kv.usage();
  }

  /**
   * The decode requests admitted since the last call, each holding blocks for its prompt and
   * waiting for the KV it lacks ({@link SimRequest#localHitTokens} were cached here).
   */
  List<SimRequest> drainKvTransfers() {
    if (kvTransfers.isEmpty()) {
      return List.of();
    }
    List<SimRequest> out = new ArrayList<>(kvTransfers);
    kvTransfers.clear();
    return out;
  }

  /**
   * The prompt KV of {@code r} has arrived: as vLLM, its prompt counts as computed but for the
   * last token (recomputed for the logits of the first output token), its full blocks enter the
   * prefix cache, and it runs from the next step.
   */
  void kvArrived(SimRequest r) {
    if (!awaitingKv.remove(r)) {
      throw new IllegalStateException("replica " + index + " is not waiting for the KV of " + r);
    }
    r.remotePrefill = false;
    r.numComputed = Math.min(r.numBlocks * kv.blockSize(), r.numTokens());
    if (r.numComputed == r.numTokens()) {
      r.numComputed--;
    }
    kv.cacheFullBlocks(r, r.numComputed);
    running.add(r);
  }

  /** Frees the blocks a finished prefill request kept for the transfer of its KV. */
  void releasePrefilled(SimRequest r) {
    if (!r.isPrefillOnly() || !r.isFinished()) {
      throw new IllegalStateException("not a finished prefill request: " + r);
    }
    kv.free(r);
  }

  /**
   * Drops {@code r}, waiting or running, as vLLM aborts a request whose client went away: its
   * blocks are freed (what it cached stays in the prefix cache) and it produces nothing more. A
   * step already planned with it skips it when it completes. Returns false when {@code r} is
   * not here (finished already).
   */
  boolean abort(SimRequest r) {
    if (waiting.remove(r)) {
      return true;
    }
    if (!running.remove(r)) {
      return false;
    }
    kv.free(r); // numBlocks 0: completeStep passes over it
    return true;
  }

  private void preempt(SimRequest victim) {
    kv.free(victim);
    victim.numComputed = 0;
    victim.preemptions++;
    preemptions++;
    waiting.addFirst(victim);
    // drop it from the step being planned, if it was already placed there
    for (int i = 0; i < stepSize; i++) {
      if (stepRequests[i] == victim) {
        System.arraycopy(stepRequests, i + 1, stepRequests, i, stepSize - i - 1);
        System.arraycopy(stepTokens, i + 1, stepTokens, i, stepSize - i - 1);
        stepSize--;
        break;
      }
    }
  }

  private void addToStep(SimRequest r, int n) {
    if (stepSize == stepRequests.length) {
      stepRequests = java.util.Arrays.copyOf(stepRequests, stepSize * 2);
      stepTokens = java.util.Arrays.copyOf(stepTokens, stepSize * 2);
    }
    stepRequests[stepSize] = r;
    stepTokens[stepSize] = n;
    stepSize++;
  }

  private double cost() {
    long newTokens = 0;
    double attention = 0;
    long kvTokensTouched = 0;
    int sampled = 0;
    for (int i = 0; i < stepSize; i++) {
      SimRequest r = stepRequests[i];
      int n = stepTokens[i];
      long context = r.numComputed;
      newTokens += n;
      attention += n * (context + n / 2.0);
      kvTokensTouched += context + n;
      if (context + n >= r.numTokens()) {
        sampled++;
      }
    }
    return hw.stepGpuSeconds(newTokens, attention, kvTokensTouched, sampled);
  }

  /** CPU-side time of the planned step (scheduling, sampling), not shared with other replicas. */
  double stepOverheadSeconds() {
    return hw.stepOverheadSeconds(stepSize);
  }
}
