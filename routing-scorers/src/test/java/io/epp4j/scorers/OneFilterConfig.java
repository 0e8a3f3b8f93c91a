package io.epp4j.scorers;

/**
 * For tests of what one filter makes of its parameters: the configuration file of a plugin
 * {@code f} of the given type, then {@code random-picker}, in one {@code default} profile.
 */
final class OneFilterConfig {
  private OneFilterConfig() {}

  /** The file, with {@code parameters} written into it as given (YAML, e.g. flow style). */
  static String yaml(String type, String parameters) {
    return """
        plugins:
        - name: f
          type: %s
          parameters: %s
        - type: random-picker
        schedulingProfiles:
        - name: default
          plugins: [{pluginRef: f}, {pluginRef: random-picker}]
        """.formatted(type, parameters);
  }
}
