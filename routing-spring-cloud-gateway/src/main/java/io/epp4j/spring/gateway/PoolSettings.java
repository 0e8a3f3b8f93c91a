package io.epp4j.spring.gateway;

import io.epp4j.api.Endpoint;
import io.epp4j.core.OpenAiRequestParser;
import io.epp4j.core.Router;
import io.epp4j.scorers.Epp4jPreset;
import java.net.URI;
import java.net.URISyntaxException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Pattern;
import org.jspecify.annotations.Nullable;
import org.springframework.util.unit.DataSize;

/**
 * The settings of one pool, the default one ({@code epp4j.*}) or a named one
 * ({@code epp4j.pools.<name>.*}, with unset values taken from {@code epp4j.*}), and the building
 * and checking code both share. Every error message starts with the full property name.
 */
final class PoolSettings {
  static final String PREFIX = "epp4j";
  static final String POOLS_PREFIX = PREFIX + ".pools.";
  static final String DEFAULT_SCHEME = "http";
  private static final Pattern NAME = Pattern.compile("[A-Za-z0-9_-]+");
  /**
   * A map key Spring binds as written without brackets: its property names' own elements (lower
   * case letters and digits, '-' after the first). Outside brackets Spring drops other
   * characters and splits at dots, so {@code my_pool} is written {@code epp4j.pools[my_pool]}.
   */
  private static final Pattern PLAIN_KEY = Pattern.compile("[a-z0-9][a-z0-9-]*");
  /** An HTTP field name: a token of RFC 9110 (section 5.1). */
  private static final Pattern HEADER_NAME = Pattern.compile("[!#$%&'*+.^_`|~0-9A-Za-z-]+");

  /** The pool's name, {@code null} for the default pool. */
  final @Nullable String name;
  /** {@code epp4j} or {@code epp4j.pools.<name>}. */
  final String prefix;
  final List<String> endpoints;
  final @Nullable String configFile;
  final @Nullable String preset;
  final @Nullable String serviceId;
  final Duration refreshInterval;
  final @Nullable Duration inFlightMaxAge;
  final List<String> sessionHeaders;
  /**
   * The keys ({@code scheme}, {@code metrics.interval}, ...) whose value a named pool leaves
   * unset and takes from the top-level {@code epp4j.*} property: a bad value is named by that
   * property ({@link #source}), the one the user set.
   */
  private final java.util.Set<String> inherited;
  /** The property the session headers came from: the pool's own or the inherited one. */
  final String sessionHeadersProperty;
  final DataSize maxBodySize;
  /** Scheme of the requests to the replicas: the property's, else {@code http}. */
  final String scheme;
  /**
   * The scheme property as set (for this pool or inherited), {@code null} when unset: the
   * scraper then takes the routing configuration's {@code metrics-data-source} scheme.
   */
  final @Nullable String schemeSet;
  final boolean metricsEnabled;
  final Duration metricsInterval;
  /**
   * The metrics path property as set (for this pool or inherited), {@code null} when unset: the
   * scraper then takes the routing configuration's {@code metrics-data-source} path.
   */
  final @Nullable String metricsPath;
  /**
   * The metrics insecure-skip-verify property as set (for this pool or inherited), {@code null}
   * when unset: the scraper then takes the routing configuration's {@code metrics-data-source}
   * value.
   */
  final @Nullable Boolean metricsInsecureSkipVerify;

  private PoolSettings(@Nullable String name, List<String> endpoints, @Nullable String configFile,
      @Nullable String preset, @Nullable String serviceId, Duration refreshInterval,
      @Nullable Duration inFlightMaxAge, List<String> sessionHeaders, DataSize maxBodySize,
      @Nullable String scheme, boolean metricsEnabled, Duration metricsInterval,
      @Nullable String metricsPath, @Nullable Boolean metricsInsecureSkipVerify,
      java.util.Set<String> inherited) {
    this.name = name;
    this.prefix = name == null ? PREFIX : poolPrefix(name);
    this.inherited = java.util.Set.copyOf(inherited);
    this.endpoints = endpoints;
    this.configFile = configFile;
    this.preset = preset;
    this.serviceId = serviceId;
    this.refreshInterval = refreshInterval;
    this.inFlightMaxAge = inFlightMaxAge;
    this.sessionHeaders = sessionHeaders;
    this.sessionHeadersProperty = source("session-headers");
    this.maxBodySize = maxBodySize;
    this.schemeSet = scheme;
    this.scheme = scheme != null ? scheme : DEFAULT_SCHEME;
    this.metricsEnabled = metricsEnabled;
    this.metricsInterval = metricsInterval;
    this.metricsPath = metricsPath;
    this.metricsInsecureSkipVerify = metricsInsecureSkipVerify;
  }

