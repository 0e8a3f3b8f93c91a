package io.epp4j.core;

import io.epp4j.api.Endpoint;
import io.epp4j.api.Result;
import io.epp4j.api.Ticker;
import io.opentelemetry.api.GlobalOpenTelemetry;
import io.opentelemetry.api.OpenTelemetry;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.function.Function;
import org.jspecify.annotations.Nullable;

/**
 * What a {@link Router.Builder} collected, with the defaults, and the loading of the first
 * configuration. The builder's methods validate and document each setting; this holds them.
 */
final class RouterSettings {
  /**
   * Ten minutes: the OpenAI clients give up on a request after 600 s by default, and a chat or
   * completion request streams for seconds to a few minutes, so a request still unfinished after
   * ten minutes was almost surely dropped by the gateway rather than still running.
   */
  static final Duration DEFAULT_IN_FLIGHT_MAX_AGE = Duration.ofMinutes(10);

  /**
   * Five seconds: a route that read the configuration a reload replaced finishes within
   * microseconds to milliseconds; the margin covers a long GC pause or a slow plugin.
   */
  static final Duration DEFAULT_RETIRED_PLUGIN_CLOSE_DELAY = Duration.ofSeconds(5);

  final List<Endpoint> endpoints = new ArrayList<>();
  @Nullable RouterConfig config;
  @Nullable Path configFile;
  @Nullable String configYaml;
  String configSource = "config";
  @Nullable PluginRegistry registry;
  Ticker ticker = Ticker.system();
  @Nullable OpenTelemetry openTelemetry;
  @Nullable Long seed;
  OpenAiRequestParser parser = OpenAiRequestParser.defaults();
  int saturationQueueThreshold = 5;
  double saturationKvThreshold = 0.8;
  Duration metricsStaleness = Duration.ofMillis(200);
  Duration inFlightMaxAge = DEFAULT_IN_FLIGHT_MAX_AGE;
  Duration retiredPluginCloseDelay = DEFAULT_RETIRED_PLUGIN_CLOSE_DELAY;
  final Map<Class<?>, Object> services = new LinkedHashMap<>();
  final List<Object> extraListeners = new ArrayList<>();
  /** Offered to plugins as a service before the router exists; the router binds it. */
  final HintApplier hints = new HintApplier();

  /** Fills the defaults that need discovery: the registry and OpenTelemetry. */
  void resolveDefaults() {
    if (registry == null) {
      registry = PluginRegistry.fromServiceLoader();
    }
    if (openTelemetry == null) {
      openTelemetry = GlobalOpenTelemetry.getOrNoop();
    }
    // plugins with metrics of their own (e.g. the KV-event index) export through the same API
    services.putIfAbsent(OpenTelemetry.class, openTelemetry);
    // plugins that share routing state between routers deliver what the others did here
    services.put(io.epp4j.api.RouterHints.class, hints);
  }

  PluginRegistry registry() {
    return java.util.Objects.requireNonNull(registry, "registry");
  }

  OpenTelemetry openTelemetry() {
    return java.util.Objects.requireNonNull(openTelemetry, "openTelemetry");
  }

  Function<Class<?>, Optional<?>> services() {
    Map<Class<?>, Object> copy = Map.copyOf(services);
    return type -> Optional.ofNullable(copy.get(type));
  }

  /**
   * The first configuration: the one given in code, a file, YAML text, or else the default
   * profile a plugin module ships.
   *
   * @throws ConfigException with every problem found
   */
  PluginReuse.Loaded loadConfig() {
    if (config != null) {
      return new PluginReuse.Loaded(config, Map.of());
    }
    Result<PluginReuse.Loaded> r;
    if (configFile != null) {
      Result<String> text = ConfigLoader.readFile(configFile);
      r = text.isOk() ? load(text.value(), configFile.toString()) : Result.errors(text.errors());
    } else if (configYaml != null) {
      r = load(configYaml, configSource);
    } else {
      r = loadDefault();
    }
    if (!r.isOk()) {
      throw new ConfigException(r.errors());
    }
    return r.value();
  }

  private Result<PluginReuse.Loaded> load(String yaml, String source) {
    return PluginReuse.load(registry(), ticker, inFlightMaxAge, services(), yaml, source,
        Map.of());
  }

  /** The default profile a plugin module ships as {@link Router#DEFAULT_CONFIG_RESOURCE}. */
  private Result<PluginReuse.Loaded> loadDefault() {
    String yaml = DefaultConfig.find();
    String missing = "no configuration was given and the EPP default profile cannot be built;"
        + " add io.epp4j:routing-scorers to the classpath or pass a configuration";
    if (yaml == null) {
      // the one place core names those types: to tell a user what the missing module brings
      return Result.error(missing + " (no module on the classpath offers "
          + Router.DEFAULT_CONFIG_RESOURCE + "; routing-scorers ships the EPP default profile of"
          + " prefix-cache-scorer, queue-scorer, kv-cache-utilization-scorer, max-score-picker)");
    }
    Result<PluginReuse.Loaded> r = load(yaml, "default profile");
    if (r.isOk()) {
      return r;
    }
    List<String> errs = new ArrayList<>();
    errs.add(missing);
    errs.addAll(r.errors());
    return Result.errors(errs);
  }

  /** The longest duration {@link Duration#toNanos()} can count (about 292 years). */
  private static final Duration MAX_NANOS = Duration.ofNanos(Long.MAX_VALUE);

  /**
   * {@code d} in nanoseconds, {@link Long#MAX_VALUE} for a longer one: such a setting (for
   * example {@code ChronoUnit.FOREVER.getDuration()}) means "never", where {@code toNanos} would
   * throw {@link ArithmeticException} long after the builder accepted it.
   */
  static long nanos(Duration d) {
    return d.compareTo(MAX_NANOS) >= 0 ? Long.MAX_VALUE : d.toNanos();
  }

  // the builder's checks, each naming the setting it guards

  static int atLeastOne(int n, String name) {
    if (n < 1) {
      throw new IllegalArgumentException(name + " must be >= 1, got " + n);
    }
    return n;
  }

  static double fraction(double v, String name) {
    if (!(v > 0 && v <= 1)) {
      throw new IllegalArgumentException(name + " must be in (0,1], got " + v);
    }
    return v;
  }

  static Duration positive(Duration d, String name) {
    java.util.Objects.requireNonNull(d, name);
    if (d.isNegative() || d.isZero()) {
      throw new IllegalArgumentException(name + " must be positive, got " + d);
    }
    return d;
  }

  static Duration notNegative(Duration d, String name) {
    java.util.Objects.requireNonNull(d, name);
    if (d.isNegative()) {
      throw new IllegalArgumentException(name + " must be >= 0, got " + d);
    }
    return d;
  }
}
