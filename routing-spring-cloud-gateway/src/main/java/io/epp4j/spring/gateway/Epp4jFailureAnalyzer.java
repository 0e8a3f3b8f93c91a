package io.epp4j.spring.gateway;

import org.jspecify.annotations.Nullable;
import org.springframework.boot.diagnostics.AbstractFailureAnalyzer;
import org.springframework.boot.diagnostics.FailureAnalysis;

/**
 * Reports a startup that failed on an invalid {@code epp4j.*} property as Spring Boot reports
 * its own configuration errors: the message naming the property under "Description", what to do
 * under "Action", and no stack trace of the bean creation exceptions that wrap it (registered in
 * {@code META-INF/spring.factories}).
 */
public final class Epp4jFailureAnalyzer
    extends AbstractFailureAnalyzer<Epp4jConfigurationException> {

  @Override
  protected @Nullable FailureAnalysis analyze(Throwable rootFailure,
      Epp4jConfigurationException cause) {
    return new FailureAnalysis(String.valueOf(cause.getMessage()),
        "Correct the property named above: the epp4j.* properties are listed in the README of "
            + "routing-spring-cloud-gateway; a config file's errors name the file, the plugin and "
            + "the field.",
        cause);
  }
}
