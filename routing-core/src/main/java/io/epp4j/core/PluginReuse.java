package io.epp4j.core;

import io.epp4j.api.Filter;
import io.epp4j.api.Parameters;
import io.epp4j.api.Picker;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.PluginProvider;
import io.epp4j.api.ProfileHandler;
import io.epp4j.api.Result;
import io.epp4j.api.Ticker;
import java.lang.reflect.InvocationHandler;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Modifier;
import java.lang.reflect.Proxy;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.function.Function;
import org.jspecify.annotations.Nullable;

/**
 * Loads an {@code EndpointPickerConfig} so that every plugin declared exactly as before (same
 * name, type and parameters) is the instance already running, not a new one: a reload then
 * keeps what such plugins learned (a prefix-cache-scorer's index, a subscriber's connections).
 *
 * <p>The loader closes every plugin it created when the file has an error. A kept instance must
 * survive that, so during the load it is handed out behind a view whose {@code close} does
 * nothing; after a successful load the views are swapped back for the instances themselves, so
 * routing never goes through a view.
 */
final class PluginReuse {
  /**
   * How a configuration file declared a plugin, and the instance it got. {@code composite}: its
   * provider looked through the plugins created before it ({@code earlierPlugins}); {@code
   * lookups}: the plugins it asked for by name, each with what it got (null: none).
   */
  record Declared(String type, Map<String, Object> parameters, Plugin instance,
      Set<String> unreadParameters, boolean composite, Map<String, @Nullable Plugin> lookups) {
    Declared(String type, Map<String, Object> parameters, Plugin instance,
        Set<String> unreadParameters) {
      this(type, parameters, instance, unreadParameters, false, Map.of());
    }
  }

  /** A loaded configuration with the declarations of its named plugins. */
  record Loaded(RouterConfig config, Map<String, Declared> declared) {}

  private PluginReuse() {}

  /**
   * Loads YAML text, reusing the instances {@code previous} declared identically. Errors are in
   * the result; on error no instance from {@code previous} has been closed.
   */
  static Result<Loaded> load(PluginRegistry registry, Ticker ticker,
      java.time.Duration inFlightMaxAge, Function<Class<?>, Optional<?>> services, String yaml,
      String source, Map<String, Declared> previous) {
    Map<String, Map<String, Object>> parametersByName = declaredParameters(yaml);
    Map<String, Declared> declared = new LinkedHashMap<>();
    Map<Object, Plugin> views = new IdentityHashMap<>();
    List<PluginProvider> wrapped = new ArrayList<>();
    boolean[] createdAnew = new boolean[1];
    for (String type : registry.types()) {
      PluginProvider delegate = registry.provider(type);
      if (delegate != null) {
        wrapped.add(new Reusing(delegate, parametersByName, previous, declared, views,
            createdAnew));
      }
    }
    // a plugin built from others (a decision tree, a P/D handler and its decider) gets the
    // instances themselves, not the views, as the loaded configuration will hold them
    ConfigLoader loader = new ConfigLoader(
        registry.with(wrapped.toArray(new PluginProvider[0])), ticker, inFlightMaxAge, services,
        p -> views.getOrDefault(p, p));
    Result<RouterConfig> r = loader.load(yaml, source);
    if (!r.isOk()) {
      return Result.errors(r.errors());
    }
    return Result.ok(new Loaded(unwrap(r.value(), views), declared));
  }

  /**
   * Each plugin's parameters as the loader will see them, by plugin name: read by the loader's
   * own reader, which resolves anchors, aliases and merge keys. Read as plain YAML, parameters
   * given by an alias ({@code parameters: *shared}, {@code label: *name}, {@code <<: *base})
   * were the alias's name, the same in every file, so a reload that changed the anchored values
   * kept such a plugin running with the old ones. Anything malformed is skipped here: the loader
   * reports it, and a plugin missing here is simply created anew.
   */
  private static Map<String, Map<String, Object>> declaredParameters(String yaml) {
    Map<String, Map<String, Object>> out = new HashMap<>();
    Result<Map<?, ?>> document = ConfigLoader.readDocument(yaml, "");
    if (!document.isOk() || !(document.value().get("plugins") instanceof List<?> list)) {
      return out;
    }
    for (Object o : list) {
      if (o instanceof Map<?, ?> spec && spec.get("type") instanceof String type) {
        Object n = spec.get("name");
        Map<String, Object> params = new LinkedHashMap<>();
        if (spec.get("parameters") instanceof Map<?, ?> pm) {
          pm.forEach((k, v) -> params.put(String.valueOf(k), v));
        }
        // named as the loader names it: after its type when the name is missing or empty
        out.put(n == null || "".equals(n) ? type : String.valueOf(n), params);
      }
    }
    return out;
  }

  /** A provider that returns the running instance for an unchanged declaration. */
  private static final class Reusing implements PluginProvider {
    private final PluginProvider delegate;
    private final Map<String, Map<String, Object>> parametersByName;
    private final Map<String, Declared> previous;
    private final Map<String, Declared> declared;
    private final Map<Object, Plugin> views;

    /** Shared by the wrappers of one load: whether a plugin has been created anew so far. */
    private final boolean[] createdAnew;

    Reusing(PluginProvider delegate, Map<String, Map<String, Object>> parametersByName,
        Map<String, Declared> previous, Map<String, Declared> declared, Map<Object, Plugin> views,
        boolean[] createdAnew) {
      this.delegate = delegate;
      this.parametersByName = parametersByName;
      this.previous = previous;
      this.declared = declared;
      this.views = views;
      this.createdAnew = createdAnew;
    }

    @Override
    public String type() {
      return delegate.type();
    }

    @Override
    public java.util.Set<String> aliases() {
      return delegate.aliases();
    }

