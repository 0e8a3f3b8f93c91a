package io.epp4j.core;

import java.util.List;

/**
 * A configuration could not be used. {@link #errors()} lists every problem found, each naming
 * the source, the plugin and the field.
 */
public final class ConfigException extends RuntimeException {
  private static final long serialVersionUID = 1L;
  private final List<String> errors;

  public ConfigException(List<String> errors) {
    super(errors.size() == 1 ? errors.get(0)
        : errors.size() + " configuration errors:\n  - " + String.join("\n  - ", errors));
    this.errors = List.copyOf(errors);
  }

  public List<String> errors() {
    return errors;
  }
}
