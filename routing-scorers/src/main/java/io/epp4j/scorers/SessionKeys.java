package io.epp4j.scorers;

import com.dynatrace.hash4j.hashing.HashValue128;
import com.dynatrace.hash4j.hashing.Hashing;

/**
 * How the plugins that remember sessions ({@code session-affinity-scorer},
 * {@code token-cost-picker}) hold a session key. Clients choose their keys, and kept whole,
 * 100,000 remembered sessions of the 8 KB one header line may hold would fill 800 MB.
 */
final class SessionKeys {
  private SessionKeys() {}

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
