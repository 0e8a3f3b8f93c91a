package io.epp4j.redis;

import io.epp4j.api.PrefixBlocks;
import org.jspecify.annotations.Nullable;

/**
 * What one routed request taught: where its prompt went and where its session now lives. Made
 * on the routing thread from what {@code afterRouting} had: the block hashes as
 * {@link PrefixBlocks#retained()} gives them (the prefix scorer's cycle-bound hashes copied,
 * since they are readable only until the cycle ends). It is also its own node in the publish
 * queue, so queueing allocates nothing more.
 */
final class Hint {
  final long capturedNanos;
  final String endpointId;
  final @Nullable String prefillEndpointId;
  final @Nullable PrefixBlocks blocks;
  final @Nullable String sessionKey;
  volatile @Nullable Hint next;

  Hint(long capturedNanos, String endpointId, @Nullable String prefillEndpointId,
      @Nullable PrefixBlocks blocks, @Nullable String sessionKey) {
    this.capturedNanos = capturedNanos;
    this.endpointId = endpointId;
    this.prefillEndpointId = prefillEndpointId;
    this.blocks = blocks;
    this.sessionKey = sessionKey;
  }
}
