package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.PrefixHits;
import java.util.List;
import org.junit.jupiter.api.Test;

/** token-cost-picker's bound on sessions after a quiet spell longer than the session TTL. */
class TokenCostPickerIdleSessionsTest {

  static final List<Candidate> POOL = TestCandidates.pool(2);
  static final long TTL_NANOS = 10_000_000_000L;

  static InferenceRequest request(String session) {
    return InferenceRequest.builder().model("m").tokenIds(new int[160]).maxTokens(10)
        .sessionKey(session).build();
  }

  /** A cycle at {@code now} where the first endpoint holds 9 of the prompt's 10 blocks. */
  static CycleState hitOnFirst(long now, long seed) {
    CycleState s = TestCandidates.state(now, seed);
    PrefixHits.publish(s, PrefixHits.of(new String[] {POOL.get(0).id(), POOL.get(1).id()},
        new int[] {10, 10}, new double[] {9, 0}, 16));
    return s;
  }

  @Test
  void sessionsIdleLongerThanTheTtlNoLongerCountAgainstTheBound() {
    Candidate a = POOL.get(0);
    // bound factor 1, TTL 10 s
    TokenCostPicker p = new TokenCostPicker(0.125, 0.3, 3.0, 0, 1.0, 10);
    p.onEndpointAdded(a.endpoint());
    // three dialogs while the first endpoint is alone in the pool
    for (int k = 0; k < 3; k++) {
      CycleState s = hitOnFirst(k, k + 1);
      TokenCostPickerTest.route(p, request("s" + k), s, List.of(a));
    }
    assertThat(p.sessions(a.id())).isEqualTo(3);
    p.onEndpointAdded(POOL.get(1).endpoint());

    // ten TTLs later none of them is active: a new dialog may go where its prefix is (the bound
    // is ceil(1 × (0 + 1) / 2) = 1 session per endpoint, and the first holds none that counts)
    long later = 10 * TTL_NANOS;
    CycleState s = hitOnFirst(later, 99);
    Candidate picked = p.pick(request("new"), s, POOL, new double[2]).get(0);
    assertThat(picked.id()).isEqualTo(a.id());
  }
}
