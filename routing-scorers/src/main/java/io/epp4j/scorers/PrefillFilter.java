package io.epp4j.scorers;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.Endpoint;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import java.util.Set;

/**
 * {@code prefill-filter}: by the {@value Endpoint#ROLE_LABEL} label, keeps the endpoints that can
 * run a prefill: {@code prefill}, and the combined roles llm-d defines since 0.7 ({@code both},
 * {@code prefill-decode}, {@code encode-prefill}, {@code encode-prefill-decode}). Unlabelled
 * endpoints are not kept.
 */
final class PrefillFilter extends RoleFilter {
  PrefillFilter() {
    super("prefill-filter", Set.of("prefill", "both", "prefill-decode", "encode-prefill",
        "encode-prefill-decode"), false);
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
