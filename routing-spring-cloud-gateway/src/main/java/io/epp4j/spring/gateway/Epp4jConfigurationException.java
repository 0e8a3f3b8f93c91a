package io.epp4j.spring.gateway;

/**
 * An {@code epp4j.*} property (or a route's {@code Epp4j} filter argument) that cannot be used;
 * the message starts with the property's full name. At startup {@link Epp4jFailureAnalyzer}
 * turns it into Spring Boot's "APPLICATION FAILED TO START" report, so the message is what the
 * user reads instead of a stack trace of bean creation exceptions.
 */
public class Epp4jConfigurationException extends IllegalArgumentException {
  private static final long serialVersionUID = 1L;

  /** An invalid setting; {@code message} starts with the property's name. */
  public Epp4jConfigurationException(String message) {
    super(message);
  }

  /** An invalid setting found through {@code cause}, whose message {@code message} includes. */
  public Epp4jConfigurationException(String message, Throwable cause) {
    super(message, cause);
  }
}
