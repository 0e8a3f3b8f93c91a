package io.epp4j.api;

/**
 * Decides which scheduling profiles run for a request and which one is primary (the one whose
 * endpoint the gateway forwards to). The default runs the single configured profile; a
 * prefill/decode handler runs {@code decode} and, when worthwhile, {@code prefill}.
 */
public interface ProfileHandler extends Plugin {

  /**
   * Where a handler that runs no profile on purpose says why, in the cycle's state (for example
   * a request that names a profile the configuration does not have). The router answers such a
   * request with this rejection rather than with its general "no endpoint" one. A handler that
   * ran its primary profile leaves it unset.
   */
  AttributeKey<Rejection> REJECTION = AttributeKey.of("profile-handler-rejection",
      Rejection.class);

  /**
   * Runs profiles through {@code runner} and returns the name of the primary profile, which
   * must have run.
   */
  String handle(InferenceRequest request, CycleState state, ProfileRunner runner);

  /**
   * Checked once when a configuration is loaded: the reason this handler cannot run the given
   * profiles (for example a required profile name is missing), or {@code null} when it can. The
   * loader reports the reason as an error, so such a file is refused rather than failing every
   * request.
   */
  default @org.jspecify.annotations.Nullable String checkProfiles(java.util.Set<String> profiles) {
    return null;
  }
}
