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
 * the file's values are honoured. {@code insecureSkipVerify: true} with {@code https} is refused:
 * the scraper checks TLS certificates, and a server with a self-signed one must be trusted
 * through the JVM's trust store instead. With {@code http} it is only noticed, as there is no
 * certificate to check (upstream's charts render it so by default).
 */
final class MetricsDataSource implements Plugin {
  final String scheme;
  final String path;

  MetricsDataSource(String scheme, String path) {
    this.scheme = scheme;
    this.path = path;
  }

  @Override
  public String toString() {
    return "metrics-data-source(" + scheme + "://<endpoint>" + path + ")";
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
      if (p.getBoolean("insecureSkipVerify", false)) {
        if (scheme.equals("https")) {
          p.error("insecureSkipVerify", "is not supported: epp4j's scraper verifies certificates;"
              + " add the model servers' certificate to the JVM trust store instead");
        } else {
          // upstream's charts render 'insecureSkipVerify: true' by default, with scheme http
          p.notice("insecureSkipVerify", "has no effect: the scheme is http, so there is no"
              + " certificate to verify");
        }
      }
      return new MetricsDataSource(scheme, path);
    }
  }
}
