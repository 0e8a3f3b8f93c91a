package io.epp4j.scorers;

import com.dynatrace.hash4j.hashing.HashValue128;
import com.dynatrace.hash4j.hashing.Hashing;
import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import org.jspecify.annotations.Nullable;

/**
 * How the plugins that remember sessions ({@code session-affinity-scorer},
 * {@code token-cost-picker}) hold a session key. Clients choose their keys, and kept whole,
 * 100,000 remembered sessions of the 8 KB one header line may hold would fill 800 MB.
 */
final class SessionKeys {
  private SessionKeys() {}

  /**
   * The request's session key as the plugins that key by session use it: null when it has none,
   * and null when it is an endpoint token ({@link #isEndpointToken}). The request parser takes
   * {@code x-session-token} as the session key of a client that sends no other session header,
   * and the token {@code session-affinity-scorer} writes there names an endpoint, not a session:
   * every client that endpoint served carries the same one, so keyed by it they would all count
   * as one session (token-cost-picker's bound on sessions per endpoint) or hash to one place
   * (ring-hash-picker, maglev-picker).
   */
  static @Nullable String sessionKey(InferenceRequest request) {
    String key = request.sessionKey();
    return key == null || key.isEmpty() || isEndpointToken(key) ? null : key;
  }

  /**
   * Whether {@code key} is the token {@code session-affinity-scorer} writes: base64 of an
   * endpoint id ({@code host:port}, as {@link Endpoint#parse} spells it).
   */
  static boolean isEndpointToken(String key) {
    if (key.length() % 4 != 0 || !SessionAffinityScorer.mayBeEndpointToken(key)) {
      return false; // a UUID, llm-d's namespace/name token: no decoding
    }
    String named = SessionAffinityScorer.decodeEndpoint(key);
    if (named == null || named.indexOf(':') < 0) {
      return false;
    }
    try {
      return Endpoint.parse(named).id().equals(named);
    } catch (IllegalArgumentException e) {
      return false;
    }
  }

  /** Longest session key held as it is; longer ones are held as a digest. */
  static final int MAX_KEY_CHARS = 64;

  /**
   * {@code key} itself, or for one longer than {@link #MAX_KEY_CHARS} a 128-bit digest of it
   * behind a NUL (which no header value holds, so it cannot equal a short key).
   */
  static String bounded(String key) {
    if (key.length() <= MAX_KEY_CHARS) {
      return key;
    }
    HashValue128 h = Hashing.xxh3_128().hashCharsTo128Bits(key);
    // both halves at full width, so that two digests never read as the same text
    return String.format(java.util.Locale.ROOT, "\0%016x%016x", h.getMostSignificantBits(),
        h.getLeastSignificantBits());
  }
}
