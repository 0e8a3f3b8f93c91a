package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/** What a workload's client does after a request of its was not served. */
class RejectedClientsTest {

  private record Submitted(long atNanos, RequestSpec spec) {}

  @Test
  void aDialogWhoseTurnTheRouterRefusedGoesOnFromTheHistoryItHad() {
    MultiTurnWorkload w = new MultiTurnWorkload(1, 3, 160, LengthDist.fixed(32),
        LengthDist.fixed(48), 0.5, 0);
    Workload.Run run = w.start(1);
    List<Submitted> sent = new ArrayList<>();
    Workload.Submitter s = (at, spec) -> sent.add(new Submitted(at, spec));
    run.begin(s);
    RequestSpec first = sent.get(0).spec();
    assertThat(first.promptLength()).isEqualTo(160 + 32);

    assertThat(run.onRejected(first, false, 1_000, s)).isZero();
    // no reply came, so the next turn carries the system prompt and its own message only
    assertThat(sent).hasSize(2);
    RequestSpec second = sent.get(1).spec();
    assertThat(sent.get(1).atNanos()).isGreaterThanOrEqualTo(1_000);
    assertThat(second.promptLength()).isEqualTo(160 + 32);
    assertThat(java.util.Arrays.copyOf(second.tokens().get(), 160))
        .isEqualTo(java.util.Arrays.copyOf(first.tokens().get(), 160));

    // longer than the context: the last turn, which would carry this one, is given up
    assertThat(run.onRejected(second, true, 2_000, s)).isEqualTo(1);
    assertThat(sent).hasSize(2);
  }

  @Test
  void aClosedLoopClientGoesOnAfterARequestLongerThanTheContext() {
    SharedPrefixWorkload w = new SharedPrefixWorkload(1, 1, LengthDist.fixed(500),
        LengthDist.fixed(100), LengthDist.fixed(20), 5, 1, 0);
    Workload.Run run = w.start(1);
    List<Submitted> sent = new ArrayList<>();
    Workload.Submitter s = (at, spec) -> sent.add(new Submitted(at, spec));
    run.begin(s);
    assertThat(run.onRejected(sent.get(0).spec(), true, 7, s)).isZero();
    assertThat(sent).hasSize(2);
    assertThat(sent.get(1).atNanos()).isEqualTo(7);
  }

  @Test
  void theCeilingReplaysTheRequestsAfterOneLongerThanTheContext() {
    // one user, 160-token (10-block) system prompt, 32-token questions: every served request but
    // the first hits the system prompt, 160 of its 192 prompt tokens. Outputs of 10-1000 tokens
    // with a 600-token context: a request fits when its output is at most 408, about 40% of the
    // 50. Clients that went on serve about 20; the ceiling is (n - 1) / n × 160 / 192 for n
    // served, above 0.9 × 160 / 192 once more than 10 are served
    SharedPrefixWorkload w = new SharedPrefixWorkload(1, 1, LengthDist.fixed(160),
        LengthDist.fixed(32), LengthDist.parse("10-1000"), 50, 1, 0);
    assertThat(w.hitRateCeiling(1, 16, 600)).isGreaterThan(0.9 * 160 / 192.0);
  }
}