  /** The default pool, from the top-level {@code epp4j.*} properties. */
  static PoolSettings of(Epp4jProperties p) {
    return new PoolSettings(null, p.getEndpoints(), p.getConfigFile(), p.getPreset(),
        p.getDiscovery().getServiceId(), p.getDiscovery().getRefreshInterval(),
        p.getInFlightMaxAge(), p.getSessionHeaders(), p.getMaxBodySize(), p.getScheme(),
        p.getMetrics().isEnabled(), p.getMetrics().getInterval(), p.getMetrics().getPath(),
        p.getMetrics().getInsecureSkipVerify(), java.util.Set.of());
  }

  /**
   * The named pool {@code name}: its own endpoints, config file, preset and discovery service;
   * the other values from the top-level properties where it leaves them unset.
   */
  static PoolSettings of(Epp4jProperties top, String name, Epp4jProperties.Pool p) {
    checkName(name);
    Epp4jProperties.PoolMetrics m = p.getMetrics();
    Epp4jProperties.PoolDiscovery d = p.getDiscovery();
    java.util.Set<String> inherited = new java.util.HashSet<>();
    return new PoolSettings(name, p.getEndpoints(), p.getConfigFile(), p.getPreset(),
        d.getServiceId(),
        or(d.getRefreshInterval(), top.getDiscovery().getRefreshInterval(),
            "discovery.refresh-interval", inherited),
        orUnset(p.getInFlightMaxAge(), top.getInFlightMaxAge(), "in-flight-max-age", inherited),
        or(p.getSessionHeaders(), top.getSessionHeaders(), "session-headers", inherited),
        or(p.getMaxBodySize(), top.getMaxBodySize(), "max-body-size", inherited),
        orUnset(p.getScheme(), top.getScheme(), "scheme", inherited),
        or(m.getEnabled(), top.getMetrics().isEnabled(), "metrics.enabled", inherited),
        or(m.getInterval(), top.getMetrics().getInterval(), "metrics.interval", inherited),
        orUnset(m.getPath(), top.getMetrics().getPath(), "metrics.path", inherited),
        orUnset(m.getInsecureSkipVerify(), top.getMetrics().getInsecureSkipVerify(),
            "metrics.insecure-skip-verify", inherited),
        inherited);
  }

  static void checkName(String name) {
    if (!NAME.matcher(name).matches()) {
      throw new Epp4jConfigurationException(poolPrefix(name) + ": a pool name is letters, digits,"
          + " '-' and '_', got '" + name + "'");
    }
  }

  /**
   * The named pool's property prefix as the user writes it, so that a property named in a message
   * can be pasted back: {@code epp4j.pools.llama}, or in Spring's bracket notation
   * {@code epp4j.pools[my_pool]} for a name that needs it.
   */
  static String poolPrefix(String name) {
    return PLAIN_KEY.matcher(name).matches() ? POOLS_PREFIX + name
        : PREFIX + ".pools[" + name + "]";
  }

  /** The full name of one of this pool's properties, e.g. {@code epp4j.pools.llama.endpoints}. */
  String property(String key) {
    return prefix + "." + key;
  }

  /**
   * The property this pool's value for {@code key} came from: the pool's own
   * ({@code epp4j.pools.llama.scheme}), or the top-level one ({@code epp4j.scheme}) a named pool
   * inherits when it leaves its own unset. Messages about a bad value name this one, which the
   * user set: the pool's property may not be set at all.
   */
  String source(String key) {
    return inherited.contains(key) ? PREFIX + "." + key : property(key);
  }

  /**
   * Whether this pool's value for {@code key} is its own, not one a named pool inherits from the
   * top-level property ({@link #source}).
   */
  boolean setHere(String key) {
    return !inherited.contains(key);
  }

  /** Checks every value, as the pool's router, scraper and filter would when built. */
  void validate() {
    parsedEndpoints();
    maxBodyBytes();
    checkedScheme();
    checkSessionHeaders();
    presetYaml();
    if (inFlightMaxAge != null) {
      positive(inFlightMaxAge, "in-flight-max-age");
      checkRenewable(inFlightMaxAge);
    }
    // checked without a service id too, as the metrics settings are with scraping off: a
    // mistake there would otherwise surface only once a service id is set
    positive(refreshInterval, "discovery.refresh-interval");
    checkServiceId();
    // checked with scraping off too, as routing-envoy checks its options: a mistake there would
    // otherwise surface only when scraping is switched on
    validateScraper();
  }

  /**
   * Checks what the metrics scraper is built from (scheme, interval, path), naming the property;
   * on its own where the application brings its own router and only the scraper is ours.
   */
  void validateScraper() {
    checkedScheme();
    positive(metricsInterval, "metrics.interval");
    if (metricsPath != null && (metricsPath.isBlank() || !metricsPath.startsWith("/"))) {
      throw new Epp4jConfigurationException(source("metrics.path") + " must start with '/', got '"
          + metricsPath + "'");
    }
    if (metricsPath != null) {
      checkMetricsPathIsUriPath(metricsPath);
    }
  }

