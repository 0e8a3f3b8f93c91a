package io.epp4j.sim;

import java.util.SplittableRandom;

/**
 * Common system prompts, like inference-perf's {@code shared_prefix}: {@code groups} system
 * prompts, each used by {@code usersPerGroup} users; every user has its own session key and
 * sends prompts made of its group's system prompt followed by a fresh question. Load is either a
 * closed loop of {@code concurrency} clients (a client sends its next request when the previous
 * one finished) or Poisson arrivals at {@code rate} requests per second. Each request goes to a
 * user drawn uniformly at random.
 */
public record SharedPrefixWorkload(int groups, int usersPerGroup, LengthDist systemPromptLength,
    LengthDist questionLength, LengthDist outputLength, int requests, int concurrency,
    double rate) implements Workload {

  public static final String NAME = "shared-prefix";

  /** Defaults: 28 prompts × 6,000 tokens, 8 users each, 300–700-token questions, 100–300 out. */
  public static SharedPrefixWorkload defaults() {
    return new SharedPrefixWorkload(28, 8, LengthDist.fixed(6000), LengthDist.parse("300-700"),
        LengthDist.parse("100-300"), 1536, 48, 0);
  }

  public SharedPrefixWorkload {
    if (groups < 1 || usersPerGroup < 1 || requests < 1 || concurrency < 1 || rate < 0) {
      throw new IllegalArgumentException("groups, users, requests and concurrency must be >= 1");
    }
  }

  @Override
  public String name() {
    return NAME;
  }

  @Override
  public String describe(HardwareProfile profile, int replicas) {
    double prompts = groups * systemPromptLength.mean();
    long perReplica = profile.kvTokensPerReplica();
    return String.format(java.util.Locale.ROOT,
        "%d system prompts × %s tokens (%.0f tokens together) × %d users each; questions %s,"
            + " outputs %s tokens; %d requests, %s.%n"
            + "KV cache: %,d tokens per replica, %,d in the cluster: the prompts fit in %.1f"
            + " replicas' caches (%s one replica's, %s the cluster's).",
        groups, systemPromptLength, prompts, usersPerGroup, questionLength, outputLength,
        requests, rate > 0 ? String.format(java.util.Locale.ROOT, "Poisson %.2f req/s", rate)
            : "closed loop, concurrency " + concurrency,
        perReplica, perReplica * replicas, prompts / perReplica,
        prompts > perReplica ? "exceed" : "fit in",
        prompts <= perReplica * (double) replicas ? "fit in" : "exceed");
  }

  /**
   * The same users and prompts with {@code level} × the load: {@code level} × the rate in Poisson
   * mode, otherwise {@code level} × the closed loop's concurrency, rounded to the nearest client
   * (halves up) and at least one.
   */
  @Override
  public SharedPrefixWorkload atLoad(double level) {
    if (rate > 0) {
      return new SharedPrefixWorkload(groups, usersPerGroup, systemPromptLength, questionLength,
          outputLength, requests, concurrency, rate * level);
    }
    return new SharedPrefixWorkload(groups, usersPerGroup, systemPromptLength, questionLength,
        outputLength, requests, Math.max(1, (int) Math.round(concurrency * level)), rate);
  }

  /**
   * The system prompts stay cached however high the load, next to the requests in flight: in a
   * closed loop {@code concurrency} of them, each holding its question and answer. The crossover
   * is where prompts + in-flight tokens exceed the cluster's KV; 0 when the prompts alone do.
   * With Poisson arrivals the requests in flight depend on the service time, which only the
   * simulation knows: {@code NaN}.
   */
  @Override
  public double capacityCrossover(HardwareProfile profile, int replicas) {
    if (rate > 0) {
      return Double.NaN;
    }
    double free = profile.kvTokensPerReplica() * (double) replicas
        - groups * systemPromptLength.mean();
    double perLevel = concurrency * (questionLength.mean() + outputLength.mean());
    return Math.max(0, free / perLevel);
  }

  @Override
  public String crossoverNote(HardwareProfile profile, int replicas) {
    double x = capacityCrossover(profile, replicas);
    if (Double.isNaN(x)) {
      return "KV capacity crossover: not computed for Poisson arrivals (requests in flight"
          + " depend on the service time)";
    }
    return String.format(java.util.Locale.ROOT, "KV capacity crossover at load level %.2f (system"
        + " prompts + %d clients' questions and answers × level fill the cluster's KV)",
        x, concurrency);
  }

  @Override
  public java.util.Map<String, Object> parameters() {
    java.util.Map<String, Object> m = new java.util.LinkedHashMap<>();
    m.put("groups", groups);
    m.put("usersPerGroup", usersPerGroup);
    m.put("systemPromptLen", systemPromptLength.text());
    m.put("questionLen", questionLength.text());
    m.put("outputLen", outputLength.text());
    m.put("requests", requests);
    if (rate > 0) {
      m.put("rate", rate);
    } else {
      m.put("concurrency", concurrency);
    }
    return m;
  }

  @Override
  public Run start(long seed) {
    return new SharedPrefixRun(seed);
  }

  private final class SharedPrefixRun implements Run {
    private final long seed;
    private final int[][] systemPrompts;
    private final SplittableRandom rng;
    private final String[] userKeys;
    private int submitted;

    SharedPrefixRun(long seed) {
      this.seed = seed;
      this.rng = new SplittableRandom(seed);
      this.systemPrompts = new int[groups][];
      this.userKeys = new String[groups * usersPerGroup];
      for (int u = 0; u < userKeys.length; u++) {
        userKeys[u] = SyntheticTokens.sessionKey(rng);
      }
      for (int g = 0; g < groups; g++) {
        int len = systemPromptLength.sample(rng);
        systemPrompts[g] = new int[len];
        SyntheticTokens.fill(SyntheticTokens.key(seed, 1, g), systemPrompts[g], 0, len);
      }
    }

    @Override
    public int totalRequests() {
      return requests;
    }

    @Override
    public void begin(Submitter submitter) {
      if (rate > 0) {
        double t = 0;
        for (int i = 0; i < requests; i++) {
          t += -Math.log(1 - rng.nextDouble()) / rate;
          if (t * 1e9 > MAX_ARRIVAL_NANOS) {
            throw new ArrivalTooLate(String.format(java.util.Locale.ROOT,
                "Poisson arrivals at %.3g requests/s (--rate × the load level): request %d of"
                    + " %d arrives after %.3g years; the simulated clock holds arrivals up to"
                    + " %.0f years (raise --rate or lower --requests)", rate, i + 1, requests,
                t / (365.25 * 86_400), MAX_ARRIVAL_YEARS));
          }
          submitter.submit(Math.round(t * 1e9), next());
        }
      } else {
        for (int i = 0; i < Math.min(concurrency, requests); i++) {
          submitter.submit(0, next());
        }
      }
    }

    @Override
    public void onFinished(RequestSpec spec, long nowNanos, Submitter submitter) {
      if (rate <= 0 && submitted < requests) {
        submitter.submit(nowNanos, next());
      }
    }

    private RequestSpec next() {
      int i = submitted++;
      int user = rng.nextInt(groups * usersPerGroup);
      int group = user / usersPerGroup;
      int q = questionLength.sample(rng);
      int out = outputLength.sample(rng);
      int[] system = systemPrompts[group];
      long key = SyntheticTokens.key(seed, 2, i);
      int prompt = system.length + q;
      return new RequestSpec("sp-" + i, userKeys[user], prompt, out, () -> {
        int[] t = new int[prompt + out];
        System.arraycopy(system, 0, t, 0, system.length);
        SyntheticTokens.fill(key, t, system.length, q + out);
        return t;
      }, false, group);
    }
  }
}
