package io.epp4j.spring.gateway;

import io.epp4j.api.Endpoint;
import io.epp4j.api.Result;
import io.epp4j.core.Router;
import io.epp4j.core.RouterConfig;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.TreeSet;
import java.util.function.BooleanSupplier;
import java.util.logging.Level;
import java.util.logging.Logger;
import org.jspecify.annotations.Nullable;
import org.springframework.boot.context.properties.bind.BindHandler;
import org.springframework.boot.context.properties.bind.Bindable;
import org.springframework.boot.context.properties.bind.Binder;
import org.springframework.boot.context.properties.bind.UnboundConfigurationPropertiesException;
import org.springframework.boot.context.properties.bind.handler.IgnoreTopLevelConverterNotFoundBindHandler;
import org.springframework.boot.context.properties.bind.handler.NoUnboundElementsBindHandler;
import org.springframework.boot.context.properties.source.ConfigurationProperty;
import org.springframework.boot.context.properties.source.UnboundElementsSourceFilter;
import org.springframework.cloud.context.environment.EnvironmentChangeEvent;
import org.springframework.context.ApplicationListener;
import org.springframework.core.env.Environment;

/**
 * Applies changed {@code epp4j.*} properties to the running routers when Spring Cloud reports an
 * environment change (a {@code /actuator/refresh}, a config server push): the endpoint list is
 * replaced (unless an {@link Epp4jDiscoveryPool} takes the pool from a registry) and the config
 * file or preset is loaded again (a change that clears both loads the EPP default profile, as a
 * router built without either runs). Requests in flight keep their
 * decisions and are counted against the new pool where their endpoint stays. An invalid change (an endpoint that is not
 * {@code host:port}, an unknown preset, a configuration with errors) is logged and nothing of it
 * is applied: the router keeps its pool and configuration, and the refresh itself goes on (an
 * exception here would keep Spring's later listeners, such as the rebinding of
 * {@code @ConfigurationProperties} beans, from running).
 *
 * <p>The properties are checked as at startup: an {@code epp4j.*} property that is no property
 * of {@link Epp4jProperties} (a misspelled {@code epp4j.pools.llama.endpoint}, which would
 * otherwise leave the pool without endpoints and remove it) refuses the whole refresh, for the
 * default router and every pool alike, with a warning naming each such property; every router
 * keeps what it runs until a later refresh no longer has them.
 *
 * <p>A change under {@code epp4j.pools.<name>.} is applied the same way to that named pool only,
 * all or nothing for that pool; a change of the top-level properties to the default router only.
 * A pool whose properties appear is built and added (routes naming it use it from their next
 * request; one that cannot be built is logged and not added); a pool whose properties are all
 * gone is removed and closed, and routes still naming it answer 503.
 *
 * <p>Only the endpoints, the config file and the preset are applied to a running router; a
 * change of any other {@code epp4j.*} property (scheme, body limit, session headers, metrics,
 * discovery, in-flight age) is logged as a warning naming the properties, since it takes effect
 * only when the router is built again (a restart, or a pool added by the change).
 */
public class Epp4jRefresher implements ApplicationListener<EnvironmentChangeEvent> {
  private static final Logger LOG = Logger.getLogger(Epp4jRefresher.class.getName());
  /** The properties besides endpoints, config file and preset, as {@link #relaxedName} has them. */
  private static final Set<String> RESTART_ONLY = Set.of("scheme", "maxbodysize",
      "sessionheaders", "inflightmaxage", "metricsenabled", "metricsinterval", "metricspath",
      "discoveryserviceid", "discoveryrefreshinterval");

  private final Router router;
  private final Environment environment;
  private final BooleanSupplier discoveryOwnsPool;
  private final Epp4jPools pools;
  /**
   * The keys of refreshes refused as a whole (unknown or unconvertible properties), taken again
   * with the next refresh: the one that corrects a misspelled key names only that key, and the
   * other changes refused with it would otherwise stay unapplied until they changed once more.
   */
  private final Set<String> refusedKeys = new LinkedHashSet<>();

  public Epp4jRefresher(Router router, Environment environment) {
    this(router, environment, () -> false);
  }

  /**
   * @param discoveryOwnsPool whether service discovery supplies the pool, which
   *     {@code epp4j.endpoints} then must not replace
   */
  public Epp4jRefresher(Router router, Environment environment,
      BooleanSupplier discoveryOwnsPool) {
    this(router, environment, discoveryOwnsPool, Epp4jPools.none());
  }

