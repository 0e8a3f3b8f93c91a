package io.epp4j.api;

import java.util.Objects;

/**
 * Why a request was not routed, with the HTTP status a gateway should answer.
 *
 * @param reason  the kind of rejection
 * @param message a human-readable explanation (never contains prompt text)
 */
public record Rejection(Reason reason, String message) {

  /** Kinds of rejection and their HTTP status. */
  public enum Reason {
    /** The request body or fields are invalid: 400. */
    INVALID_REQUEST(400),
    /** The request was sheddable and the pool is saturated: 429. */
    SHED(429),
    /** No endpoint exists or none passed the filters: 503. */
    NO_ENDPOINTS(503);

    private final int httpStatus;

    Reason(int httpStatus) {
      this.httpStatus = httpStatus;
    }

    public int httpStatus() {
      return httpStatus;
    }
  }

  public Rejection {
    Objects.requireNonNull(reason, "reason");
    Objects.requireNonNull(message, "message");
  }

  public int httpStatus() {
    return reason.httpStatus();
  }
}
