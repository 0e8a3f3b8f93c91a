package io.epp4j.api;

import java.util.Set;

/**
 * An immutable snapshot of what a model server reports about itself, as a Prometheus scrape
 * would give it ({@code vllm:num_requests_waiting}, {@code vllm:kv_cache_usage_perc}, ...).
 *
 * @param waitingRequests     requests queued and not yet scheduled
 * @param runningRequests     requests in the running batch
 * @param kvCacheUsage        fraction of KV-cache blocks in use, 0..1
 * @param kvCapacityBlocks    {@code num_gpu_blocks}, or 0 when unknown
 * @param blockSizeTokens     tokens per KV block, or 0 when unknown
 * @param runningLoraAdapters adapters loaded and serving
 * @param waitingLoraAdapters adapters requested by waiting requests
 * @param maxLoras            adapter slots, or 0 when unknown
 * @param scrapedAtNanos      time of the scrape on the router's {@link Ticker}, or
 *                            {@link #UNSET_TIME} to let the router stamp it on update; a time
 *                            later than the router's ticker reads on update is taken as the
 *                            time of the update (so the metrics still age and go stale), and
 *                            logged as a warning
 * @param asleep              whether the server says its engine sleeps (vLLM's sleep mode:
 *                            {@code vllm:engine_sleep_state{sleep_state="awake"} 0} or
 *                            {@code vllm:engine_fully_awake 0} on every engine, also while it is
 *                            paused or woken up only in part): it then serves no inference
 *                            request while its queue and KV figures read 0, so the router routes
 *                            to it only when no endpoint of the pool is awake, and counts it as
 *                            saturated
 * @param processStartTimeSeconds when the server process started, in seconds since the Unix
 *                            epoch (Prometheus's {@code process_start_time_seconds}, which vLLM
 *                            writes when it serves its page from one process), or 0 when
 *                            unknown. Where two updates of an endpoint both carry it and it
 *                            differs, the server restarted at the same address: its engine came
 *                            back with an empty KV cache
 * @param promptTokensTotal   prompt tokens the server counted since it started (its counter
 *                            {@code vllm:prompt_tokens_total} or
 *                            {@code sglang:prompt_tokens_total}, summed over series), or
 *                            {@link #NO_COUNT} when unknown. A counter that went back (below the
 *                            last value known for the endpoint) means the server restarted, as
 *                            Prometheus reads a counter reset; it is the sign used where the
 *                            start time is not known on both sides
 */