  /**
   * The path is appended to {@code scheme://ip:port} for every scrape, so it must be valid in a
   * URI as written, as the scraper's builder requires; checked here, where the property can be
   * named, and with scraping off too, so that the mistake does not wait for scraping to be on.
   */
  private void checkMetricsPathIsUriPath(String path) {
    String base = "http://127.0.0.1:1";
    try {
      if (new URI(base + path).getRawFragment() != null) {
        throw new Epp4jConfigurationException(source("metrics.path") + " must not have a"
            + " fragment ('#'), which is never sent, got '" + path + "'");
      }
    } catch (URISyntaxException e) {
      throw new Epp4jConfigurationException(source("metrics.path") + " is not valid in a URI ("
          + e.getReason() + " at index " + (e.getIndex() - base.length())
          + "; percent-encode such characters, a space is %20), got '" + path + "'");
    }
  }

  /**
   * Each session header must be an HTTP header name: a blank entry or one with spaces, colons
   * or other separators would be taken and never match a request's header.
   */
  void checkSessionHeaders() {
    if (sessionHeaders.isEmpty()) {
      // an empty value (an unset variable behind the property, say) would turn session keys off
      // unseen; nothing documents that as a switch, so it is taken for the slip it most likely is
      throw new Epp4jConfigurationException(sessionHeadersProperty + " names no header; give one"
          + " or more header names (e.g. x-session-id), or leave the property unset for the"
          + " defaults");
    }
    for (String h : sessionHeaders) {
      if (h == null || !HEADER_NAME.matcher(h).matches()) {
        throw new Epp4jConfigurationException(sessionHeadersProperty + ": '" + h
            + "' is not an HTTP header name (letters, digits and !#$%&'*+-.^_`|~, nothing else)");
      }
    }
  }

  /**
   * A service id with whitespace before or after the name ({@code llm } from an environment
   * variable) would be looked up as written: no registry has such a service, so every lookup
   * would empty the pool. A blank one is unset ({@link #hasServiceId}) and not refused here.
   */
  void checkServiceId() {
    String id = serviceId;
    if (id != null && !id.isBlank() && !id.equals(id.strip())) {
      throw new Epp4jConfigurationException(property("discovery.service-id") + " has whitespace"
          + " before or after the service name, got '" + id + "': it would be looked up"
          + " as written, which no registry has, and the pool would stay empty; remove the"
          + " whitespace where the value is set (the variable or file behind it)");
    }
  }

  boolean hasServiceId() {
    return serviceId != null && !serviceId.isBlank();
  }

  /**
   * The endpoint list, each entry parsed. An address listed twice fails, naming both entries: the
   * router keeps one endpoint per address, with the labels of its last entry, so
   * {@code a:1=prefill,a:1=decode} would silently be a decode server only.
   */
  List<Endpoint> parsedEndpoints() {
    List<Endpoint> out = new ArrayList<>(endpoints.size());
    Map<String, Integer> entryOf = new HashMap<>();
    int entry = 0;
    for (String hp : endpoints) {
      entry++;
      String s = hp.strip();
      if (s.isEmpty()) {
        continue;
      }
      Endpoint e;
      try {
        e = Endpoint.parseWithRole(s);
      } catch (IllegalArgumentException x) {
        throw new Epp4jConfigurationException(property("endpoints") + ": '" + s
            + "' is not host:port or host:port=role (" + x.getMessage() + ")", x);
      }
      Integer first = entryOf.putIfAbsent(e.id(), entry);
      if (first != null) {
        throw new Epp4jConfigurationException(property("endpoints") + ": '" + e.id()
            + "' is listed twice (entries " + first + " and " + entry + "); list each endpoint"
            + " once");
      }
      out.add(e);
    }
    return out;
  }

  int maxBodyBytes() {
    long bytes = maxBodySize.toBytes();
    if (bytes <= 0 || bytes > Integer.MAX_VALUE) {
      throw new Epp4jConfigurationException(source("max-body-size")
          + " must be between 1 byte and 2 GB, got " + maxBodySize);
    }
    return (int) bytes;
  }

  String checkedScheme() {
    if (!scheme.equals("http") && !scheme.equals("https")) {
      throw new Epp4jConfigurationException(
          source("scheme") + " must be http or https, got '" + scheme + "'");
    }
    return scheme;
  }

  /** The config file to load, or {@code null} for a preset or the default profile. */
  @Nullable Path configPath() {
    return configFile != null && !configFile.isBlank() ? Path.of(configFile) : null;
  }

