package io.epp4j.api;

import java.util.List;
import org.jspecify.annotations.Nullable;

/**
 * Decides, before any profile runs, whether a request is admitted at all (upstream EPP's
 * admission plugins, such as {@code probabilistic-admitter}). Every admitter a configuration
 * declares is consulted, in file order, after the router's own saturation check; the first
 * refusal rejects the request with {@link Rejection.Reason#SHED} (429). Runs on the request path:
 * no locks, no I/O, no per-request logging.
 */
public interface Admitter extends Plugin {

  /**
   * Returns {@code null} to admit the request, else the reason it is refused (a short text that
   * names no prompt content; it becomes the rejection message).
   *
   * @param pool every endpoint of the pool, with its latest metrics
   */
  @Nullable String refuse(InferenceRequest request, CycleState state, List<Candidate> pool);
}
