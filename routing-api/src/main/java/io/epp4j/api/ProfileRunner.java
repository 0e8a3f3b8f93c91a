package io.epp4j.api;

import java.util.Set;
import org.jspecify.annotations.Nullable;

/** Lets a {@link ProfileHandler} run the configured profiles of the current cycle. */
public interface ProfileRunner {

  /** Names of the configured profiles, in configuration order. */
  Set<String> profileNames();

  /**
   * Runs a profile (filters, scorers, picker) and records its result in the decision. Running
   * the same profile twice returns the first result.
   *
   * @throws IllegalArgumentException if no profile has that name
   */
  ProfileResult run(String profile);

  /** The result of a profile that already ran in this cycle, or {@code null}. */
  @Nullable ProfileResult result(String profile);
}
