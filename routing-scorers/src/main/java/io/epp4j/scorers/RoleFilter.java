package io.epp4j.scorers;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.Filter;
import io.epp4j.api.InferenceRequest;
import java.util.List;
import java.util.Set;

/**
 * What {@link PrefillFilter} and {@link DecodeFilter} share: keeps endpoints whose
 * {@value Endpoint#ROLE_LABEL} label is one of the accepted roles.
 */
abstract class RoleFilter implements Filter {
  private final String type;
  private final Set<String> roles;
  private final boolean acceptUnlabelled;

  RoleFilter(String type, Set<String> roles, boolean acceptUnlabelled) {
    this.type = type;
    this.roles = Set.copyOf(roles);
    this.acceptUnlabelled = acceptUnlabelled;
  }

  final boolean accepts(Endpoint e) {
    String role = e.label(Endpoint.ROLE_LABEL);
    return role == null ? acceptUnlabelled : roles.contains(role);
  }

  @Override
  public final List<Candidate> filter(InferenceRequest request, CycleState state,
      List<Candidate> candidates) {
    return CandidateLists.retain(candidates, c -> accepts(c.endpoint()));
  }

  @Override
  public String toString() {
    return type;
  }
}
