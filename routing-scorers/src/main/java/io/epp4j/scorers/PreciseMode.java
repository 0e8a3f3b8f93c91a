package io.epp4j.scorers;

import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.PluginProvider;
import io.epp4j.api.Result;
import java.util.ServiceLoader;
import org.jspecify.annotations.Nullable;

/**
 * Early llm-d configurations chose precise scoring with {@code prefix-cache-scorer} and
 * {@code mode: cache_tracking}. That is epp4j's {@code precise-prefix-cache-scorer}, which lives in
 * routing-kv-events; this finds its provider on the class path and lets it build the scorer from
 * the same parameters, or refuses the mode with a message saying what is missing.
 */
final class PreciseMode {
  static final String PRECISE_TYPE = "precise-prefix-cache-scorer";

  private PreciseMode() {}

  static Plugin create(PluginContext c, Parameters p) {
    PluginProvider precise = find(Thread.currentThread().getContextClassLoader());
    if (precise == null) {
      precise = find(PreciseMode.class.getClassLoader());
    }
    if (precise == null) {
      p.error("mode", "'cache_tracking' is precise mode, which needs the routing-kv-events module"
          + " (type " + PRECISE_TYPE + ") on the class path");
      return new Plugin() {};
    }
    Result<? extends Plugin> r = precise.create(c, p);
    if (!r.isOk()) {
      // the precise provider records parameter errors in p; these are the others
      throw new IllegalArgumentException(String.join("; ", r.errors()));
    }
    return r.value();
  }

  private static @Nullable PluginProvider find(@Nullable ClassLoader cl) {
    if (cl == null) {
      return null;
    }
    for (PluginProvider pp : ServiceLoader.load(PluginProvider.class, cl)) {
      if (pp.type().equals(PRECISE_TYPE)) {
        return pp;
      }
    }
    return null;
  }
}
