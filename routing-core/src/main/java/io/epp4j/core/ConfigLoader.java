package io.epp4j.core;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.dataformat.yaml.YAMLFactory;
import io.epp4j.api.Filter;
import io.epp4j.api.Parameters;
import io.epp4j.api.Picker;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.ProfileHandler;
import io.epp4j.api.Result;
import io.epp4j.api.Scorer;
import io.epp4j.api.Ticker;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.function.Function;
import org.jspecify.annotations.Nullable;

/**
 * Loads the upstream EPP's {@code EndpointPickerConfig} YAML:
 *
 * <pre>
 * apiVersion: inference.networking.x-k8s.io/v1alpha1
 * kind: EndpointPickerConfig
 * plugins:
 * - name: q                # defaults to the type
 *   type: queue-scorer
 *   parameters: {...}
 * schedulingProfiles:
 * - name: default
 *   plugins:
 *   - pluginRef: q
 *     weight: 2            # scorers only; default 1
 * </pre>
 *
 * <p>Every problem in a file is collected and reported together; each message names the file,
 * the plugin or profile, and the field. Top-level sections that epp4j does not use (for example
 * {@code featureGates}) are accepted with a warning so upstream files load unchanged.
 */
public final class ConfigLoader {
  static final Set<String> KNOWN_TOP_LEVEL =
      Set.of("apiVersion", "kind", "plugins", "schedulingProfiles");
  static final Set<String> TOLERATED_TOP_LEVEL =
      Set.of("featureGates", "saturationDetector", "data", "metadata", "parser", "flowControl");

  private static final ObjectMapper YAML = new ObjectMapper(new YAMLFactory());

  private final PluginRegistry registry;
  private final Ticker ticker;
  private final Function<Class<?>, Optional<?>> services;

  /** A loader that resolves plugin types in {@code registry}. */
  public ConfigLoader(PluginRegistry registry) {
    this(registry, Ticker.system(), c -> Optional.empty());
  }

  ConfigLoader(PluginRegistry registry, Ticker ticker, Function<Class<?>, Optional<?>> services) {
    this.registry = registry;
    this.ticker = ticker;
    this.services = services;
  }

  /** Loads a file; all errors are in the result, none thrown. */
  public Result<RouterConfig> load(Path file) {
    String text;
    try {
      text = Files.readString(file, StandardCharsets.UTF_8);
    } catch (IOException e) {
      return Result.error(file + ": cannot read: " + e.getMessage());
    }
    return load(text, file.toString());
  }

