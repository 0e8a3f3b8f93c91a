package io.epp4j.scorers;

import io.epp4j.api.MetricAttributeSource;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import org.jspecify.annotations.Nullable;

/**
 * What {@code endpoint-attribute-filter} and {@code endpoint-attribute-scorer} share: finding the
 * attribute they read, and reading their nested parameters. Upstream reads a numeric endpoint
 * attribute by name and producer; in epp4j the one producer is the configuration's
 * {@code core-metrics-extractor}, whose {@code customMetrics} publish scraped figures under
 * names ({@link MetricAttributeSource}). An attribute nothing publishes is refused: upstream
 * would find it missing on every endpoint.
 */
final class EndpointAttributes {
  private EndpointAttributes() {}

  /** The producer that publishes custom metric attributes, upstream and here. */
  static final String CORE_EXTRACTOR = "core-metrics-extractor";

  /**
   * How to read the attribute that {@code keyParam} and {@code producer} name, or null
   * after recording why it cannot be read. {@code ifMissing} says what upstream would do with an
   * attribute missing everywhere, for the message.
   */
  static MetricAttributeSource.@Nullable Reader resolve(PluginContext c, Parameters p,
      String keyParam, String ifMissing) {
    String key = p.getString(keyParam, null);
    if (key == null || key.isEmpty()) {
      if (p.errors().stream().noneMatch(e -> e.startsWith("parameter '" + keyParam + "'"))) {
        p.error(keyParam, "is required: the name of the endpoint attribute to read");
      }
      p.raw("producer");
      return null;
    }
    // as upstream, a producer written as null counts as left out
    String producer = p.raw("producer") == null ? null : p.getString("producer", null);
    if (producer == null && key.contains("/")) {
      int at = key.lastIndexOf('/');
      p.error(keyParam, "'" + key + "' contains '/' but no producer is set; give the attribute"
          + " and its producer apart (" + keyParam + ": '" + key.substring(0, at)
          + "', producer: '" + key.substring(at + 1) + "'), or set producer when the name"
          + " itself holds a '/'");
      return null;
    }
    if (producer != null && !producer.equals(CORE_EXTRACTOR)) {
      p.error("producer", "must be '" + CORE_EXTRACTOR + "' (or left out), got '" + producer
          + "': " + whyNotProducer(producer));
      return null;
    }
    Set<String> published = new TreeSet<>();
    for (Plugin earlier : c.earlierPlugins()) {
      if (earlier instanceof MetricAttributeSource source) {
        MetricAttributeSource.Reader found = source.attribute(key);
        if (found != null) {
          return found;
        }
        published.addAll(source.attributeKeys());
      }
    }
    p.error(keyParam, "'" + key + "' is published by no customMetrics entry of a "
        + CORE_EXTRACTOR + " in this configuration (published: " + published
        + "); upstream would find it missing on every endpoint and " + ifMissing
        + ". Publish it with engineConfigs: [{name: vllm, ..., customMetrics: [{attributeKey: '"
        + key + "', metricSpec: vllm:num_requests_waiting}]}] (docs/plugins.md,"
        + " endpoint-attribute-filter)");
    return null;
  }

  private static String whyNotProducer(String producer) {
    if (producer.isEmpty()) {
      return "producer-agnostic attributes (such as the multicluster pool figures) come from"
          + " plugins epp4j does not have";
    }
    if (producer.startsWith("dcgm")) {
      return "epp4j scrapes the model servers' /metrics only, not DCGM";
    }
    return "epp4j publishes endpoint attributes only through the customMetrics of "
        + CORE_EXTRACTOR;
  }

  /** A nested object, or null when absent (or written as null) or after an error. */
  static @Nullable Map<?, ?> object(Parameters p, String where, @Nullable Object v) {
    if (v == null || v instanceof Map<?, ?>) {
      return (Map<?, ?>) v;
    }
    p.error(where, "must be an object, got " + (v instanceof List ? "a list" : "'" + v + "'"));
    return null;
  }

  /** Notes the fields of {@code m} that are not {@code known}: upstream passes over them too. */
  static void noticeUnknown(Parameters p, String where, Map<?, ?> m, Set<String> known) {
    for (Object k : m.keySet()) {
      if (!known.contains(String.valueOf(k))) {
        p.notice(where + "." + k, "is not read (upstream passes over it too)");
      }
    }
  }

  /**
   * A number field of a nested object: its value, {@code dflt} when absent, or null on error. Read
   * as any number parameter is, so a number in quotes ({@code value: '5'}) is that number here
   * too, and NaN, infinities and text that is no decimal number are refused.
   */
  static @Nullable Double number(Parameters p, String where, @Nullable Object v, double dflt) {
    if (v == null) {
      return dflt;
    }
    if (v instanceof Number || v instanceof String) {
      Parameters one = Parameters.of(Map.of(where, v));
      double d = one.getDouble(where, Double.NaN);
      if (one.errors().isEmpty()) {
        return d;
      }
    }
    p.error(where, "must be a number, got " + (v instanceof Map ? "an object"
        : v instanceof List ? "a list" : "'" + v + "'"));
    return null;
  }
}
