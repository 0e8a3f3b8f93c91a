package io.epp4j.api;

import java.util.List;
import java.util.Objects;
import org.jspecify.annotations.Nullable;

/**
 * What one scheduling profile picked: endpoints in order of preference (primary first), or none
 * when its filters left no candidate.
 *
 * @param profile   the profile name
 * @param endpoints picked endpoints, primary first; empty if nothing was picked
 */
public record ProfileResult(String profile, List<Endpoint> endpoints) {
  public ProfileResult {
    Objects.requireNonNull(profile, "profile");
    endpoints = List.copyOf(endpoints);
  }

  /** The primary endpoint, or {@code null} when nothing was picked. */
  public @Nullable Endpoint primary() {
    return endpoints.isEmpty() ? null : endpoints.get(0);
  }

  public boolean isEmpty() {
    return endpoints.isEmpty();
  }
}
