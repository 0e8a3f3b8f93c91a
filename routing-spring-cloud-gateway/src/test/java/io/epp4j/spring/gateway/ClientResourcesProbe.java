package io.epp4j.spring.gateway;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.PluginProvider;
import io.epp4j.api.Result;
import io.epp4j.api.Scorer;
import io.lettuce.core.resource.ClientResources;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CopyOnWriteArrayList;

/**
 * A scorer that scores nothing and records the Lettuce {@code ClientResources} its router offered
 * it as a service, as routing-redis's plugins ask for it.
 */
public final class ClientResourcesProbe implements Scorer {
  static final List<Optional<ClientResources>> SEEN = new CopyOnWriteArrayList<>();

  @Override
  public void score(InferenceRequest request, CycleState state, List<Candidate> candidates,
      double[] scores) {}

  /** The {@code client-resources-probe} plugin type. */
  public static final class Provider implements PluginProvider {
    @Override
    public String type() {
      return "client-resources-probe";
    }

    @Override
    public Result<? extends Plugin> create(PluginContext context, Parameters parameters) {
      SEEN.add(context.service(ClientResources.class));
      return Result.ok(new ClientResourcesProbe());
    }
  }
}
