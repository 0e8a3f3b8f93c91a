package io.epp4j.core;

import io.epp4j.api.Plugin;
import io.epp4j.api.ProfileHandler;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * A complete scheduling setup: the profiles in order, the profile handler, and every plugin
 * instance by name (including plugins that only listen, such as data producers). The router
 * loads one from an {@code EndpointPickerConfig} file or YAML text ({@link Router.Builder#configFile},
 * {@link Router#reconfigure(java.nio.file.Path)}), or an application builds one in code.
 */
public final class RouterConfig {
  private final Map<String, SchedulingProfile> profiles;
  private final ProfileHandler profileHandler;
  private final Map<String, Plugin> plugins;
  private final List<String> warnings;

  public RouterConfig(List<SchedulingProfile> profiles, ProfileHandler profileHandler,
      Map<String, Plugin> plugins, List<String> warnings) {
    if (profiles.isEmpty()) {
      throw new IllegalArgumentException("at least one scheduling profile is required");
    }
    Map<String, SchedulingProfile> m = new LinkedHashMap<>();
    for (SchedulingProfile p : profiles) {
      if (m.put(p.name(), p) != null) {
        throw new IllegalArgumentException("duplicate profile name '" + p.name() + "'");
      }
    }
    this.profiles = java.util.Collections.unmodifiableMap(m);
    this.profileHandler = Objects.requireNonNull(profileHandler, "profileHandler");
    this.plugins = java.util.Collections.unmodifiableMap(new LinkedHashMap<>(plugins));
    this.warnings = List.copyOf(warnings);
  }

  /** A config of one profile run by the single-profile handler. */
  public static RouterConfig of(SchedulingProfile profile) {
    return new RouterConfig(List.of(profile), new SingleProfileHandler(), Map.of(), List.of());
  }

  public Map<String, SchedulingProfile> profiles() {
    return profiles;
  }

  public ProfileHandler profileHandler() {
    return profileHandler;
  }

  /** Named plugin instances created from the config (empty for configs built in code). */
  public Map<String, Plugin> plugins() {
    return plugins;
  }

  /** Non-fatal findings: unread parameters, ignored sections. */
  public List<String> warnings() {
    return warnings;
  }
}