  /**
   * @param discoveryOwnsPool whether service discovery supplies the default pool
   * @param pools the named pools, refreshed from {@code epp4j.pools.<name>.*}
   */
  public Epp4jRefresher(Router router, Environment environment,
      BooleanSupplier discoveryOwnsPool, Epp4jPools pools) {
    this.router = router;
    this.environment = environment;
    this.discoveryOwnsPool = discoveryOwnsPool;
    this.pools = pools;
  }

  @Override
  public synchronized void onApplicationEvent(EnvironmentChangeEvent event) {
    Set<String> keys = new LinkedHashSet<>(refusedKeys);
    keys.addAll(event.getKeys());
    boolean defaultChanged = false;
    boolean defaultConfigChanged = false;
    boolean defaultEndpointsChanged = false;
    Set<String> poolsChanged = new LinkedHashSet<>();
    Set<String> poolConfigChanged = new HashSet<>();
    Set<String> poolEndpointsChanged = new HashSet<>();
    Set<String> restartOnly = new TreeSet<>(); // top-level keys the running routers cannot take
    Map<String, Set<String>> poolRestartOnly = new HashMap<>();
    for (String key : keys) {
      String k = canonical(key);
      if (k.startsWith(PoolSettings.POOLS_PREFIX)) {
        String rest = k.substring(PoolSettings.POOLS_PREFIX.length());
        int end = 0;
        while (end < rest.length() && rest.charAt(end) != '.' && rest.charAt(end) != '[') {
          end++;
        }
        if (end > 0) {
          String pool = rest.substring(0, end);
          poolsChanged.add(pool);
          if (namesConfiguration(rest.substring(end))) {
            poolConfigChanged.add(pool);
          }
          if (namesEndpoints(rest.substring(end))) {
            poolEndpointsChanged.add(pool);
          }
          if (restartOnly(rest.substring(end))) {
            poolRestartOnly.computeIfAbsent(pool, x -> new TreeSet<>()).add(key);
          }
        }
      } else if (k.startsWith(PoolSettings.PREFIX + ".")) {
        defaultChanged = true;
        defaultConfigChanged |= namesConfiguration(k.substring(PoolSettings.PREFIX.length()));
        defaultEndpointsChanged |= namesEndpoints(k.substring(PoolSettings.PREFIX.length()));
        if (restartOnly(k.substring(PoolSettings.PREFIX.length()))) {
          restartOnly.add(key);
        }
      }
    }
    if (!defaultChanged && poolsChanged.isEmpty()) {
      return;
    }
    Epp4jProperties p;
    try {
      p = Binder.get(environment)
          .bind(PoolSettings.PREFIX, Bindable.of(Epp4jProperties.class), startupChecks())
          .orElseGet(Epp4jProperties::new);
      refusedKeys.clear();
    } catch (RuntimeException e) { // a value that does not convert, e.g. a bad data size
      refusedKeys.addAll(keys);
      @Nullable String unknown = unknownProperties(e);
      if (unknown != null) {
        LOG.warning("epp4j: refresh refused, unknown epp4j properties (misspelled?): " + unknown
            + "; the default router and every pool keep their current endpoints and"
            + " configurations until these are corrected");
        return;
      }
      LOG.warning("epp4j: the changed epp4j properties are invalid, keeping the current pools and"
          + " configurations: " + e.getMessage());
      return;
    }
    if (!restartOnly.isEmpty()) {
      LOG.warning("epp4j: changed properties that take effect only after a restart: "
          + String.join(", ", restartOnly) + " (the default router and the pools built before"
          + " this change keep the values they started with; pools added now take them)");
    }
    if (defaultChanged) {
      apply(router, PoolSettings.of(p), discoveryOwnsPool.getAsBoolean(), defaultConfigChanged,
          defaultEndpointsChanged, "the current pool");
    }
    for (String name : poolsChanged) {
      refreshPool(p, name, poolRestartOnly.getOrDefault(name, Set.of()),
          poolConfigChanged.contains(name), poolEndpointsChanged.contains(name));
    }
  }

