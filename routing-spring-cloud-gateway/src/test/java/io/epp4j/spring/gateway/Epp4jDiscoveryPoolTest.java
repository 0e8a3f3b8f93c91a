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

  /**
   * A registry client that answers no list, or a list with a null entry, is a lookup that gave
   * nothing usable: the pool is kept (or the entry left out), and the lookups go on. A
   * NullPointerException out of the lookup's task cancelled every later lookup of the executor,
   * silently, and the pool stopped following the registry for good.
   */
  @Test
  void aRegistryAnsweringNoListOrANullInstanceDoesNotStopTheLookups() throws Exception {
    java.util.concurrent.atomic.AtomicInteger lookups = new java.util.concurrent.atomic.AtomicInteger();
    CountDownLatch fourth = new CountDownLatch(1);
    ServiceInstance a = new DefaultServiceInstance("a", "llm", "10.0.0.1", 8000, false);
    ServiceInstance b = new DefaultServiceInstance("b", "llm", "10.0.0.2", 8000, false);
    DiscoveryClient registry = answeringNull(lookups, fourth, a, b);
    try (Router router = Router.builder().build();
        Epp4jDiscoveryPool pool =
            new Epp4jDiscoveryPool(router, registry, "llm", Duration.ofMillis(1))) {
      assertThat(fourth.await(10, TimeUnit.SECONDS)).as("lookups after the null answers")
          .isTrue();
      // the fourth lookup has been asked; its answer is applied after the registry returns it
      long applied = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
      while (router.endpoints().size() < 2 && System.nanoTime() < applied) {
        Thread.sleep(5);
      }
      pool.close();
      assertThat(router.endpoints()).extracting(c -> c.endpoint().id())
          .containsExactlyInAnyOrder("10.0.0.1:8000", "10.0.0.2:8000");
    }
    // step by step, by hand (the pool's own next lookup is a day away): no list keeps the pool,
    // a null entry is left out. A registry of its own: the closed pool's last lookup may still
    // be asking the first one (close() does not wait for it, only keeps its answer out)
    try (Router router = Router.builder().build();
        Epp4jDiscoveryPool pool = new Epp4jDiscoveryPool(router,
            answeringNull(new java.util.concurrent.atomic.AtomicInteger(), new CountDownLatch(1),
                a, b), "llm", Duration.ofDays(1))) {
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
      while (router.endpoints().isEmpty() && System.nanoTime() < deadline) {
        Thread.sleep(5); // the first lookup, made at once on the pool's thread
      }
      assertThat(router.endpoints()).extracting(c -> c.endpoint().id())
          .containsExactly("10.0.0.1:8000");
      pool.refresh();
      assertThat(router.endpoints()).extracting(c -> c.endpoint().id())
          .containsExactly("10.0.0.1:8000");
      pool.refresh();
      assertThat(router.endpoints()).extracting(c -> c.endpoint().id())
          .containsExactly("10.0.0.2:8000");
    }
  }

  /**
   * A registry whose lookups answer, in turn: a; no list (null); b and a null entry; then a and
   * b. {@code fourth} opens at the fourth lookup.
   */
  private static DiscoveryClient answeringNull(java.util.concurrent.atomic.AtomicInteger lookups,
      CountDownLatch fourth, ServiceInstance a, ServiceInstance b) {
    return new DiscoveryClient() {
      @Override
      public String description() {
        return "answering null";
      }

      @Override
      public List<ServiceInstance> getInstances(String serviceId) {
        int n = lookups.incrementAndGet();
        if (n >= 4) {
          fourth.countDown();
        }
        return switch (n) {
          case 1 -> List.of(a);
          case 2 -> null; // keeps a
          case 3 -> java.util.Arrays.asList(b, null); // b, the null entry left out
          default -> List.of(a, b);
        };
      }

      @Override
      public List<String> getServices() {
        return List.of("llm");
      }
    };
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
