package io.epp4j.scorers;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.Endpoint;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import java.util.Set;

/**
 * {@code decode-filter}: by the {@value Endpoint#ROLE_LABEL} label, keeps the endpoints that can
 * decode: {@code decode}, the combined roles llm-d defines since 0.7 ({@code both},
 * {@code prefill-decode}, {@code encode-prefill-decode}) and unlabelled ones (a plain vLLM server
 * does both).
 */
final class DecodeFilter extends RoleFilter {
  DecodeFilter() {
    super("decode-filter", Set.of("decode", "both", "prefill-decode", "encode-prefill-decode"),
        true);
  }

  /** Provides {@code decode-filter}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("decode-filter");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      return new DecodeFilter();
    }
  }
}
