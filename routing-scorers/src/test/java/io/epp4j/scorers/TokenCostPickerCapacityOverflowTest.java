package io.epp4j.scorers;

import static io.epp4j.scorers.TestCandidates.joined;
import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.InferenceRequest;
import java.util.List;
import org.junit.jupiter.api.Test;

/** token-cost-picker with a num_gpu_blocks label whose product with the block size wraps. */
class TokenCostPickerCapacityOverflowTest {

  @Test
  void tokenCostPickerTreatsAWrappingCapacityAsLargeNotAsAFewTokens() {
    // a bogus num_gpu_blocks label (2^60 + 1 blocks of 16 tokens) wraps the product to 16 tokens
    TokenCostPicker p = new TokenCostPicker(0.125, 0.3, 3.0, 0, 0, 120, 0.0);
    Candidate huge = TestCandidates.withMetrics("10.0.0.1:8000", EndpointMetrics.builder()
        .kvCapacityBlocks((1L << 60) + 1).blockSizeTokens(16).kvCacheUsage(0.0)
        .scrapedAtNanos(0).build());
    // a real endpoint of 1,600 tokens, half full: a 1,000-token prompt overflows it by 200
    Candidate crowded = TestCandidates.withMetrics("10.0.0.2:8000", EndpointMetrics.builder()
        .kvCapacityBlocks(100).blockSizeTokens(16).kvCacheUsage(0.5)
        .scrapedAtNanos(0).build());
    List<Candidate> pool = List.of(huge, crowded);
    joined(p, pool);
    InferenceRequest r = InferenceRequest.builder().model("m").tokenIds(new int[1000]).build();

    // an empty endpoint that holds more than any prompt costs just the prompt
    assertThat(p.cost(huge, 1000, 0)).isEqualTo(1000.0);
    assertThat(p.pick(r, TestCandidates.state(), pool, new double[2]).get(0).id())
        .isEqualTo(huge.id());
  }
}
