package io.epp4j.core;

import io.epp4j.api.Admitter;
import io.epp4j.api.Plugin;
import io.epp4j.api.ProfileHandler;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import org.jspecify.annotations.Nullable;

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
  private final List<Admitter> admitters;
  private final @Nullable Saturation saturation;
  private final io.epp4j.api.@Nullable SaturationDetector saturationDetector;

  /**
   * When the pool counts as saturated for shedding, as a configuration's
   * {@code saturationDetector} section sets it; it replaces the router builder's settings while
   * the configuration is active. An endpoint's saturation is
   * {@code max(waiting / queueThreshold, kvUsage / kvCacheThreshold)}, or 1 when its metrics are
   * older than {@code metricsStaleness}; the pool's is the average. {@code queueThreshold} is at
   * least 1, {@code kvCacheThreshold} in (0, 1] (as the router builder's and the file's),
   * {@code metricsStaleness} positive; other values are refused naming the field.
   */
  public record Saturation(int queueThreshold, double kvCacheThreshold,
      java.time.Duration metricsStaleness) {
    public Saturation {
      if (queueThreshold < 1) {
        throw new IllegalArgumentException("queueThreshold must be >= 1, got " + queueThreshold);
      }
      // in (0, 1] as the router builder's saturationKvThreshold and the file's
      // kvCacheUtilThreshold: KV usage is a fraction, so a threshold above 1 (or infinite)
      // would silently take KV usage out of the rule
      if (!(kvCacheThreshold > 0 && kvCacheThreshold <= 1)) {
        throw new IllegalArgumentException("kvCacheThreshold must be in (0, 1], got "
            + kvCacheThreshold);
      }
      if (metricsStaleness.isNegative() || metricsStaleness.isZero()) {
        throw new IllegalArgumentException("metricsStaleness must be > 0, got " + metricsStaleness);
      }
    }
  }

  public RouterConfig(List<SchedulingProfile> profiles, ProfileHandler profileHandler,
      Map<String, Plugin> plugins, List<String> warnings) {
    this(profiles, profileHandler, plugins, warnings, List.of(), null);
  }

  /**
   * A configuration with admission: {@code admitters} are asked in order before any profile runs
   * (the first refusal sheds the request), and {@code saturation}, when not null, replaces the
   * router's saturation settings.
   */
  public RouterConfig(List<SchedulingProfile> profiles, ProfileHandler profileHandler,
      Map<String, Plugin> plugins, List<String> warnings, List<Admitter> admitters,
      @Nullable Saturation saturation) {
    this(profiles, profileHandler, plugins, warnings, admitters, saturation, null);
  }

  /**
   * As above, with a saturation detector plugin ({@code concurrency-detector}, say) that, when
   * not null, decides the pool's saturation instead of the utilization rule ({@code saturation}
   * must then be null).
   */
  public RouterConfig(List<SchedulingProfile> profiles, ProfileHandler profileHandler,
      Map<String, Plugin> plugins, List<String> warnings, List<Admitter> admitters,
      @Nullable Saturation saturation,
      io.epp4j.api.@Nullable SaturationDetector saturationDetector) {
    if (saturation != null && saturationDetector != null) {
      throw new IllegalArgumentException("a saturation rule and a saturation detector were both"
          + " given; give one");
    }
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
    this.admitters = List.copyOf(admitters);
    this.saturation = saturation;
    this.saturationDetector = saturationDetector;
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

  /** Admission plugins, asked in this order before any profile runs. */
  public List<Admitter> admitters() {
    return admitters;
  }

  /** The saturation settings this configuration sets, if any. */
  public Optional<Saturation> saturation() {
    return Optional.ofNullable(saturation);
  }

  /** The saturation detector plugin this configuration names, if any (see the constructor). */
  public Optional<io.epp4j.api.SaturationDetector> saturationDetector() {
    return Optional.ofNullable(saturationDetector);
  }

  /** Non-fatal findings: unread parameters, ignored sections. */
  public List<String> warnings() {
    return warnings;
  }
}