  /** Loads YAML text; {@code source} names it in messages. */
  public Result<RouterConfig> load(String yaml, String source) {
    Object root;
    try {
      root = YAML.readValue(yaml, Object.class);
    } catch (JsonProcessingException e) {
      return Result.error(source + ": not valid YAML: " + e.getOriginalMessage()
          + (e.getLocation() != null ? " at line " + e.getLocation().getLineNr()
              + ", column " + e.getLocation().getColumnNr() : ""));
    }
    if (!(root instanceof Map<?, ?> top)) {
      return Result.error(source + ": the document must be a mapping with 'plugins' and 'schedulingProfiles'");
    }
    List<String> errors = new ArrayList<>();
    List<String> warnings = new ArrayList<>();
    for (Object k : top.keySet()) {
      String key = String.valueOf(k);
      if (TOLERATED_TOP_LEVEL.contains(key)) {
        warnings.add(source + ": section '" + key + "' is not used by epp4j and was ignored");
      } else if (!KNOWN_TOP_LEVEL.contains(key)) {
        errors.add(source + ": unknown top-level field '" + key + "'; expected one of "
            + new java.util.TreeSet<>(KNOWN_TOP_LEVEL));
      }
    }
    Object kind = top.get("kind");
    if (kind != null && !"EndpointPickerConfig".equals(kind)) {
      errors.add(source + ": field 'kind' must be EndpointPickerConfig, got '" + kind + "'");
    }

    // plugins
    Map<String, Plugin> plugins = new LinkedHashMap<>();
    Object pluginsNode = top.get("plugins");
    List<?> pluginList = asList(pluginsNode, source + ": field 'plugins'", errors);
    for (int i = 0; i < pluginList.size(); i++) {
      String where = source + ": plugins[" + i + "]";
      if (!(pluginList.get(i) instanceof Map<?, ?> spec)) {
        errors.add(where + ": must be a mapping with 'type'");
        continue;
      }
      for (Object k : spec.keySet()) {
        if (!Set.of("name", "type", "parameters").contains(String.valueOf(k))) {
          errors.add(where + ": unknown field '" + k + "'; expected name, type, parameters");
        }
      }
      Object type = spec.get("type");
      if (!(type instanceof String typeName) || typeName.isBlank()) {
        errors.add(where + ": field 'type' is required");
        continue;
      }
      Object nameNode = spec.get("name");
      String name = nameNode == null ? typeName : String.valueOf(nameNode);
      where = where + " (name '" + name + "', type '" + typeName + "')";
      if (plugins.containsKey(name)) {
        errors.add(where + ": field 'name': duplicate plugin name '" + name + "'");
        continue;
      }
      Object paramsNode = spec.get("parameters");
      Map<String, Object> paramMap = new LinkedHashMap<>();
      if (paramsNode instanceof Map<?, ?> pm) {
        pm.forEach((k, v) -> paramMap.put(String.valueOf(k), v));
      } else if (paramsNode != null) {
        errors.add(where + ": field 'parameters' must be a mapping");
        continue;
      }
      Parameters params = Parameters.of(paramMap);
      Result<? extends Plugin> created = registry.create(typeName, context(name), params);
      if (!created.isOk()) {
        for (String e : created.errors()) {
          errors.add(where + ": " + e);
        }
        continue;
      }
      for (String unread : params.unreadNames()) {
        warnings.add(where + ": parameter '" + unread + "' is not used by epp4j");
      }
      plugins.put(name, created.value());
    }

    // profiles
    List<SchedulingProfile> profiles = new ArrayList<>();
    List<?> profileList = asList(top.get("schedulingProfiles"), source + ": field 'schedulingProfiles'", errors);
    if (profileList.isEmpty() && top.containsKey("schedulingProfiles")) {
      errors.add(source + ": field 'schedulingProfiles' must list at least one profile");
    }
    Set<String> profileNames = new HashSet<>();
    for (int i = 0; i < profileList.size(); i++) {
      String where = source + ": schedulingProfiles[" + i + "]";
      if (!(profileList.get(i) instanceof Map<?, ?> spec)) {
        errors.add(where + ": must be a mapping with 'name' and 'plugins'");
        continue;
      }
      Object pn = spec.get("name");
      if (!(pn instanceof String profileName) || profileName.isBlank()) {
        errors.add(where + ": field 'name' is required");
        continue;
      }
      where = where + " (profile '" + profileName + "')";
      if (!profileNames.add(profileName)) {
        errors.add(where + ": field 'name': duplicate profile name");
        continue;
      }
      for (Object k : spec.keySet()) {
        if (!Set.of("name", "plugins").contains(String.valueOf(k))) {
          errors.add(where + ": unknown field '" + k + "'; expected name, plugins");
        }
      }
      SchedulingProfile.Builder b = SchedulingProfile.builder(profileName);
      List<?> refs = asList(spec.get("plugins"), where + ": field 'plugins'", errors);
      Picker picker = null;
      for (int j = 0; j < refs.size(); j++) {
        String refWhere = where + ": plugins[" + j + "]";
        if (!(refs.get(j) instanceof Map<?, ?> ref)) {
          errors.add(refWhere + ": must be a mapping with 'pluginRef'");
          continue;
        }
        for (Object k : ref.keySet()) {
          if (!Set.of("pluginRef", "weight").contains(String.valueOf(k))) {
            errors.add(refWhere + ": unknown field '" + k + "'; expected pluginRef, weight");
          }
        }
        Object r = ref.get("pluginRef");
        if (!(r instanceof String refName)) {
          errors.add(refWhere + ": field 'pluginRef' is required");
          continue;
        }
        refWhere = refWhere + " (pluginRef '" + refName + "')";
        Double weight = null;
        Object w = ref.get("weight");
        if (w != null) {
          if (w instanceof Number num && num.doubleValue() >= 0 && Double.isFinite(num.doubleValue())) {
            weight = num.doubleValue();
          } else {
            errors.add(refWhere + ": field 'weight' must be a number >= 0, got '" + w + "'");
            continue;
          }
        }
        Plugin plugin = plugins.get(refName);
        if (plugin == null) {
          if (!pluginsNamedInFile(pluginList).contains(refName)) {
            errors.add(refWhere + ": field 'pluginRef' names no plugin; defined plugins: "
                + pluginsNamedInFile(pluginList));
          }
          continue; // plugin failed to load: already reported
        }
        boolean used = false;
        if (plugin instanceof Filter f) {
          b.filter(f);
          used = true;
        }
        if (plugin instanceof Scorer s) {
          b.scorer(refName, s, weight == null ? 1.0 : weight);
          used = true;
        } else if (weight != null) {
          warnings.add(refWhere + ": field 'weight' ignored: the plugin is not a scorer");
        }
        if (plugin instanceof Picker p) {
          if (picker != null) {
            errors.add(refWhere + ": a profile takes one picker; it already has one");
            continue;
          }
          picker = p;
          b.picker(p);
          used = true;
        }
        if (!used) {
          errors.add(refWhere + ": plugin is not a filter, scorer or picker");
        }
      }
      profiles.add(b.build());
    }

    // profile handler
    ProfileHandler handler = null;
    for (Map.Entry<String, Plugin> e : plugins.entrySet()) {
      if (e.getValue() instanceof ProfileHandler h) {
        if (handler != null) {
          errors.add(source + ": plugin '" + e.getKey() + "': only one profile handler may be configured");
        }
        handler = h;
      }
    }
    if (handler == null) {
      if (profiles.size() > 1) {
        errors.add(source + ": " + profiles.size()
            + " profiles need a profile handler plugin (e.g. pd-profile-handler)");
      }
      handler = new SingleProfileHandler();
    }
    if (profiles.isEmpty() && errors.isEmpty()) {
      errors.add(source + ": field 'schedulingProfiles' is required");
    }
    if (!errors.isEmpty()) {
      plugins.values().forEach(Plugin::close);
      return Result.errors(errors);
    }
    return Result.ok(new RouterConfig(profiles, handler, plugins, warnings));
  }

  private static Set<String> pluginsNamedInFile(List<?> pluginList) {
    Set<String> names = new java.util.TreeSet<>();
    for (Object o : pluginList) {
      if (o instanceof Map<?, ?> m && m.get("type") != null) {
        Object n = m.get("name");
        names.add(String.valueOf(n != null ? n : m.get("type")));
      }
    }
    return names;
  }

  private static List<?> asList(@Nullable Object node, String where, List<String> errors) {
    if (node == null) {
      return List.of();
    }
    if (node instanceof List<?> l) {
      return l;
    }
    errors.add(where + " must be a list");
    return List.of();
  }

  private PluginContext context(String name) {
    return new PluginContext() {
      @Override
      public String pluginName() {
        return name;
      }

      @Override
      public Ticker ticker() {
        return ticker;
      }

      @Override
      @SuppressWarnings("unchecked")
      public <T> Optional<T> service(Class<T> type) {
        return (Optional<T>) services.apply(type);
      }
    };
  }
}
