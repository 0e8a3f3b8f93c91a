/**
 * Precise prefix-cache routing: decoding of vLLM KV-cache events, an index of the blocks each
 * replica really holds, the ZeroMQ subscriber that feeds it, the {@code
 * precise-prefix-cache-scorer} and {@code hybrid-prefix-cache-scorer} plugins, and tokenizers
 * for requests that arrive as text.
 *
 * <p>Public: the subscriber and the index with their builders, the events and their decoder
 * (for in-process feeding and other transports), the metrics, the presets, the tokenizer SPI and
 * its implementations, {@code BlockKeys} (to query the index) and {@code PreciseMatch} (for
 * request listeners). Everything else (the scorers themselves, configured by type name, the holder
 * tables, the telemetry export) is package-private and may change without notice.
 */
@NullMarked
package io.epp4j.kvevents;

import org.jspecify.annotations.NullMarked;
