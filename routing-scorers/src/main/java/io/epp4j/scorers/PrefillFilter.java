package io.epp4j.scorers;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.Endpoint;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import java.util.Set;

/**
 * {@code prefill-filter}: by the {@value Endpoint#ROLE_LABEL} label, keeps endpoints labelled {@code prefill}.
 */
final class PrefillFilter extends RoleFilter {
  PrefillFilter() {
    super("prefill-filter", Set.of("prefill"), false);
  }

  /** Provides {@code prefill-filter}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("prefill-filter");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      return new PrefillFilter();
    }
  }
}
