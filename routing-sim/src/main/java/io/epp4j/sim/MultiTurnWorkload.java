package io.epp4j.sim;

import java.util.Arrays;
import java.util.Locale;
import java.util.SplittableRandom;
import org.jspecify.annotations.Nullable;

/**
 * Multi-turn chat: {@code dialogs} conversations of {@code turns} turns, one session key each.
 * Every prompt is the shared system prompt, the whole history (earlier user messages and the
 * replies the model generated) and the new message; after a reply the user thinks for an
 * exponentially distributed time before the next turn. Dialogs start spread over the first
 * {@code startSpreadSeconds}.
 */
public record MultiTurnWorkload(int dialogs, int turns, int systemPromptLength,
    LengthDist userLength, LengthDist replyLength, double thinkTimeSeconds,
    double startSpreadSeconds) implements Workload {

  public static final String NAME = "multi-turn";

  /**
   * Defaults: 36 dialogs × 8 turns, 1,000-token system prompt, 450-token messages, 400-token
   * replies (7,800 tokens at the end, 6,800 of them the dialog's own, so one replica of the
   * built-in profile holds about ten), 1 s mean think time.
   */
  public static MultiTurnWorkload defaults() {
    return new MultiTurnWorkload(36, 8, 1000, LengthDist.fixed(450), LengthDist.fixed(400), 1.0,
        2.0);
  }

  public MultiTurnWorkload {
    if (dialogs < 1 || turns < 1 || systemPromptLength < 1 || thinkTimeSeconds < 0
        || startSpreadSeconds < 0) {
      throw new IllegalArgumentException("dialogs, turns and system prompt must be >= 1");
    }
  }

  @Override
  public String name() {
    return NAME;
  }

  @Override
  public java.util.Map<String, Object> parameters() {
    java.util.Map<String, Object> m = new java.util.LinkedHashMap<>();
    m.put("dialogs", dialogs);
    m.put("turns", turns);
    m.put("mtSystemLen", systemPromptLength);
    m.put("userLen", userLength.text());
    m.put("replyLen", replyLength.text());
    m.put("thinkTime", thinkTimeSeconds);
    m.put("startSpreadSeconds", startSpreadSeconds);
    return m;
  }

  /** Mean dialog length after its last reply, in tokens. */
  public double finalLength() {
    return systemPromptLength + turns * (userLength.mean() + replyLength.mean());
  }

  /**
   * Dialogs at their final length that fit in {@code kvTokens}, counting the shared system
   * prompt once.
   */
  public double dialogsThatFit(long kvTokens) {
    return (kvTokens - systemPromptLength) / (finalLength() - systemPromptLength);
  }

  /**
   * {@code level} × the dialogs, rounded to the nearest dialog (halves up) and at least one; the
   * dialogs keep their sizes and think times, so the load grows with the dialogs active at once.
   */
  @Override
  public MultiTurnWorkload atLoad(double level) {
    return new MultiTurnWorkload(Math.max(1, (int) Math.round(dialogs * level)), turns,
        systemPromptLength, userLength, replyLength, thinkTimeSeconds, startSpreadSeconds);
  }

  /**
   * Every dialog is active from its start (within {@code startSpreadSeconds}) to its last turn,
   * so the live KV is the dialogs at their final length; the crossover is the level at which
   * they no longer fit in the cluster, the system prompt counted once per replica.
   */
  @Override
  public double capacityCrossover(HardwareProfile profile, int replicas) {
    return replicas * dialogsThatFit(profile.kvTokensPerReplica()) / dialogs;
  }

  @Override
  public String crossoverNote(HardwareProfile profile, int replicas) {
    return String.format(Locale.ROOT, "KV capacity crossover at load level %.2f (%.1f dialogs at"
        + " their final length fill the cluster's KV)", capacityCrossover(profile, replicas),
        replicas * dialogsThatFit(profile.kvTokensPerReplica()));
  }

  @Override
  public String describe(HardwareProfile profile, int replicas) {
    double fin = finalLength();
    return String.format(Locale.ROOT,
        "%d dialogs × %d turns; system prompt %d tokens, messages %s, replies %s tokens,"
            + " think time %.1f s (mean); %d requests.%n"
            + "A dialog ends at %.0f tokens; one replica's KV cache (%,d tokens) holds %.1f of"
            + " them (the system prompt counted once), the cluster %.1f.",
        dialogs, turns, systemPromptLength, userLength, replyLength, thinkTimeSeconds,
        dialogs * turns, fin, profile.kvTokensPerReplica(),
        dialogsThatFit(profile.kvTokensPerReplica()),
        replicas * dialogsThatFit(profile.kvTokensPerReplica()));
  }

  @Override
  public Run start(long seed) {
    return new MultiTurnRun(seed);
  }

  private record Turn(int dialog, int turn) {}

  private final class MultiTurnRun implements Run {
    private final long seed;
    private final SplittableRandom rng;
    private final int[][] history;
    private final int[] system;
    private final String[] dialogKeys;

    MultiTurnRun(long seed) {
      this.seed = seed;
      this.rng = new SplittableRandom(seed);
      this.system = new int[systemPromptLength];
      SyntheticTokens.fill(SyntheticTokens.key(seed, 3), system, 0, systemPromptLength);
      this.history = new int[dialogs][];
      this.dialogKeys = new String[dialogs];
      for (int d = 0; d < dialogs; d++) {
        dialogKeys[d] = SyntheticTokens.sessionKey(rng);
      }
      for (int d = 0; d < dialogs; d++) {
        history[d] = system;
      }
    }

    @Override
    public int totalRequests() {
      return dialogs * turns;
    }

    @Override
    public void begin(Submitter submitter) {
      for (int d = 0; d < dialogs; d++) {
        long at = Math.round(rng.nextDouble() * startSpreadSeconds * 1e9);
        submitter.submit(at, turn(d, 0));
      }
    }

    @Override
    public void onFinished(RequestSpec spec, long nowNanos, Submitter submitter) {
      onFinished(spec, null, nowNanos, submitter);
    }

    /** The reply joins the history as the server generated it (over HTTP) or as planned. */
    @Override
    public void onFinished(RequestSpec spec, int @Nullable [] generated, long nowNanos,
        Submitter submitter) {
      Turn t = (Turn) spec.tag();
      int[] turn = spec.tokens().get();
      if (generated != null && generated.length == spec.outputLength()) {
        turn = Arrays.copyOf(turn, turn.length);
        System.arraycopy(generated, 0, turn, spec.promptLength(), generated.length);
      }
      history[t.dialog()] = turn;
      if (t.turn() + 1 < turns) {
        submitNext(t, nowNanos, submitter);
      }
    }

    /** The dialog's next turn, after an exponential think time. */
    private void submitNext(Turn t, long nowNanos, Submitter submitter) {
      double think = -Math.log(1 - rng.nextDouble()) * thinkTimeSeconds;
      double at = nowNanos + think * 1e9;
      if (at > MAX_ARRIVAL_NANOS) {
        // past the clock's range nowNanos + the think time in nanoseconds overflows a long
        throw new ArrivalTooLate(String.format(Locale.ROOT, "dialog %d's turn %d of %d arrives"
            + " after %.3g years (think time %s s mean); the simulated clock holds arrivals up to"
            + " %.0f years (lower --think-time or --turns)", t.dialog() + 1, t.turn() + 2, turns,
            at / 1e9 / (365.25 * 86_400), thinkTimeSeconds, MAX_ARRIVAL_YEARS));
      }
      submitter.submit(nowNanos + Math.round(think * 1e9), turn(t.dialog(), t.turn() + 1));
    }

    /**
     * A turn longer than the context ends its dialog: every later turn carries it and is longer
     * still, so all of them are given up. A turn the router refused leaves the history as it was
     * (no reply came); the user thinks and sends the next turn.
     */
    @Override
    public int onRejected(RequestSpec spec, boolean tooLong, long nowNanos,
        Submitter submitter) {
      Turn t = (Turn) spec.tag();
      int later = turns - t.turn() - 1;
      if (tooLong) {
        return later;
      }
      if (later > 0) {
        submitNext(t, nowNanos, submitter);
      }
      return 0;
    }

    private RequestSpec turn(int d, int t) {
      int[] past = history[d];
      int user = userLength.sample(rng);
      int reply = replyLength.sample(rng);
      int prompt = past.length + user;
      int[] tokens = Arrays.copyOf(past, prompt + reply);
      SyntheticTokens.fill(SyntheticTokens.key(seed, 4, d, t), tokens, past.length, user + reply);
      return new RequestSpec("mt-" + d + "-" + t, dialogKeys[d], prompt, reply, () -> tokens,
          false, new Turn(d, t));
    }
  }
}