  private void refreshPool(Epp4jProperties p, String name, Set<String> restartOnly,
      boolean configChanged, boolean endpointsChanged) {
    Epp4jPools.@Nullable Pool running = findPool(name);
    @Nullable String boundName = findBound(p, name);
    if (running == null && boundName != null) {
      try {
        pools.add(PoolSettings.of(p, boundName,
            Objects.requireNonNull(p.getPools().get(boundName))));
      } catch (RuntimeException e) {
        LOG.warning("epp4j: pool '" + boundName + "' was added to the properties but cannot be"
            + " built, so routes naming it cannot use it: " + e.getMessage());
        return;
      }
      LOG.info("epp4j: pool '" + boundName + "' added; routes naming it use it from now on");
      return;
    }
    if (running == null) {
      return; // neither configured nor running: nothing to say
    }
    String runningName = Objects.requireNonNull(running.settings.name);
    if (boundName == null) {
      pools.remove(runningName);
      LOG.info("epp4j: pool '" + runningName + "' was removed from the properties and closed;"
          + " routes still naming it answer 503");
      return;
    }
    Epp4jProperties.Pool bound = Objects.requireNonNull(p.getPools().get(boundName));
    PoolSettings s;
    try {
      s = PoolSettings.of(p, Objects.requireNonNull(running.settings.name), bound);
    } catch (RuntimeException e) {
      LOG.warning("epp4j: the changed properties of pool '" + name + "' are invalid, keeping its"
          + " current pool and configuration: " + e.getMessage());
      return;
    }
    if (!restartOnly.isEmpty()) {
      LOG.warning("epp4j: changed properties of pool '" + runningName + "' that take effect only"
          + " after a restart: " + String.join(", ", restartOnly) + " (the pool keeps the values"
          + " it started with)");
    }
    apply(running.router, s, running.discoveryOwnsPool(), configChanged, endpointsChanged,
        "pool '" + name + "'s current pool");
  }


  /**
   * Whether a changed property, given by what follows {@code epp4j} or {@code epp4j.pools.<name>}
   * ({@code .scheme}, {@code .session-headers[0]}, {@code .IN.FLIGHT.MAX.AGE} from an environment
   * variable), is one a running router keeps until a restart: any but the endpoints, the config
   * file and the preset, which a refresh applies (the others are read when a router and its
   * filter are built). A name that is no property at all (a misspelled key being removed) is
   * not: a restart would apply nothing of it.
   */
  static boolean restartOnly(String rest) {
    return RESTART_ONLY.contains(relaxedName(rest));
  }

  /** The binding startup does ({@code ignoreUnknownFields = false}): unknown keys fail it. */
  static BindHandler startupChecks() {
    return new NoUnboundElementsBindHandler(new IgnoreTopLevelConverterNotFoundBindHandler(),
        new UnboundElementsSourceFilter());
  }

  /** The unknown properties a failed binding names, with where each was set; null if none. */
  private static @Nullable String unknownProperties(Throwable e) {
    for (Throwable t = e; t != null; t = t.getCause()) {
      if (t instanceof UnboundConfigurationPropertiesException u) {
        Set<String> names = new TreeSet<>();
        for (ConfigurationProperty property : u.getUnboundProperties()) {
          names.add(property.getName()
              + (property.getOrigin() == null ? "" : " (" + property.getOrigin() + ")"));
        }
        return String.join(", ", names);
      }
    }
    return null;
  }

  /** Whether a changed property (as for {@link #restartOnly}) is the config file or the preset. */
  static boolean namesConfiguration(String rest) {
    String n = relaxedName(rest);
    return n.equals("configfile") || n.equals("preset");
  }

  /**
   * Whether a changed property (as for {@link #restartOnly}) is the endpoint list: only then is
   * the pool replaced, so that a refresh of other properties leaves a pool the properties do not
   * give (an application's own router, endpoints set in code) as it is.
   */
  static boolean namesEndpoints(String rest) {
    return relaxedName(rest).equals("endpoints");
  }

  /** {@code .config-file}, {@code .CONFIG_FILE}, {@code .endpoints[0]}: configfile, endpoints. */
  private static String relaxedName(String rest) {
    StringBuilder name = new StringBuilder();
    for (String part : rest.split("\\.")) {
      int index = part.indexOf('[');
      String p = index < 0 ? part : part.substring(0, index);
      if (p.isEmpty() || p.chars().allMatch(Character::isDigit)) {
        continue; // a list index: endpoints[0], ENDPOINTS_0_
      }
      name.append(p.replace("-", "").replace("_", "").toLowerCase(Locale.ROOT));
    }
    return name.toString();
  }

  private Epp4jPools.@Nullable Pool findPool(String name) {
    Epp4jPools.Pool exact = pools.find(name);
    if (exact != null) {
      return exact;
    }
    for (String known : pools.names()) { // relaxed binding: LLAMA from an environment variable
      if (known.equalsIgnoreCase(name)) {
        return pools.find(known);
      }
    }
    return null;
  }

