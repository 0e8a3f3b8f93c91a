/**
 * A discrete-event simulator of a vLLM cluster driven by the real {@code Router}: replicas with a
 * paged, prefix-cached KV cache and a continuous-batching scheduler, a latency model with GPU
 * sharing, workloads (shared system prompts, multi-turn chat, Mooncake trace replay), routing
 * policies given as {@code EndpointPickerConfig} presets, and a comparison report.
 * Entry point: {@link io.epp4j.sim.Main}.
 */
@NullMarked
package io.epp4j.sim;

import org.jspecify.annotations.NullMarked;
