package io.epp4j.kvevents;

import org.jspecify.annotations.Nullable;

/**
 * Where a cached block lives on a replica. vLLM reports {@code "GPU"} for its own KV cache and
 * {@code "CPU"} for blocks offloaded to host memory; {@link #of} reads any other medium as an
 * offload tier too, because a hit there still has to be copied back before use.
 * {@link KvEventDecoder} skips the events of media other than GPU and CPU (vLLM's
 * {@code "STORAGE"}): the index keeps one offload tier, and a removal from a further tier must
 * not drop the copy the CPU tier still holds.
 */
public enum Medium {
  /** The engine's own KV cache: a hit is free. */
  GPU,
  /** An offload tier: a hit saves the prefill but costs a copy. */
  CPU;

  /** Maps vLLM's medium string; {@code null} (absent) means GPU, as in vLLM. */
  public static Medium of(@Nullable String name) {
    if (name == null || name.equalsIgnoreCase("GPU")) {
      return GPU;
    }
    return CPU;
  }

  int bit() {
    return this == GPU ? 1 : 2;
  }
}
