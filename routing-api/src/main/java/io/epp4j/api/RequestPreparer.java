package io.epp4j.api;

import java.util.List;

/**
 * Reads a request before it is scheduled and publishes what it finds for the plugins of the
 * cycle, as request attributes ({@link CycleState#putRequestAttribute}) or typed values
 * ({@link CycleState#put}): the upstream EPP's request-header processors and request data
 * producers, such as {@code session-id-producer} and {@code agent-identity}. Every plugin of a
 * configuration that implements it is asked, in file order, before the admitters and before any
 * profile runs, on every request. Runs on the request path: no locks, no I/O, no per-request
 * logging.
 */
public interface RequestPreparer extends Plugin {

  /**
   * Publishes what {@code request} carries into {@code state}.
   *
   * @param candidates the endpoints the request may go to (the pool, or the subset the gateway
   *     allowed), with their latest metrics, before any filter
   */
  void prepare(InferenceRequest request, CycleState state, List<Candidate> candidates);
}