public record EndpointMetrics(
    int waitingRequests,
    int runningRequests,
    double kvCacheUsage,
    long kvCapacityBlocks,
    int blockSizeTokens,
    Set<String> runningLoraAdapters,
    Set<String> waitingLoraAdapters,
    int maxLoras,
    long scrapedAtNanos,
    boolean asleep,
    double processStartTimeSeconds,
    long promptTokensTotal) {

  /** Marker for "no scrape time given". */
  public static final long UNSET_TIME = Long.MIN_VALUE;

  /** {@link #promptTokensTotal()} of metrics that carry no such counter. */
  public static final long NO_COUNT = -1;

  /** Metrics of an endpoint that has never been scraped. */
  public static final EndpointMetrics UNKNOWN =
      new EndpointMetrics(0, 0, 0.0, 0, 0, Set.of(), Set.of(), 0, UNSET_TIME, false, 0, NO_COUNT);

  /**
   * Metrics without the server's start time or prompt-token counter: the components above but
   * those two, which are 0 (unknown) and {@link #NO_COUNT}.
   */
  public EndpointMetrics(int waitingRequests, int runningRequests, double kvCacheUsage,
      long kvCapacityBlocks, int blockSizeTokens, Set<String> runningLoraAdapters,
      Set<String> waitingLoraAdapters, int maxLoras, long scrapedAtNanos, boolean asleep) {
    this(waitingRequests, runningRequests, kvCacheUsage, kvCapacityBlocks, blockSizeTokens,
        runningLoraAdapters, waitingLoraAdapters, maxLoras, scrapedAtNanos, asleep, 0, NO_COUNT);
  }

  /** Metrics of an awake server: the components above but {@code asleep}, which is false. */
  public EndpointMetrics(int waitingRequests, int runningRequests, double kvCacheUsage,
      long kvCapacityBlocks, int blockSizeTokens, Set<String> runningLoraAdapters,
      Set<String> waitingLoraAdapters, int maxLoras, long scrapedAtNanos) {
    this(waitingRequests, runningRequests, kvCacheUsage, kvCapacityBlocks, blockSizeTokens,
        runningLoraAdapters, waitingLoraAdapters, maxLoras, scrapedAtNanos, false);
  }

  public EndpointMetrics {
    if (waitingRequests < 0) {
      throw new IllegalArgumentException("waitingRequests must be >= 0, got " + waitingRequests);
    }
    if (runningRequests < 0) {
      throw new IllegalArgumentException("runningRequests must be >= 0, got " + runningRequests);
    }
    if (!(kvCacheUsage >= 0.0 && kvCacheUsage <= 1.0)) {
      throw new IllegalArgumentException("kvCacheUsage must be in [0,1], got " + kvCacheUsage);
    }
    if (kvCapacityBlocks < 0) {
      throw new IllegalArgumentException("kvCapacityBlocks must be >= 0, got " + kvCapacityBlocks);
    }
    if (blockSizeTokens < 0) {
      throw new IllegalArgumentException("blockSizeTokens must be >= 0, got " + blockSizeTokens);
    }
    if (maxLoras < 0) {
      throw new IllegalArgumentException("maxLoras must be >= 0, got " + maxLoras);
    }
    if (!(processStartTimeSeconds >= 0 && processStartTimeSeconds < Double.POSITIVE_INFINITY)) {
      throw new IllegalArgumentException("processStartTimeSeconds must be finite and >= 0, got "
          + processStartTimeSeconds);
    }
    if (promptTokensTotal < NO_COUNT) {
      throw new IllegalArgumentException("promptTokensTotal must be >= 0, or NO_COUNT (-1), got "
          + promptTokensTotal);
    }
    runningLoraAdapters = adapters(runningLoraAdapters, "runningLoraAdapters");
    waitingLoraAdapters = adapters(waitingLoraAdapters, "waitingLoraAdapters");
  }

  /** An immutable copy; a null set or a null name is refused naming the field. */
  private static Set<String> adapters(Set<String> names, String field) {
    java.util.Objects.requireNonNull(names, field);
    for (String n : names) {
      java.util.Objects.requireNonNull(n, () -> field + " holds null");
    }
    return Set.copyOf(names);
  }

  /** Whether these metrics come from a scrape (as opposed to {@link #UNKNOWN}). */
  public boolean isKnown() {
    return scrapedAtNanos != UNSET_TIME;
  }

  /** Same metrics stamped with a scrape time. */
  public EndpointMetrics withScrapedAtNanos(long nanos) {
    return new EndpointMetrics(waitingRequests, runningRequests, kvCacheUsage, kvCapacityBlocks,
        blockSizeTokens, runningLoraAdapters, waitingLoraAdapters, maxLoras, nanos, asleep,
        processStartTimeSeconds, promptTokensTotal);
  }

  /** A builder starting from empty metrics. */
  public static Builder builder() {
    return new Builder();
  }

  /** Builds {@link EndpointMetrics}; unset fields are zero or empty. */
  public static final class Builder {
    private int waiting;
    private int running;
    private double kv;
    private long capacity;
    private int blockSize;
    private Set<String> runningLoras = Set.of();
    private Set<String> waitingLoras = Set.of();
    private int maxLoras;
    private long scrapedAt = UNSET_TIME;
    private boolean asleep;
    private double startTime;
    private long promptTokens = NO_COUNT;

    private Builder() {}

    public Builder waitingRequests(int v) { this.waiting = v; return this; }
    public Builder runningRequests(int v) { this.running = v; return this; }
    public Builder kvCacheUsage(double v) { this.kv = v; return this; }
    public Builder kvCapacityBlocks(long v) { this.capacity = v; return this; }
    public Builder blockSizeTokens(int v) { this.blockSize = v; return this; }
    public Builder runningLoraAdapters(Set<String> v) { this.runningLoras = v; return this; }
    public Builder waitingLoraAdapters(Set<String> v) { this.waitingLoras = v; return this; }
    public Builder maxLoras(int v) { this.maxLoras = v; return this; }
    public Builder scrapedAtNanos(long v) { this.scrapedAt = v; return this; }
    public Builder asleep(boolean v) { this.asleep = v; return this; }
    public Builder processStartTimeSeconds(double v) { this.startTime = v; return this; }
    public Builder promptTokensTotal(long v) { this.promptTokens = v; return this; }

    public EndpointMetrics build() {
      return new EndpointMetrics(waiting, running, kv, capacity, blockSize, runningLoras,
          waitingLoras, maxLoras, scrapedAt, asleep, startTime, promptTokens);
    }
  }
}
