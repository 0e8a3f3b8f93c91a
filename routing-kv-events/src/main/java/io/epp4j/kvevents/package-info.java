/**
 * Precise prefix-cache routing: decoding of vLLM KV-cache events, an index of the blocks each
 * replica really holds, the ZeroMQ subscriber that feeds it, the {@code
 * precise-prefix-cache-scorer} and {@code hybrid-prefix-cache-scorer} plugins, and tokenizers
 * for requests that arrive as text.
 */
@NullMarked
package io.epp4j.kvevents;

import org.jspecify.annotations.NullMarked;
