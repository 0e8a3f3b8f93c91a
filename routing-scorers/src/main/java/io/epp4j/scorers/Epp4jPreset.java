package io.epp4j.scorers;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;

/**
 * The {@value #NAME} routing policy as a ready-made configuration, shipped as the resource
 * {@code io/epp4j/scorers/presets/epp4j.yaml}: {@code prefix-cache-scorer} for the hits and
 * {@code token-cost-picker} to weigh them against the load in tokens, with new sessions bounded to
 * 1.25 × the mean per endpoint. It needs only the router's
 * own knowledge and scraped metrics. Select it with
 * {@code Router.builder().configYaml(Epp4jPreset.yaml(), Epp4jPreset.NAME)} or copy the YAML.
 */
public final class Epp4jPreset {
  /** The preset's name. */
  public static final String NAME = "epp4j";

  private Epp4jPreset() {}

  /** The preset's configuration text. */
  public static String yaml() {
    try (InputStream in = Epp4jPreset.class.getResourceAsStream("presets/" + NAME + ".yaml")) {
      if (in == null) {
        throw new IllegalStateException("preset resource missing: " + NAME);
      }
      return new String(in.readAllBytes(), StandardCharsets.UTF_8);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }
}
