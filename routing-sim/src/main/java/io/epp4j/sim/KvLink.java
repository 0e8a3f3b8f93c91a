package io.epp4j.sim;

import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import org.jspecify.annotations.Nullable;

/**
 * The link a disaggregated request's KV crosses from its prefill replica to its decode replica.
 * A transfer of {@code bytes} takes {@code bytes / bytesPerSecond + latencySeconds}; transfers do
 * not share the link (each gets its whole bandwidth). Sources of the built-in links are listed in
 * {@code routing-sim/README.md} ("Prefill/decode disaggregation").
 *
 * @param name           the name {@code --kv-link} takes
 * @param bytesPerSecond the link's data rate in one direction, bytes/s
 * @param latencySeconds fixed time per transfer (connector hand-shake, the extra hop)
 */
public record KvLink(String name, double bytesPerSecond, double latencySeconds) {

  public KvLink {
    if (!(bytesPerSecond > 0) || !(latencySeconds >= 0)) {
      throw new IllegalArgumentException("a KV link needs a positive rate and a latency >= 0");
    }
  }

  /** Name of the default link. */
  public static final String RDMA_400G = "rdma-400g";
  /** Name of the NVLink link. */
  public static final String NVLINK = "nvlink";

  /** Fixed time per transfer, an assumption (see README). */
  static final double LATENCY_SECONDS = 0.001;

  /**
   * One 400 Gb/s RDMA port per GPU (ConnectX-7 NDR, as in a DGX H100): 50 GB/s, prefill and
   * decode on different nodes, as llm-d's P/D deployments place them.
   */
  public static KvLink rdma400g() {
    return new KvLink(RDMA_400G, 400e9 / 8, LATENCY_SECONDS);
  }

  /**
   * NVLink 4 between two H100 SXM GPUs of one HGX node: 900 GB/s total, 450 GB/s in each
   * direction.
   */
  public static KvLink nvlink() {
    return new KvLink(NVLINK, 450e9, LATENCY_SECONDS);
  }

  /** Links by name. */
  public static Map<String, KvLink> builtIns() {
    Map<String, KvLink> m = new TreeMap<>();
    for (KvLink l : new KvLink[] {rdma400g(), nvlink()}) {
      m.put(l.name(), l);
    }
    return m;
  }

  /** A built-in link by name, or {@code null}. */
  public static @Nullable KvLink named(String name) {
    return builtIns().get(name.toLowerCase(Locale.ROOT));
  }

  /** Simulated nanoseconds to move the KV of {@code tokens} tokens at {@code bytesPerToken}. */
  public long transferNanos(long tokens, long bytesPerToken) {
    double seconds = (double) tokens * bytesPerToken / bytesPerSecond + latencySeconds;
    return Math.round(seconds * 1e9);
  }
}
