package io.epp4j.scorers;

import io.epp4j.api.AttributeKey;
import java.util.Arrays;
import java.util.Objects;

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
  private final String[] endpointIds;
  private final int[] matched;

  private PrefixMatch(int totalBlocks, int blockSizeTokens, String[] endpointIds, int[] matched) {
    this.totalBlocks = totalBlocks;
    this.blockSizeTokens = blockSizeTokens;
    this.endpointIds = endpointIds;
    this.matched = matched;
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
    return new PrefixMatch(totalBlocks, blockSizeTokens, endpointIds.clone(), matchedBlocks.clone());
  }

  /** Without copying; the caller hands over the arrays. */
  static PrefixMatch wrap(int totalBlocks, int blockSizeTokens, String[] ids, int[] matched) {
    return new PrefixMatch(totalBlocks, blockSizeTokens, ids, matched);
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
    for (int i = 0; i < endpointIds.length; i++) {
      if (endpointIds[i].equals(endpointId)) {
        return matched[i];
      }
    }
    return 0;
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
    String[] ids = Arrays.copyOf(endpointIds, endpointIds.length + other.endpointIds.length);
    int[] m = Arrays.copyOf(matched, matched.length + other.matched.length);
    int n = endpointIds.length;
    for (int i = 0; i < other.endpointIds.length; i++) {
      if (indexOf(other.endpointIds[i]) < 0) {
        ids[n] = other.endpointIds[i];
        m[n] = other.matched[i];
        n++;
      }
    }
    return new PrefixMatch(Math.max(totalBlocks, other.totalBlocks), blockSizeTokens,
        Arrays.copyOf(ids, n), Arrays.copyOf(m, n));
  }

  private int indexOf(String id) {
    for (int i = 0; i < endpointIds.length; i++) {
      if (endpointIds[i].equals(id)) {
        return i;
      }
    }
    return -1;
  }

  @Override
  public String toString() {
    StringBuilder sb = new StringBuilder("PrefixMatch{total=").append(totalBlocks)
        .append(", blockSize=").append(blockSizeTokens);
    for (int i = 0; i < endpointIds.length; i++) {
      sb.append(", ").append(endpointIds[i]).append('=').append(matched[i]);
    }
    return sb.append('}').toString();
  }
}
