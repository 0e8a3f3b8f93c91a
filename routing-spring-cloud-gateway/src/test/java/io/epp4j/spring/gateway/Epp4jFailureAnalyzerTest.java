package io.epp4j.spring.gateway;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;

/**
 * A startup that fails on an invalid {@code epp4j.*} property tells the user which property and
 * why in Spring Boot's "APPLICATION FAILED TO START" report, without the stack trace of bean
 * creation exceptions that buried the message before.
 */
@ExtendWith(OutputCaptureExtension.class)
class Epp4jFailureAnalyzerTest {

  private static void start(String... properties) {
    new SpringApplicationBuilder(Epp4jAutoConfiguration.class)
        .web(WebApplicationType.NONE)
        .properties("spring.main.banner-mode=off", "epp4j.metrics.enabled=false")
        .properties(properties)
        .run();
  }

  @Test
  void aConfigFileThatCannotBeReadIsReportedByPropertyWithoutAStackTrace(CapturedOutput out) {
    assertThatThrownBy(() -> start("epp4j.endpoints=127.0.0.1:9001",
        "epp4j.config-file=/no/such/epp4j-config.yaml"))
        .hasStackTraceContaining("epp4j.config-file: ");
    assertThat(out.getAll())
        .contains("APPLICATION FAILED TO START")
        .contains("epp4j.config-file: /no/such/epp4j-config.yaml: cannot read")
        .contains("Correct the property named above")
        .doesNotContain("Application run failed")
        .doesNotContain("\tat ");
  }

  @Test
  void anEndpointThatIsNotHostPortIsReportedByPropertyWithoutAStackTrace(CapturedOutput out) {
    assertThatThrownBy(() -> start("epp4j.endpoints=foo"));
    assertThat(out.getAll())
        .contains("APPLICATION FAILED TO START")
        .contains("epp4j.endpoints: 'foo' is not host:port")
        .doesNotContain("Application run failed")
        .doesNotContain("\tat ");
  }

  @Test
  void anInvalidValueIsStillAnIllegalArgumentException() {
    // callers (and the refresher) that catch IllegalArgumentException keep working
    assertThat(new Epp4jConfigurationException("epp4j.scheme must be http or https"))
        .isInstanceOf(IllegalArgumentException.class);
  }
}
