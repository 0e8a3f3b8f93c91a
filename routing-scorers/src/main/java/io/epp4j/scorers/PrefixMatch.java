package io.epp4j.scorers;

import io.epp4j.api.AttributeKey;
import io.epp4j.api.Candidate;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;
import org.jspecify.annotations.Nullable;

/**
 * How much of a request's prompt each endpoint is believed to have cached, as computed by
 * {@code prefix-cache-scorer} and published in the cycle's {@link io.epp4j.api.CycleState} under
 * {@link #KEY} for later plugins (the prefill/decode handler, no-hit spreading, simulators).
 * Matches are strict prefixes: an endpoint is credited only with consecutive blocks from the
 * first one. Immutable.
 */
public final class PrefixMatch {

  /** Where {@code prefix-cache-scorer} publishes its match. */
  public static final AttributeKey<PrefixMatch> KEY =
      AttributeKey.of("io.epp4j.scorers.PrefixMatch", PrefixMatch.class);

  private final int totalBlocks;
  private final int blockSizeTokens;
  // exactly one of the two: ids given by value, or the scored candidates (not copied, so that
  // the hot path allocates no id array; candidate lists of a cycle are not modified)
  private final String @Nullable [] endpointIds;
  private final @Nullable List<Candidate> candidates;
  private final int[] matched;

  private PrefixMatch(int totalBlocks, int blockSizeTokens, String @Nullable [] endpointIds,
      @Nullable List<Candidate> candidates, int[] matched) {
    this.totalBlocks = totalBlocks;
    this.blockSizeTokens = blockSizeTokens;
    this.endpointIds = endpointIds;
    this.candidates = candidates;
    this.matched = matched;
  }

  private String idAt(int i) {
    String[] ids = endpointIds;
    return ids != null ? ids[i] : java.util.Objects.requireNonNull(candidates).get(i).id();
  }

  /**
   * A match; {@code matchedBlocks[i]} belongs to {@code endpointIds[i]}. The arrays are copied.
   *
   * @throws IllegalArgumentException if the arrays differ in length or a count is out of range
   */
  public static PrefixMatch of(int totalBlocks, int blockSizeTokens, String[] endpointIds,
      int[] matchedBlocks) {
    if (endpointIds.length != matchedBlocks.length) {
      throw new IllegalArgumentException("endpointIds and matchedBlocks differ in length");
    }
    for (int m : matchedBlocks) {
      if (m < 0 || m > totalBlocks) {
        throw new IllegalArgumentException("matched blocks must be in [0, totalBlocks], got " + m);
      }
    }
    for (String id : endpointIds) {
      Objects.requireNonNull(id, "endpoint id");
    }
    return new PrefixMatch(totalBlocks, blockSizeTokens, endpointIds.clone(), null,
        matchedBlocks.clone());
  }

  /** Without copying; {@code matched[i]} belongs to {@code candidates.get(i)}. */
  static PrefixMatch wrap(int totalBlocks, int blockSizeTokens, List<Candidate> candidates,
      int[] matched) {
    return new PrefixMatch(totalBlocks, blockSizeTokens, null, candidates, matched);
  }

  /** Full blocks of the prompt that were considered (at most {@code maxPrefixBlocksToMatch}). */
  public int totalBlocks() {
    return totalBlocks;
  }

  /** Tokens per block (text prompts: one block is {@code 4 × blockSizeTokens} characters). */
  public int blockSizeTokens() {
    return blockSizeTokens;
  }

  /** Consecutive blocks from the first that the endpoint holds; 0 for an unknown endpoint. */
  public int matchedBlocks(String endpointId) {
    int i = indexOf(endpointId);
    return i < 0 ? 0 : matched[i];
  }

  /** The best match over all endpoints scored. */
  public int maxMatchedBlocks() {
    int max = 0;
    for (int m : matched) {
      max = Math.max(max, m);
    }
    return max;
  }

  /** Estimated prompt tokens the endpoint has cached ({@code matchedBlocks × blockSizeTokens}). */
  public long matchedTokens(String endpointId) {
    return (long) matchedBlocks(endpointId) * blockSizeTokens;
  }

  /** This match extended with another one for the same request (e.g. a second profile's pool). */
  PrefixMatch merge(PrefixMatch other) {
    int mine = matched.length;
    String[] ids = new String[mine + other.matched.length];
    int[] m = Arrays.copyOf(matched, ids.length);
    for (int i = 0; i < mine; i++) {
      ids[i] = idAt(i);
    }
    int n = mine;
    for (int i = 0; i < other.matched.length; i++) {
      String id = other.idAt(i);
      if (indexOf(id) < 0) {
        ids[n] = id;
        m[n] = other.matched[i];
        n++;
      }
    }
    return new PrefixMatch(Math.max(totalBlocks, other.totalBlocks), blockSizeTokens,
        Arrays.copyOf(ids, n), null, Arrays.copyOf(m, n));
  }

  /** Position of an endpoint in this match, or -1. */
  int indexOf(String id) {
    for (int i = 0; i < matched.length; i++) {
      if (idAt(i).equals(id)) {
        return i;
      }
    }
    return -1;
  }

  /** Matched blocks at a position of {@link #indexOf}. */
  int matchedAt(int i) {
    return matched[i];
  }

  @Override
  public String toString() {
    StringBuilder sb = new StringBuilder("PrefixMatch{total=").append(totalBlocks)
        .append(", blockSize=").append(blockSizeTokens);
    for (int i = 0; i < matched.length; i++) {
      sb.append(", ").append(idAt(i)).append('=').append(matched[i]);
    }
    return sb.append('}').toString();
  }
}
