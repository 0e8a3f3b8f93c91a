package io.epp4j.sim;

/** Builds {@link SimRequest}s from explicit token arrays for the model tests. */
final class TestRequests {
  static final long SEED = ChainedBlockHash.seed("test-model");

  private TestRequests() {}

  /** A request whose prompt is {@code prompt} and which will generate {@code output} tokens. */
  static SimRequest request(String id, int[] prompt, int output) {
    int[] all = java.util.Arrays.copyOf(prompt, prompt.length + output);
    for (int i = prompt.length; i < all.length; i++) {
      all[i] = 900_000 + i;
    }
    RequestSpec spec = new RequestSpec(id, id, prompt.length, output, () -> all, false, id);
    return new SimRequest(spec, all, 0, null, SEED, 16);
  }

  /** {@code n} tokens {@code base, base+1, ...}. */
  static int[] tokens(int base, int n) {
    int[] t = new int[n];
    for (int i = 0; i < n; i++) {
      t[i] = base + i;
    }
    return t;
  }

  static int[] concat(int[] a, int[] b) {
    int[] t = java.util.Arrays.copyOf(a, a.length + b.length);
    System.arraycopy(b, 0, t, a.length, b.length);
    return t;
  }
}
