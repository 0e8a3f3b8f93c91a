package io.epp4j.kvevents;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.List;

/**
 * Ready-made router configurations for precise mode, shipped as resources under
 * {@code io/epp4j/kvevents/presets/}: {@value #EPP_PRECISE} and {@value #EPP_PRECISE_HYBRID} are
 * the EPP default profile (prefix 3, queue 2, KV utilisation 2, max-score picker) with the prefix
 * scorer replaced; {@value #EPP4J_PRECISE} is the {@code epp4j} policy (token-cost-picker) with
 * its hits read from KV events instead of the router's memory. All need {@code routing-scorers}
 * at run time for the plugins that are not KV-event driven.
 */
public final class KvEventsPresets {
  /** Precise prefix scoring from KV events. */
  public static final String EPP_PRECISE = "epp-precise";
  /** Precise scoring combined with the router's memory of where it sent each prefix. */
  public static final String EPP_PRECISE_HYBRID = "epp-precise-hybrid";
  /**
   * The {@code epp4j} policy with {@code precise-prefix-cache-scorer} in place of the approximate
   * prefix scorer: {@code token-cost-picker} with the epp4j parameters weighs the uncached tokens
   * the engines' KV events show against each endpoint's load in tokens.
   */
  public static final String EPP4J_PRECISE = "epp4j-precise";

  private KvEventsPresets() {}

  /** The preset names. */
  public static List<String> names() {
    return List.of(EPP_PRECISE, EPP_PRECISE_HYBRID, EPP4J_PRECISE);
  }

  /**
   * The YAML of a preset, for {@code Router.builder().configYaml(yaml, name)}.
   *
   * @throws IllegalArgumentException for an unknown name
   */
  public static String yaml(String name) {
    if (!names().contains(name)) {
      throw new IllegalArgumentException("unknown preset '" + name + "', known: " + names());
    }
    try (InputStream in = KvEventsPresets.class.getResourceAsStream("presets/" + name + ".yaml")) {
      if (in == null) {
        throw new IllegalStateException("preset resource missing: " + name);
      }
      return new String(in.readAllBytes(), StandardCharsets.UTF_8);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }
}
