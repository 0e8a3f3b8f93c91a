package io.epp4j.redis;

import org.jspecify.annotations.Nullable;

/**
 * What one routed request taught: where its prompt went and where its session now lives. Made
 * on the routing thread, so it holds only what {@code afterRouting} already had.
 */
final class Hint {
  final long capturedNanos;
  final String endpointId;
  final @Nullable String prefillEndpointId;
  final int blockSizeTokens;
  final long @Nullable [] hashes;
  final @Nullable String sessionKey;

  Hint(long capturedNanos, String endpointId, @Nullable String prefillEndpointId,
      int blockSizeTokens, long @Nullable [] hashes, @Nullable String sessionKey) {
    this.capturedNanos = capturedNanos;
    this.endpointId = endpointId;
    this.prefillEndpointId = prefillEndpointId;
    this.blockSizeTokens = blockSizeTokens;
    this.hashes = hashes;
    this.sessionKey = sessionKey;
  }
}