    @Override
    public int priority() {
      return delegate.priority();
    }

    /** Whether every plugin {@code before} asked for by name is, in this load, what it got. */
    private static boolean sameLookups(Declared before, PluginContext context) {
      for (Map.Entry<String, @Nullable Plugin> e : before.lookups().entrySet()) {
        if (context.plugin(e.getKey()).orElse(null) != e.getValue()) {
          return false;
        }
      }
      return true;
    }

    @Override
    public Result<? extends Plugin> create(PluginContext context, Parameters parameters) {
      String name = context.pluginName();
      Map<String, Object> params = parametersByName.get(name);
      Declared before = previous.get(name);
      // a plugin that refers to other plugins is kept only while they are: one that asked for
      // plugins by name while every name still gives what it gave (a producer named but absent
      // stays absent), one that looked through the plugins before it while all of them are kept;
      // otherwise it would go on using an instance the new file replaced
      if (params != null && before != null && before.type().equals(type())
          && before.parameters().equals(params) && !(before.composite() && createdAnew[0])
          && sameLookups(before, context)) {
        Plugin view = closeShielded(before.instance());
        if (view != null) {
          // read what the first load read, so the loader warns about the same unread names
          for (String p : parameters.names()) {
            if (!before.unreadParameters().contains(p)) {
              parameters.raw(p);
            }
          }
          views.put(view, before.instance());
          declared.put(name, before);
          return Result.ok(view);
        }
      }
      createdAnew[0] = true;
      boolean[] lookedUp = new boolean[1];
      Map<String, @Nullable Plugin> lookups = new HashMap<>();
      PluginContext recording = new PluginContext() {
        @Override
        public String pluginName() {
          return context.pluginName();
        }

        @Override
        public io.epp4j.api.Ticker ticker() {
          return context.ticker();
        }

        @Override
        public java.time.Duration inFlightMaxAge() {
          return context.inFlightMaxAge();
        }

        @Override
        public <T> Optional<T> service(Class<T> type) {
          return context.service(type);
        }

        @Override
        public Optional<Plugin> plugin(String other) {
          Optional<Plugin> found = context.plugin(other);
          lookups.put(other, found.orElse(null));
          return found;
        }

        @Override
        public List<Plugin> earlierPlugins() {
          lookedUp[0] = true;
          return context.earlierPlugins();
        }
      };
      Result<? extends Plugin> r = delegate.create(recording, parameters);
      if (r != null && r.isOk() && params != null) {
        declared.put(name, new Declared(type(), params, r.value(),
            Set.copyOf(parameters.unreadNames()), lookedUp[0],
            java.util.Collections.unmodifiableMap(lookups)));
      }
      return r;
    }
  }

  /**
   * A view of {@code plugin} with every public interface it implements and a {@code close} that
   * does nothing; null when no such view can be made (then the plugin is created anew).
   */
  static @Nullable Plugin closeShielded(Plugin plugin) {
    Set<Class<?>> interfaces = new LinkedHashSet<>();
    for (Class<?> c = plugin.getClass(); c != null; c = c.getSuperclass()) {
      collectPublicInterfaces(c, interfaces);
    }
    InvocationHandler h = (proxy, method, args) -> {
      if (method.getName().equals("close") && method.getParameterCount() == 0) {
        return null;
      }
      try {
        return method.invoke(plugin, args);
      } catch (InvocationTargetException e) {
        throw e.getCause();
      }
    };
    try {
      return (Plugin) Proxy.newProxyInstance(plugin.getClass().getClassLoader(),
          interfaces.toArray(new Class<?>[0]), h);
    } catch (IllegalArgumentException | SecurityException e) {
      return null;
    }
  }

  private static void collectPublicInterfaces(Class<?> c, Set<Class<?>> out) {
    for (Class<?> i : c.getInterfaces()) {
      if (Modifier.isPublic(i.getModifiers())) {
        out.add(i);
      }
      collectPublicInterfaces(i, out);
    }
  }

  /** The configuration with every close-shielded view replaced by its instance. */
  private static RouterConfig unwrap(RouterConfig c, Map<Object, Plugin> views) {
    if (views.isEmpty()) {
      return c;
    }
    List<SchedulingProfile> profiles = new ArrayList<>();
    for (SchedulingProfile p : c.profiles().values()) {
      SchedulingProfile.Builder b = SchedulingProfile.builder(p.name());
      for (Filter f : p.filters()) {
        b.filter(real(f, views, Filter.class));
      }
      for (SchedulingProfile.WeightedScorer ws : p.scorers()) {
        b.scorer(ws.name(), real(ws.scorer(), views, io.epp4j.api.Scorer.class), ws.weight());
      }
      b.picker(real(p.picker(), views, Picker.class));
      profiles.add(b.build());
    }
    Map<String, Plugin> plugins = new LinkedHashMap<>();
    c.plugins().forEach((n, p) -> plugins.put(n, real(p, views, Plugin.class)));
    List<io.epp4j.api.Admitter> admitters = new ArrayList<>();
    for (io.epp4j.api.Admitter a : c.admitters()) {
      admitters.add(real(a, views, io.epp4j.api.Admitter.class));
    }
    io.epp4j.api.SaturationDetector detector = c.saturationDetector()
        .map(d -> real(d, views, io.epp4j.api.SaturationDetector.class)).orElse(null);
    return new RouterConfig(profiles, real(c.profileHandler(), views, ProfileHandler.class),
        plugins, c.warnings(), admitters, c.saturation().orElse(null), detector);
  }

  private static <T> T real(T plugin, Map<Object, Plugin> views, Class<T> role) {
    Plugin p = views.get(plugin);
    return p == null ? plugin : role.cast(p);
  }
}