  /** The name under which the properties hold pool {@code name} (relaxed binding), or null. */
  private static @Nullable String findBound(Epp4jProperties p, String name) {
    if (p.getPools().containsKey(name)) {
      return name;
    }
    for (String known : p.getPools().keySet()) {
      if (known.equalsIgnoreCase(name)) {
        return known;
      }
    }
    return null;
  }

  /**
   * Applies one pool's endpoints (when {@code endpointsChanged}: the refresh changed the list)
   * and configuration, all or nothing. With neither a config file
   * nor a preset, the EPP default profile is loaded when {@code configChanged} (the change
   * cleared them); otherwise the configuration running is left alone (it may be one an
   * application built its router with in code).
   */
  private static void apply(Router router, PoolSettings s, boolean discoveryOwnsPool,
      boolean configChanged, boolean endpointsChanged, String keeping) {
    @Nullable List<Endpoint> pool; // null: discovery owns the pool, or the list did not change
    @Nullable Path file;
    @Nullable String presetYaml;
    try {
      pool = discoveryOwnsPool || !endpointsChanged ? null : s.parsedEndpoints();
      file = s.configPath();
      presetYaml = s.presetYaml(); // fails on an unknown name
    } catch (RuntimeException e) { // IllegalArgumentException naming the property
      LOG.warning("epp4j: the changed " + s.prefix + " properties are invalid, keeping "
          + keeping + " and configuration: " + e.getMessage());
      return;
    }
    @Nullable Result<RouterConfig> result = null;
    String preset = s.presetName();
    if (file != null) {
      result = router.reconfigure(file);
    } else if (preset != null && presetYaml != null) {
      result = router.reconfigure(presetYaml, preset);
    } else if (configChanged) {
      String defaults = defaultProfile();
      result = defaults != null ? router.reconfigure(defaults, Router.DEFAULT_CONFIG_RESOURCE)
          : Result.error("no module on the classpath offers the EPP default profile ("
              + Router.DEFAULT_CONFIG_RESOURCE + "), which runs when " + s.property("config-file")
              + " and " + s.property("preset") + " are unset");
    }
    if (result != null && !result.isOk()) {
      LOG.log(Level.WARNING, "epp4j: the new " + s.prefix + " routing configuration is invalid,"
          + " keeping " + keeping + " and configuration: " + String.join("; ", result.errors()));
      return;
    }
    if (pool != null) {
      router.setEndpoints(pool);
    }
  }

  /** The EPP default profile a plugin module ships, as the router finds it; null without one. */
  private static @Nullable String defaultProfile() {
    ClassLoader context = Thread.currentThread().getContextClassLoader();
    String yaml = context == null ? null : read(context);
    return yaml != null ? yaml : read(Router.class.getClassLoader());
  }

  private static @Nullable String read(ClassLoader loader) {
    try (InputStream in = loader.getResourceAsStream(Router.DEFAULT_CONFIG_RESOURCE)) {
      return in == null ? null : new String(in.readAllBytes(), StandardCharsets.UTF_8);
    } catch (IOException e) {
      return null;
    }
  }

  /**
   * The key in the dotted form: {@code EPP4J_POOLS_LLAMA_ENDPOINTS} (an environment variable)
   * becomes {@code epp4j.pools.llama.endpoints}. A pool name with {@code _} or {@code -} cannot be
   * told from the rest of such a key: set those pools' properties in dotted form to refresh them.
   */
  private static String canonical(String key) {
    if (key.indexOf('.') < 0 && key.toUpperCase(Locale.ROOT).startsWith("EPP4J_")) {
      return key.toLowerCase(Locale.ROOT).replace('_', '.');
    }
    // Spring's bracket notation for a map key, which a pool name with '_' or upper-case letters
    // needs: epp4j.pools[my_pool].endpoints is pool my_pool's endpoints
    String bracket = PoolSettings.PREFIX + ".pools[";
    int close = key.indexOf(']');
    if (key.startsWith(bracket) && close > bracket.length()) {
      String name = key.substring(bracket.length(), close);
      if (name.length() > 1 && (name.charAt(0) == '"' || name.charAt(0) == '\'')
          && name.charAt(name.length() - 1) == name.charAt(0)) {
        name = name.substring(1, name.length() - 1);
      }
      return PoolSettings.POOLS_PREFIX + name + key.substring(close + 1);
    }
    return key;
  }
}
