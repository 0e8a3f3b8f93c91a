package io.epp4j.core;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import org.jspecify.annotations.Nullable;

/**
 * Finds the profile to run when no configuration is given. Core knows no plugin types, so the
 * module that ships them (routing-scorers) ships the default profile too, as the resource
 * {@link Router#DEFAULT_CONFIG_RESOURCE}, found on the same class loader plugin providers are.
 */
final class DefaultConfig {
  private DefaultConfig() {}

  /** The default profile's YAML, or null when no module on the classpath offers one. */
  static @Nullable String find() {
    ClassLoader cl = Thread.currentThread().getContextClassLoader();
    String yaml = cl == null ? null : read(cl);
    return yaml != null ? yaml : read(DefaultConfig.class.getClassLoader());
  }

  private static @Nullable String read(ClassLoader cl) {
    try (InputStream in = cl.getResourceAsStream(Router.DEFAULT_CONFIG_RESOURCE)) {
      return in == null ? null : new String(in.readAllBytes(), StandardCharsets.UTF_8);
    } catch (IOException e) {
      throw new UncheckedIOException("cannot read " + Router.DEFAULT_CONFIG_RESOURCE, e);
    }
  }
}