  /** The preset's name when the preset (not a config file) is the configuration. */
  @Nullable String presetName() {
    return configPath() == null && preset != null && !preset.isBlank() ? preset : null;
  }

  /**
   * The properties set that only build a router ({@link #routerBuilder}): a router the
   * application built itself takes none of them at startup.
   */
  List<String> routerPropertiesSet() {
    List<String> set = new ArrayList<>();
    if (!endpoints.isEmpty()) {
      set.add(property("endpoints"));
    }
    if (configPath() != null) {
      set.add(property("config-file"));
    }
    if (preset != null && !preset.isBlank()) {
      set.add(property("preset"));
    }
    if (inFlightMaxAge != null) {
      set.add(property("in-flight-max-age"));
    }
    if (!sessionHeaders.equals(OpenAiRequestParser.DEFAULT_SESSION_HEADERS)) {
      set.add(sessionHeadersProperty);
    }
    return set;
  }

  /**
   * Fails when both a config file and a preset are set: each names the whole routing
   * configuration, and which one was meant cannot be told (routing-envoy refuses
   * {@code --config} with {@code --preset} alike).
   */
  void checkConfigChoice() {
    if (configPath() != null && preset != null && !preset.isBlank()) {
      throw new Epp4jConfigurationException(property("config-file") + " and " + property("preset")
          + " are both set; each is a whole routing configuration: set one of them");
    }
  }

  /**
   * The YAML of the preset in use, {@code null} without one; fails on an unknown name, and when
   * a config file is set too ({@link #checkConfigChoice}).
   */
  @Nullable String presetYaml() {
    checkConfigChoice();
    String name = presetName();
    if (name == null) {
      return null;
    }
    if (Epp4jPreset.NAME.equals(name)) {
      return Epp4jPreset.yaml();
    }
    throw new Epp4jConfigurationException(property("preset") + ": unknown preset '" + name
        + "'; known: " + Epp4jPreset.NAME + " (or set " + property("config-file") + ")");
  }

  /**
   * A router builder with this pool's endpoints, request parser (body size, session headers),
   * configuration and in-flight age; listeners and telemetry are the caller's.
   */
  Router.Builder routerBuilder() {
    Router.Builder b = Router.builder()
        .endpoints(parsedEndpoints())
        .requestParser(OpenAiRequestParser.of(maxBodyBytes(), sessionHeaders));
    Path file = configPath();
    String yaml = presetYaml();
    String name = presetName();
    if (file != null) {
      b.configFile(file);
    } else if (yaml != null && name != null) {
      b.configYaml(yaml, name);
    }
    if (inFlightMaxAge != null) {
      b.inFlightMaxAge(inFlightMaxAge);
    }
    return b;
  }

  /**
   * Builds the router of {@link #routerBuilder()} (with the caller's listeners and telemetry); a
   * configuration that cannot be read or is invalid fails naming the property that gave it, e.g.
   * {@code epp4j.config-file: <the router's message>}, which names the file.
   */
  Router build(Router.Builder b) {
    try {
      return b.build();
    } catch (RuntimeException e) {
      String where = configPath() != null ? property("config-file")
          : presetName() != null ? property("preset") : prefix;
      throw new Epp4jConfigurationException(where + ": " + e.getMessage(), e);
    }
  }

  /**
   * The filter renews a served request's decision every quarter of the in-flight age, but not
   * more often than {@link DecisionTap#MIN_RENEWAL}: below four times that, the router would
   * release the decisions of requests still being served from the load counters.
   */
  private void checkRenewable(Duration age) {
    Duration least = DecisionTap.MIN_RENEWAL.multipliedBy(4);
    if (age.compareTo(least) < 0) {
      throw new Epp4jConfigurationException(source("in-flight-max-age") + " must be at least "
          + least.toMillis() + "ms, got " + age + ": the Epp4j filter renews a served request's"
          + " decision every quarter of it, but no more often than every "
          + DecisionTap.MIN_RENEWAL.toMillis() + "ms, so a shorter age would release requests still being served");
    }
  }

  private void positive(Duration d, String key) {
    if (d.isNegative() || d.isZero()) {
      throw new Epp4jConfigurationException(source(key) + " must be positive, got " + d);
    }
  }

  /** The pool's own {@code value}, else the top-level one, noting {@code key} as inherited. */
  private static <T> T or(@Nullable T value, T top, String key, java.util.Set<String> inherited) {
    if (value != null) {
      return value;
    }
    inherited.add(key);
    return top;
  }

  /** As {@link #or}, for a value the top level may leave unset too. */
  private static <T> @Nullable T orUnset(@Nullable T value, @Nullable T top, String key,
      java.util.Set<String> inherited) {
    if (value != null) {
      return value;
    }
    inherited.add(key);
    return top;
  }
}
