package io.epp4j.spring.gateway;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.core.Router;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.springframework.cloud.client.DefaultServiceInstance;
import org.springframework.cloud.client.ServiceInstance;
import org.springframework.cloud.client.discovery.DiscoveryClient;

@Timeout(30)
class Epp4jDiscoveryPoolTest {

  /**
   * A registry client blocked in its lookup while the context closes (an HTTP call that does not
   * heed the interrupt): the answer it brings afterwards must not reach the router, which is
   * closed right after the discovery pool.
   */
  @Test
  void aLookupThatAnswersAfterCloseDoesNotTouchTheRouter() throws Exception {
    CountDownLatch inLookup = new CountDownLatch(1);
    CountDownLatch answer = new CountDownLatch(1);
    CountDownLatch answered = new CountDownLatch(1);
    DiscoveryClient registry = new DiscoveryClient() {
      @Override
      public String description() {
        return "blocking";
      }

      @Override
      public List<ServiceInstance> getInstances(String serviceId) {
        inLookup.countDown();
        boolean interrupted = false;
        while (true) {
          try {
            answer.await();
            break;
          } catch (InterruptedException e) {
            interrupted = true; // a client that goes on reading its socket
          }
        }
        if (interrupted) {
          Thread.currentThread().interrupt();
        }
        answered.countDown();
        return List.of(new DefaultServiceInstance("a", serviceId, "10.0.0.1", 8000, false));
      }

      @Override
      public List<String> getServices() {
        return List.of("llm");
      }
    };
    try (Router router = Router.builder().build()) {
      Epp4jDiscoveryPool pool =
          new Epp4jDiscoveryPool(router, registry, "llm", Duration.ofSeconds(5));
      assertThat(inLookup.await(10, TimeUnit.SECONDS)).isTrue();
      pool.close();
      answer.countDown();
      assertThat(answered.await(10, TimeUnit.SECONDS)).isTrue();
      Thread.sleep(300); // what is left of the lookup: building the list and applying it
      assertThat(router.endpoints()).isEmpty();
    }
  }

  /** An interval under a millisecond is positive, as the property check says, and is used. */
  @Test
  void anIntervalUnderAMillisecondLooksTheServiceUp() throws Exception {
    CountDownLatch looked = new CountDownLatch(2);
    DiscoveryClient registry = new DiscoveryClient() {
      @Override
      public String description() {
        return "counting";
      }

      @Override
      public List<ServiceInstance> getInstances(String serviceId) {
        looked.countDown();
        return List.of(new DefaultServiceInstance("a", serviceId, "10.0.0.1", 8000, false));
      }

      @Override
      public List<String> getServices() {
        return List.of("llm");
      }
    };
    try (Router router = Router.builder().build();
        Epp4jDiscoveryPool pool =
            new Epp4jDiscoveryPool(router, registry, "llm", Duration.ofNanos(500_000))) {
      assertThat(looked.await(10, TimeUnit.SECONDS)).isTrue();
      assertThat(router.endpoints()).hasSize(1);
    }
  }
}
