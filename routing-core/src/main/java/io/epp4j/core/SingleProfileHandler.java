package io.epp4j.core;

import io.epp4j.api.CycleState;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.ProfileHandler;
import io.epp4j.api.ProfileRunner;

/**
 * {@code single-profile-handler}: runs the one configured profile and makes it primary. With
 * several profiles configured it runs the first.
 */
final class SingleProfileHandler implements ProfileHandler {
  @Override
  public String handle(InferenceRequest request, CycleState state, ProfileRunner runner) {
    String first = runner.profileNames().iterator().next();
    runner.run(first);
    return first;
  }

  @Override
  public String toString() {
    return "single-profile-handler";
  }
}
