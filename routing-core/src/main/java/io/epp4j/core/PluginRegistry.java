package io.epp4j.core;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.PluginProvider;
import io.epp4j.api.Result;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.ServiceConfigurationError;
import java.util.ServiceLoader;
import java.util.Set;
import java.util.TreeMap;
import java.util.regex.Pattern;
import org.jspecify.annotations.Nullable;

/**
 * The plugin types known to a router, found through {@link ServiceLoader} and/or registered by
 * hand. When two providers claim one type, the higher {@link PluginProvider#priority()} wins,
 * then the class name that sorts first; each such conflict is listed in {@link #conflicts()}.
 * Immutable once built.
 */
public final class PluginRegistry {
  private static final Pattern KEBAB = Pattern.compile("[a-z0-9]+(-[a-z0-9]+)*");

  private final Map<String, PluginProvider> providers;
  /** Former type names (a provider's {@link PluginProvider#aliases()}) to the current ones. */
  private final Map<String, String> aliases;
  private final List<String> conflicts;

  private PluginRegistry(Map<String, PluginProvider> providers, List<String> conflicts) {
    this.providers = providers;
    List<String> c = new ArrayList<>(conflicts);
    this.aliases = aliasesOf(providers, c);
    this.conflicts = List.copyOf(c);
  }

  /**
   * The aliases of the chosen providers. A real type of the alias's name wins over it, and an
   * alias two providers claim goes to the type that sorts first; both are reported.
   */
  private static Map<String, String> aliasesOf(Map<String, PluginProvider> providers,
      List<String> conflicts) {
    Map<String, String> m = new TreeMap<>();
    for (Map.Entry<String, PluginProvider> e : new TreeMap<>(providers).entrySet()) {
      String type = e.getKey();
      Set<String> as = e.getValue().aliases();
      for (String alias : as == null ? Set.<String>of() : as) {
        if (providers.containsKey(alias)) {
          conflicts.add("alias '" + alias + "' of plugin type '" + type
              + "' is also a type of its own; the type wins");
        } else if (m.putIfAbsent(alias, type) != null) {
          conflicts.add("alias '" + alias + "' is claimed by plugin types '" + m.get(alias)
              + "' and '" + type + "'; using '" + m.get(alias) + "'");
        }
      }
    }
    return m;
  }

  /** Providers found by {@link ServiceLoader} on the thread's context class loader. */
  public static PluginRegistry fromServiceLoader() {
    ClassLoader cl = Thread.currentThread().getContextClassLoader();
    return fromServiceLoader(cl != null ? cl : PluginRegistry.class.getClassLoader());
  }

  /** Providers found by {@link ServiceLoader} on the given class loader. */
  public static PluginRegistry fromServiceLoader(ClassLoader classLoader) {
    List<PluginProvider> found = new ArrayList<>();
    List<String> problems = new ArrayList<>();
    ServiceLoader<PluginProvider> loader = ServiceLoader.load(PluginProvider.class, classLoader);
    var it = loader.iterator();
    while (true) {
      try {
        if (!it.hasNext()) {
          break;
        }
        found.add(it.next());
      } catch (ServiceConfigurationError e) {
        problems.add("a plugin provider could not be loaded: " + e.getMessage());
      }
    }
    return of(found, problems);
  }

  /** A registry of exactly the given providers. */
  public static PluginRegistry of(Collection<? extends PluginProvider> providers) {
    return of(providers, List.of());
  }

  private static PluginRegistry of(Collection<? extends PluginProvider> all, List<String> problems) {
    Map<String, List<PluginProvider>> byType = new TreeMap<>();
    List<String> conflicts = new ArrayList<>(problems);
    for (PluginProvider p : all) {
      String type = p.type();
      if (type == null || !KEBAB.matcher(type).matches()) {
        conflicts.add("provider " + p.getClass().getName() + " has an invalid type name '" + type
            + "' (must be lower-kebab-case); ignored");
        continue;
      }
      byType.computeIfAbsent(type, k -> new ArrayList<>()).add(p);
    }
    Map<String, PluginProvider> chosen = new LinkedHashMap<>();
    Comparator<PluginProvider> order = Comparator
        .comparingInt(PluginProvider::priority).reversed()
        .thenComparing(p -> p.getClass().getName());
    byType.forEach((type, list) -> {
      list.sort(order);
      chosen.put(type, list.get(0));
      if (list.size() > 1) {
        List<String> names = new ArrayList<>();
        for (PluginProvider p : list) {
          names.add(p.getClass().getName() + " (priority " + p.priority() + ")");
        }
        conflicts.add("plugin type '" + type + "' has " + list.size() + " providers " + names
            + "; using " + list.get(0).getClass().getName());
      }
    });
    return new PluginRegistry(chosen, conflicts);
  }

  /** A registry with these providers added; they take precedence over same-named ones here. */
  public PluginRegistry with(PluginProvider... extra) {
    Map<String, PluginProvider> m = new LinkedHashMap<>(providers);
    List<String> c = new ArrayList<>(conflicts);
    for (PluginProvider p : extra) {
      PluginProvider old = m.put(p.type(), p);
      if (old != null) {
        c.add("plugin type '" + p.type() + "' registered by hand replaces " + old.getClass().getName());
      }
    }
    return new PluginRegistry(m, c);
  }

  /** Known type names, sorted. */
  public Set<String> types() {
    return new java.util.TreeSet<>(providers.keySet());
  }

  /** The provider of a type (or of a former name of it), or {@code null}. */
  public @Nullable PluginProvider provider(String type) {
    PluginProvider p = providers.get(type);
    if (p == null && aliases.containsKey(type)) {
      p = providers.get(aliases.get(type));
    }
    return p;
  }

  /**
   * The current name of a type when {@code type} is a former name (an alias) of it, else
   * {@code null}.
   */
  public @Nullable String currentName(String type) {
    return providers.containsKey(type) ? null : aliases.get(type);
  }

  /** Duplicate-type resolutions and loading problems, for logs and diagnostics. */
  public List<String> conflicts() {
    return conflicts;
  }

  /**
   * Creates a plugin; errors name the type and list the known ones when the type is unknown.
   * A provider that throws is reported as an error, not propagated.
   */
  public Result<? extends Plugin> create(String type, PluginContext context, Parameters parameters) {
    PluginProvider p = provider(type);
    if (p == null) {
      String why = UpstreamOnlyTypes.why(type);
      if (why != null) {
        return Result.error("plugin type '" + type + "' is upstream's and not in epp4j: " + why
            + " (docs/plugins.md, Upstream compatibility)");
      }
      return Result.error("unknown plugin type '" + type + "'; known types: " + types());
    }
    try {
      Result<? extends Plugin> r = p.create(context, parameters);
      if (r == null) {
        return Result.error("provider of '" + type + "' returned no result");
      }
      // a provider that does not extend AbstractPluginProvider may return a plugin despite
      // recording errors; the same rule applies to it
      return AbstractPluginProvider.checked(parameters, r);
    } catch (RuntimeException e) {
      return Result.error("provider of '" + type + "' failed: " + e);
    }
  }
}
