package io.epp4j.api;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicIntegerArray;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** The lifecycle calls of a routed decision reach the router once, whatever the threads. */
class RoutingDecisionLifecycleTest {
  static final Endpoint PRIMARY = Endpoint.parse("10.0.0.1:8000");
  static final Endpoint FALLBACK = Endpoint.parse("10.0.0.2:8000");

  /**
   * One thread reports a fallback and then a failure while another reports completion; the
   * completion arrives while the fallback is being reported, so it is parked for the fallback's
   * thread. Whatever the interleaving, the router hears exactly one end: two would take the
   * request off the in-flight counters twice. Each round staggers the fallback a little
   * differently so that the completion lands at different points of the hand-over.
   */
  @Test
  @Timeout(value = 120, unit = TimeUnit.SECONDS)
  void anEndParkedDuringAFallbackAndASecondEndAfterItReachTheRouterOnce() throws Exception {
    int rounds = 20_000;
    AtomicIntegerArray ends = new AtomicIntegerArray(rounds);
    AtomicInteger completing = new AtomicInteger(-1);
    RoutingDecision[] decisions = new RoutingDecision[rounds];
    for (int i = 0; i < rounds; i++) {
      int round = i;
      decisions[i] = RoutingDecision.routed("p",
          Map.of("p", new ProfileResult("p", List.of(PRIMARY, FALLBACK))),
          new RoutingDecision.Callbacks() {
            @Override
            public void fallback(RoutingDecision d, Endpoint from, Endpoint to) {
              while (completing.get() < round) {
                Thread.onSpinWait();
              }
              for (int k = round % 32; k > 0; k--) {
                Thread.onSpinWait();
              }
            }

            @Override public void firstToken(RoutingDecision d) {}

            @Override public void complete(RoutingDecision d, Usage u) {
              ends.incrementAndGet(round);
            }

            @Override public void failure(RoutingDecision d, Throwable c) {
              ends.incrementAndGet(round);
            }
          });
    }
    AtomicInteger turn = new AtomicInteger(-1);
    Thread completer = new Thread(() -> {
      for (int i = 0; i < rounds; i++) {
        while (turn.get() < i) {
          Thread.onSpinWait();
        }
        completing.set(i);
        decisions[i].onComplete(Usage.NONE);
      }
    });
    completer.start();
    RuntimeException failure = new RuntimeException("connection reset");
    for (int i = 0; i < rounds; i++) {
      turn.set(i);
      decisions[i].onFallback(FALLBACK);
      decisions[i].onFailure(failure);
      while (ends.get(i) == 0) {
        Thread.onSpinWait();
      }
    }
    completer.join(TimeUnit.SECONDS.toMillis(60));
    assertThat(completer.isAlive()).isFalse();

    int twice = 0;
    for (int i = 0; i < rounds; i++) {
      twice += ends.get(i) > 1 ? 1 : 0;
    }
    assertThat(twice).as("rounds whose end reached the router twice").isZero();
  }
}
