package io.epp4j.scorers;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.CycleState;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.ProfileHandler;
import io.epp4j.api.ProfileRunner;

/**
 * {@code data-parallel-profile-handler} (llm-d): vLLM data parallelism, each rank a pool endpoint
 * on its own port of one address. Runs the configuration's single profile, whose pick is a rank.
 * Upstream then rewrote the destination to the pod's {@code primaryPort} and named the rank in a
 * header, for proxies that could reach only one port; an epp4j gateway forwards to the picked
 * rank's own {@code host:port}, where that header would have led, so {@code primaryPort} is
 * validated and noticed but changes nothing. A file with more than one profile is refused, as
 * upstream refuses to schedule then.
 */
final class DataParallelProfileHandler implements ProfileHandler {
  @Override
  public String handle(InferenceRequest request, CycleState state, ProfileRunner runner) {
    if (runner.profileNames().size() != 1) {
      throw new IllegalStateException("data-parallel-profile-handler needs exactly one"
          + " scheduling profile, the configuration has " + runner.profileNames().size());
    }
    String only = runner.profileNames().iterator().next();
    runner.run(only);
    return only;
  }

  @Override
  public @org.jspecify.annotations.Nullable String checkProfiles(java.util.Set<String> profiles) {
    return profiles.size() == 1 ? null
        : "data-parallel-profile-handler needs exactly one scheduling profile, got "
            + profiles.size();
  }

  @Override
  public String toString() {
    return "data-parallel-profile-handler";
  }

  /** Notes why {@code primaryPort} changes nothing here (see the class comment). */
  static void primaryPort(Parameters p) {
    if (p.has("primaryPort")) {
      int port = p.getInt("primaryPort", 0, 0, 65535);
      if (port != 0) {
        p.notice("primaryPort", "has no effect: epp4j's gateway sends each request to the"
            + " picked rank's own host:port, where upstream's rewrite to port " + port
            + " and the rank header would have led");
      }
    }
  }

  /**
   * Provides {@code data-parallel-profile-handler}; public only for
   * {@link java.util.ServiceLoader}.
   */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("data-parallel-profile-handler");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      primaryPort(p);
      return new DataParallelProfileHandler();
    }
  }
}
