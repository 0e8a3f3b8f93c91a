package io.epp4j.api;

import java.util.Set;
import org.jspecify.annotations.Nullable;

/**
 * A plugin that publishes scraped figures as named numeric endpoint attributes: the
 * {@code core-metrics-extractor} of a configuration, with the {@code customMetrics} of its
 * {@code engineConfigs}. Plugins that read an attribute by name ({@code endpoint-attribute-filter},
 * {@code endpoint-attribute-scorer}) find their source among the plugins defined before them.
 */
public interface MetricAttributeSource extends Plugin {

  /** Reads one attribute of a candidate. Thread-safe; runs on the request path. */
  @FunctionalInterface
  interface Reader {
    /**
     * The attribute's value for {@code candidate}, or NaN when the candidate does not have it
     * (its server was never scraped, or the attribute is not published for its engine).
     */
    double read(Candidate candidate);
  }

  /** How to read attribute {@code key}, or {@code null} when this source never publishes it. */
  @Nullable Reader attribute(String key);

  /** Every attribute key this source publishes (for messages). */
  Set<String> attributeKeys();
}
