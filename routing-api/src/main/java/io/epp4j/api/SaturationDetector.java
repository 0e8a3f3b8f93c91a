package io.epp4j.api;

import java.util.List;

/**
 * Tells how saturated the pool is, for shedding: the upstream EPP's saturation detectors other
 * than its utilization detector (whose rule the router has built in), such as
 * {@code concurrency-detector}. A configuration names one in its {@code saturationDetector}
 * section ({@code flowControl.saturationDetector}, or the former top-level one); while it is
 * active, a sheddable request (priority below 0) is rejected with 429 when
 * {@link #saturation} is 1 or more. Runs on the request path: no locks, no I/O.
 */
public interface SaturationDetector extends Plugin {

  /**
   * The pool's saturation: 0 idle, 1 or more saturated.
   *
   * @param pool every endpoint of the pool (the whole pool, whatever subset the request may go
   *     to), with its latest metrics and the router's in-flight counts; also the endpoints whose
   *     engine sleeps ({@link EndpointMetrics#asleep()}), which serve nothing while the requests
   *     go to the others: the router's built-in rule and {@code concurrency-detector} count each
   *     as saturated, and a detector that took one for idle capacity would hide the load of the
   *     awake endpoints
   */
  double saturation(List<Candidate> pool);
}
