package io.epp4j.core;

import io.epp4j.api.CycleState;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.ProfileHandler;
import io.epp4j.api.ProfileRunner;

/**
 * {@code single-profile-handler}: runs the one configured profile and makes it primary. A file
 * that names it beside several profiles is refused, as upstream's loader refuses it: running the
 * first and never the others would leave them configured for nothing.
 */
final class SingleProfileHandler implements ProfileHandler {
  @Override
  public String handle(InferenceRequest request, CycleState state, ProfileRunner runner) {
    String first = runner.profileNames().iterator().next();
    runner.run(first);
    return first;
  }

  @Override
  public @org.jspecify.annotations.Nullable String checkProfiles(java.util.Set<String> profiles) {
    if (profiles.size() <= 1) {
      return null;
    }
    return "single-profile-handler runs one profile, and the file has " + profiles.size()
        + " " + profileNames(profiles) + "; keep one, or name a profile handler that runs"
        + " several (disagg-profile-handler, pd-profile-handler, header-profile-handler)";
  }

  private static String profileNames(java.util.Set<String> profiles) {
    StringBuilder sb = new StringBuilder("(");
    int i = 0;
    for (String name : profiles) {
      if (i == 5) {
        sb.append(", ...");
        break;
      }
      sb.append(i++ > 0 ? ", " : "").append(ConfigLoader.quote(name));
    }
    return sb.append(')').toString();
  }

  @Override
  public String toString() {
    return "single-profile-handler";
  }
}
