package io.epp4j.core;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import java.util.Set;

/**
 * {@code metrics-data-source} (upstream data layer): where endpoint metrics are scraped from.
 * epp4j's {@link MetricsScraper} does the scraping; a scraper built for a router whose
 * configuration declares this plugin takes its {@code scheme} and {@code path} as defaults, so
 * the file's values are honoured. So is {@code insecureSkipVerify} (default false): with
 * {@code true} and {@code https} the scraper takes any certificate the model servers present,
 * see {@link MetricsScraper.Builder#insecureSkipVerify} for the risk; a scraper that sets it in
 * code keeps its own value. With {@code http} it is only noticed, as there is no certificate to
 * check (upstream's charts render it so by default).
 */
final class MetricsDataSource implements Plugin {
  final String scheme;
  final String path;
  final boolean insecureSkipVerify;

  MetricsDataSource(String scheme, String path, boolean insecureSkipVerify) {
    this.scheme = scheme;
    this.path = path;
    this.insecureSkipVerify = insecureSkipVerify;
  }

  @Override
  public String toString() {
    return "metrics-data-source(" + scheme + "://<endpoint>" + path
        + (insecureSkipVerify ? ", insecureSkipVerify" : "") + ")";
  }

  /** Provides {@code metrics-data-source}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("metrics-data-source");
    }

    @Override
    protected Plugin build(PluginContext context, Parameters p) {
      String scheme = p.getEnum("scheme", "http", Set.of("http", "https"));
      String path = p.getString("path", "/metrics");
      String pathError = MetricsScraper.pathError(path);
      if (path == null || pathError != null) {
        p.error("path", pathError != null ? pathError : "must start with '/', got 'null'");
        path = "/metrics";
      }
      boolean skip = p.getBoolean("insecureSkipVerify", false);
      if (skip && scheme.equals("http")) {
        // upstream's charts render 'insecureSkipVerify: true' by default, with scheme http
        p.notice("insecureSkipVerify", "has no effect: the scheme is http, so there is no"
            + " certificate to verify");
        skip = false;
      } else if (skip) {
        p.notice("insecureSkipVerify", "is on: the scraper takes any certificate the model"
            + " servers present, so their metrics are encrypted but not authenticated");
      }
      return new MetricsDataSource(scheme, path, skip);
    }
  }
}
