package io.epp4j.sim;

/**
 * A source of requests: shared system prompts, multi-turn dialogs or a replayed trace. A workload
 * is a description; {@link #start} makes an independent run of it, so every policy sees the same
 * requests for the same seed (closed-loop workloads still react to each policy's completion
 * times).
 */
public interface Workload {

  /**
   * Latest arrival, in simulated nanoseconds: half the clock's range (146 years), so that what
   * follows the last arrival (its service, the scrapes until then) still counts forward. A later
   * one would overflow the clock, and the run would never end.
   */
  long MAX_ARRIVAL_NANOS = Long.MAX_VALUE / 2;

  /** Years of simulated time {@link #MAX_ARRIVAL_NANOS} holds, for messages. */
  double MAX_ARRIVAL_YEARS = MAX_ARRIVAL_NANOS / 1e9 / (365.25 * 86_400);

  /**
   * A request the workload would submit past {@link #MAX_ARRIVAL_NANOS}; the message names the
   * options that set the workload's times.
   */
  final class ArrivalTooLate extends IllegalArgumentException {
    private static final long serialVersionUID = 1L;

    ArrivalTooLate(String message) {
      super(message);
    }
  }

  /** Scenario name as used on the command line and in reports. */
  String name();

  /** One or two lines for the report header: sizes and the regime they put the cluster in. */
  String describe(HardwareProfile profile, int replicas);

  /**
   * The parameters that shape the load, named as the command-line options that set them (camel
   * case), in a stable order; the reports carry them so that a result file says what produced
   * it.
   */
  default java.util.Map<String, Object> parameters() {
    return java.util.Map.of();
  }

  /**
   * This workload with its offered load multiplied by {@code level} (1 = as given); how each
   * workload scales is in its own documentation.
   */
  Workload atLoad(double level);

  /**
   * The hit-rate ceiling: the share of looked-up prompt tokens an infinite prefix cache would hit
   * (every request on one replica that never evicts), with vLLM's rules that only whole
   * {@code blockSize}-token blocks hit and at most {@code promptLength - 1} tokens do. Computed
   * by replaying the workload with zero service time ({@link InfiniteCache}).
   */
  default double hitRateCeiling(long seed, int blockSize) {
    return hitRateCeiling(seed, blockSize, Integer.MAX_VALUE);
  }

  /**
   * The hit-rate ceiling on a model whose context holds {@code maxModelLen} tokens: a request
   * longer than that is rejected, as the simulator rejects it: it looks nothing up, and its client
   * goes on or gives up as {@link Run#onRejected} says.
   */
  default double hitRateCeiling(long seed, int blockSize, int maxModelLen) {
    return InfiniteCache.hitRate(this, seed, blockSize, maxModelLen);
  }

  /**
   * The load level at which the KV the workload keeps live exceeds the cluster's KV cache, from
   * the workload's sizes and the profile; {@code NaN} when the load level does not change it.
   */
  double capacityCrossover(HardwareProfile profile, int replicas);

  /** One line for the report header explaining {@link #capacityCrossover}. */
  String crossoverNote(HardwareProfile profile, int replicas);

  /** A fresh run with its own random stream. */
  Run start(long seed);

  /** Lets a workload run schedule requests. */
  interface Submitter {
    /** Submits {@code spec} to arrive at {@code atNanos} (simulated time, not before now). */
    void submit(long atNanos, RequestSpec spec);
  }

  /** One run of a workload. */
  interface Run {
    /** Requests this run will submit in total. */
    int totalRequests();

    /** Submits the first requests. */
    void begin(Submitter submitter);

    /** Called when a request finished; closed-loop workloads submit their next request here. */
    void onFinished(RequestSpec spec, long nowNanos, Submitter submitter);

    /**
     * Called instead of {@link #onFinished(RequestSpec, long, Submitter)} when the server said
     * which tokens it generated ({@code spec.outputLength()} of them), as a real server's reply
     * differs from the one the workload planned. Workloads whose later prompts carry earlier
     * replies (multi-turn) use them; the others ignore them.
     */
    default void onFinished(RequestSpec spec, int[] generated, long nowNanos,
        Submitter submitter) {
      onFinished(spec, nowNanos, submitter);
    }

    /**
     * Called instead of {@code onFinished} for a request that was not served: the router refused
     * it ({@code tooLong} false; a gateway answers an error status) or it is longer than the
     * model's context ({@code tooLong}; vLLM answers 400). The client counts the failure and goes
     * on, as a benchmark client does: a closed-loop client sends its next request, a dialog its
     * next turn. Returns how many of this client's later requests it gives up instead (a dialog
     * that outgrew the context ends, its later turns being longer still); the caller counts them
     * as rejected too, so that every request of {@link #totalRequests} is counted once. By
     * default the client goes on as after {@link #onFinished(RequestSpec, long, Submitter)}.
     */
    default int onRejected(RequestSpec spec, boolean tooLong, long nowNanos,
        Submitter submitter) {
      onFinished(spec, nowNanos, submitter);
      return 0;
    }

    /** Requests whose prompt was clipped to the model's context. */
    default int clippedRequests() {
      return 0;
    }
  }
}
