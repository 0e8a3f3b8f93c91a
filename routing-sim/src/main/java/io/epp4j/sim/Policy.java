package io.epp4j.sim;

import io.epp4j.kvevents.KvEventsPresets;
import io.epp4j.scorers.Epp4jPreset;
import java.io.IOException;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.jspecify.annotations.Nullable;

/**
 * A routing policy under test: an {@code EndpointPickerConfig} the real router loads. The
 * simulator holds no routing logic; a policy is only a configuration.
 *
 * @param name name in reports
 * @param yaml configuration text, or {@code null} for the router's default (EPP) profile
 * @param file configuration file, used instead of {@code yaml} when set
 * @param kvEvents whether the policy reads the replicas' KV events: the simulation then registers
 *     a {@code KvBlockIndex} as a router service and feeds it every engine step's events
 * @param blockSize the engines' KV block size the configuration names for its precise scorer
 *     (the simulated engines then use it), or null to keep the hardware profile's
 */
public record Policy(String name, @Nullable String yaml, @Nullable Path file, boolean kvEvents,
    @Nullable Integer blockSize) {

  /** A policy that does not read KV events. */
  public Policy(String name, @Nullable String yaml, @Nullable Path file) {
    this(name, yaml, file, false);
  }

  /** A policy with the hardware profile's block size. */
  public Policy(String name, @Nullable String yaml, @Nullable Path file, boolean kvEvents) {
    this(name, yaml, file, kvEvents, null);
  }

  /** Round-robin over the replicas ({@code round-robin-picker}). */
  public static final Policy ROUND_ROBIN = new Policy("round-robin", """
      apiVersion: inference.networking.x-k8s.io/v1alpha1
      kind: EndpointPickerConfig
      plugins:
      - type: round-robin-picker
      schedulingProfiles:
      - name: default
        plugins:
        - pluginRef: round-robin-picker
      """, null);

  /**
   * Sticky sessions as Istio does them: an Envoy ring hash (minimum ring 1024) on the request's
   * session key ({@code ring-hash-picker} with its defaults).
   */
  public static final Policy STICKY = new Policy("sticky", """
      apiVersion: inference.networking.x-k8s.io/v1alpha1
      kind: EndpointPickerConfig
      plugins:
      - type: ring-hash-picker
      schedulingProfiles:
      - name: default
        plugins:
        - pluginRef: ring-hash-picker
      """, null);

  /** The EPP default profile: prefix-cache 3, queue 2, KV utilisation 2, max-score picker. */
  public static final Policy EPP_APPROXIMATE = new Policy("epp-approximate", null, null);

  /**
   * The EPP default profile with {@code precise-prefix-cache-scorer}: prefix scores from the
   * blocks the replicas report in their KV events.
   */
  public static final Policy EPP_PRECISE = new Policy(KvEventsPresets.EPP_PRECISE,
      KvEventsPresets.yaml(KvEventsPresets.EPP_PRECISE), null, true);

  /**
   * The EPP default profile with {@code hybrid-prefix-cache-scorer}: KV events plus the router's
   * memory of where it sent each prefix.
   */
  public static final Policy EPP_PRECISE_HYBRID = new Policy(KvEventsPresets.EPP_PRECISE_HYBRID,
      KvEventsPresets.yaml(KvEventsPresets.EPP_PRECISE_HYBRID), null, true);

  /**
   * The project's own policy: cache misses and load compared in tokens
   * ({@code prefix-cache-scorer} + {@code token-cost-picker}), from the router's knowledge and
   * scraped metrics only.
   */
  public static final Policy EPP4J = new Policy(Epp4jPreset.NAME, Epp4jPreset.yaml(), null);

  /**
   * {@link #EPP4J} with the hits read from the replicas' KV events
   * ({@code precise-prefix-cache-scorer} + {@code token-cost-picker}).
   */
  public static final Policy EPP4J_PRECISE = new Policy(KvEventsPresets.EPP4J_PRECISE,
      KvEventsPresets.yaml(KvEventsPresets.EPP4J_PRECISE), null, true);

  /**
   * Prefill/decode disaggregation with the EPP's approximate scoring in both profiles (the EPP
   * default weights: prefix-cache 3, queue 2, KV utilisation 2, max-score picker), llm-d's
   * {@code disagg-profile-handler} and {@code prefix-based-pd-decider} with the 16 uncached
   * tokens of llm-d's sample P/D configuration ({@code deploy/config/pd-epp-config.yaml}).
   */
  public static final Policy PD_EPP_APPROXIMATE = new Policy("pd-epp-approximate", """
      apiVersion: inference.networking.x-k8s.io/v1alpha1
      kind: EndpointPickerConfig
      plugins:
      - type: prefill-filter
      - type: decode-filter
      - type: prefix-cache-scorer
      - type: queue-scorer
      - type: kv-cache-utilization-scorer
      - type: max-score-picker
      - type: prefix-based-pd-decider
        parameters: {nonCachedTokens: 16}
      - type: disagg-profile-handler
        parameters:
          deciders: {prefill: prefix-based-pd-decider}
      schedulingProfiles:
      - name: decode
        plugins:
        - pluginRef: decode-filter
        - {pluginRef: prefix-cache-scorer, weight: 3}
        - {pluginRef: queue-scorer, weight: 2}
        - {pluginRef: kv-cache-utilization-scorer, weight: 2}
        - pluginRef: max-score-picker
      - name: prefill
        plugins:
        - pluginRef: prefill-filter
        - {pluginRef: prefix-cache-scorer, weight: 3}
        - {pluginRef: queue-scorer, weight: 2}
        - {pluginRef: kv-cache-utilization-scorer, weight: 2}
        - pluginRef: max-score-picker
      """, null);

  /**
   * Prefill/decode disaggregation with {@code token-cost-picker} (epp4j's defaults) in both
   * profiles, one picker shared by them, so that the prompt a prefill pick must compute is
   * pending on the prefill endpoint until the first token; the same handler and decider as
   * {@link #PD_EPP_APPROXIMATE}.
   */
  public static final Policy PD_EPP4J = new Policy("pd-epp4j", """
      apiVersion: inference.networking.x-k8s.io/v1alpha1
      kind: EndpointPickerConfig
      plugins:
      - type: prefill-filter
      - type: decode-filter
      - type: prefix-cache-scorer
      - type: token-cost-picker
      - type: prefix-based-pd-decider
        parameters: {nonCachedTokens: 16}
      - type: disagg-profile-handler
        parameters:
          deciders: {prefill: prefix-based-pd-decider}
      schedulingProfiles:
      - name: decode
        plugins:
        - pluginRef: decode-filter
        - {pluginRef: prefix-cache-scorer, weight: 1}
        - pluginRef: token-cost-picker
      - name: prefill
        plugins:
        - pluginRef: prefill-filter
        - {pluginRef: prefix-cache-scorer, weight: 1}
        - pluginRef: token-cost-picker
      """, null);

  /**
   * Presets that only make sense on a cluster with prefill/decode roles ({@code --pd}): named
   * with {@code --policies}, not run by default.
   */
  public static Map<String, Policy> pdPresets() {
    Map<String, Policy> m = new LinkedHashMap<>();
    m.put(PD_EPP_APPROXIMATE.name(), PD_EPP_APPROXIMATE);
    m.put(PD_EPP4J.name(), PD_EPP4J);
    return m;
  }

  /** Every preset {@code --policies} knows: the default ones, then the P/D ones. */
  public static Map<String, Policy> allPresets() {
    Map<String, Policy> m = presets();
    m.putAll(pdPresets());
    return m;
  }

  /**
   * Whether the configuration has a scheduling profile named {@code prefill}: on a
   * {@code --pd} cluster it then sees prefill and decode replicas, any other policy sees every
   * replica as {@code both}. A file that cannot be read does not (the router reports it).
   */
  public boolean disaggregates() {
    Object root;
    try {
      com.fasterxml.jackson.databind.ObjectMapper m = new com.fasterxml.jackson.databind
          .ObjectMapper(new com.fasterxml.jackson.dataformat.yaml.YAMLFactory());
      if (file != null) {
        root = m.readValue(file.toFile(), Object.class);
      } else if (yaml != null) {
        root = m.readValue(yaml, Object.class);
      } else {
        return false;
      }
    } catch (IOException | RuntimeException e) {
      return false;
    }
    if (root instanceof Map<?, ?> top && top.get("schedulingProfiles") instanceof List<?> ps) {
      for (Object o : ps) {
        if (o instanceof Map<?, ?> profile && "prefill".equals(profile.get("name"))) {
          return true;
        }
      }
    }
    return false;
  }

  /** Presets by name, in report order. */
  public static Map<String, Policy> presets() {
    Map<String, Policy> m = new LinkedHashMap<>();
    m.put(ROUND_ROBIN.name(), ROUND_ROBIN);
    m.put(STICKY.name(), STICKY);
    m.put(EPP_APPROXIMATE.name(), EPP_APPROXIMATE);
    m.put(EPP_PRECISE.name(), EPP_PRECISE);
    m.put(EPP_PRECISE_HYBRID.name(), EPP_PRECISE_HYBRID);
    m.put(EPP4J.name(), EPP4J);
    m.put(EPP4J_PRECISE.name(), EPP4J_PRECISE);
    return m;
  }

  /**
   * A policy from a config file, named after the file. It reads KV events when the file uses a
   * precise or hybrid prefix scorer (under any of its names, or the prefix scorer in
   * {@code cache_tracking} mode), at the block size the scorer's parameters name.
   */
  public static Policy fromFile(Path file) {
    String n = file.getFileName().toString();
    int dot = n.lastIndexOf('.');
    String name = dot > 0 ? n.substring(0, dot) : n;
    Object root;
    try {
      root = new com.fasterxml.jackson.databind.ObjectMapper(
          new com.fasterxml.jackson.dataformat.yaml.YAMLFactory()).readValue(file.toFile(),
          Object.class);
    } catch (IOException | RuntimeException e) {
      // the router reports the unreadable or malformed file when it loads it
      return new Policy(name, null, file, false, null);
    }
    boolean kv = false;
    Integer blockSize = null;
    if (root instanceof Map<?, ?> top && top.get("plugins") instanceof List<?> plugins) {
      for (Object o : plugins) {
        if (!(o instanceof Map<?, ?> spec)) {
          continue;
        }
        Map<?, ?> params = spec.get("parameters") instanceof Map<?, ?> m ? m : Map.of();
        Object type = spec.get("type");
        boolean precise = PRECISE_TYPES.contains(String.valueOf(type))
            || ("prefix-cache-scorer".equals(type) && "cache_tracking".equals(params.get("mode")));
        if (precise) {
          kv = true;
          Integer bs = preciseBlockSize(params);
          blockSize = bs != null ? bs : blockSize;
        }
      }
    }
    return new Policy(name, null, file, kv, blockSize);
  }

  private static final java.util.Set<String> PRECISE_TYPES = java.util.Set.of(
      "precise-prefix-cache-scorer", "precise-prefix-cache-producer", "hybrid-prefix-cache-scorer",
      "kvcache-aware-scorer");

  /** The block size a precise scorer's parameters name, in any of the upstream places. */
  private static @Nullable Integer preciseBlockSize(Map<?, ?> params) {
    Object direct = params.get("blockSizeTokens");
    if (direct instanceof Integer i) {
      return i;
    }
    Object tp = params.get("tokenProcessorConfig");
    if (tp instanceof Map<?, ?> m && m.get("blockSize") instanceof Integer i) {
      return i;
    }
    if (params.get("indexerConfig") instanceof Map<?, ?> ic
        && ic.get("tokenProcessorConfig") instanceof Map<?, ?> m
        && m.get("blockSize") instanceof Integer i) {
      return i;
    }
    return null;
  }
}
