package io.epp4j.api;

import java.util.Map;
import org.jspecify.annotations.Nullable;

/**
 * A plugin that publishes scraped figures as named endpoint attributes: the
 * {@code core-metrics-extractor} of a configuration, with its {@code customMetrics}. Plugins that
 * read an attribute by name ({@code endpoint-attribute-filter}, {@code endpoint-attribute-scorer})
 * find their source among the plugins defined before them.
 */
public interface MetricAttributeSource extends Plugin {

  /** The figure published under {@code key}, or {@code null} when this source publishes none. */
  @Nullable MetricAttribute attribute(String key);

  /** Every attribute key this source publishes, with its figure. */
  Map<String, MetricAttribute> attributes();
}
