package io.epp4j.api;

/**
 * A scorer that publishes {@link PrefixHits} whenever it scores: every built-in prefix-cache
 * scorer and producer ({@code prefix-cache-scorer}, {@code approx-prefix-cache-producer},
 * {@code precise-prefix-cache-scorer} and {@code -producer}, {@code hybrid-prefix-cache-scorer}).
 * The plugins that name the producer they read ({@code prefixMatchInfoProducerName} of
 * {@code prefix-cache-scorer}, {@code prefix-cache-affinity-filter} and
 * {@code p2p-source-producer}) accept only such a scorer, so that a file naming, say, a queue
 * scorer there is refused at load instead of routing without its prefix matches. A custom prefix
 * scorer implements it to be named there; it then must publish its hits (through
 * {@link PrefixHits#publish}) on every call with at least one candidate, and score endpoint
 * {@code i} {@code cachedBlocks(i) / totalBlocks(i)}.
 */
public interface PrefixHitsProducer extends Scorer {}
