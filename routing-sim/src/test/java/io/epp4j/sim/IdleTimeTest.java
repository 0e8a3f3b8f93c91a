package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.List;
import org.junit.jupiter.api.Test;

/** Simulated time in which nothing happens costs no scrapes, and skipping them changes nothing. */
class IdleTimeTest {
  private static final HardwareProfile HW = HardwareProfile.qwen3H100Mps6();
  private static final long INTERVAL = 50_000_000L;

  private static Simulation.Settings settings() {
    return new Simulation.Settings(HW, 6, 1, INTERVAL, null);
  }

  /** Ten short requests arriving about 1,000 s apart: the cluster is idle almost all the time. */
  private static SharedPrefixWorkload slowPoisson() {
    return new SharedPrefixWorkload(2, 2, LengthDist.fixed(500), LengthDist.fixed(100),
        LengthDist.fixed(20), 10, 1, 0.001);
  }

  @Test
  void idleTimeIsNotScrapedTickByTick() {
    Simulation sim = new Simulation(settings(), slowPoisson(), Policy.ROUND_ROBIN, null);
    PolicyResult r = sim.run();
    assertThat(r.requests()).isEqualTo(10);
    long ticks = Math.round(r.simulatedSeconds() * 1e9 / INTERVAL);
    assertThat(ticks).isGreaterThan(10_000);
    // each request is served in well under a second (20 output tokens), a few ticks of its own,
    // and every gap between two arrivals costs at most two: far below 1% of the ticks
    assertThat(sim.scrapes()).isLessThan(ticks / 100);
  }

  /**
   * Three gateways sharing hints: the bus flushes every 2 ms while a request is in flight, and
   * neither it nor the scrapes step through the idle time between the requests.
   */
  @Test
  void replicatedGatewaysDoNotStepThroughIdleTime() {
    Simulation sim = new Simulation(settings(), slowPoisson(), Policy.EPP_APPROXIMATE, null)
        .gateways(3, true, 2_000_000L);
    PolicyResult r = sim.run();
    assertThat(r.requests()).isEqualTo(10);
    long scrapeTicks = Math.round(r.simulatedSeconds() * 1e9 / INTERVAL);
    long flushTicks = Math.round(r.simulatedSeconds() * 1e9 / HintBus.FLUSH_INTERVAL_NANOS);
    assertThat(flushTicks).isGreaterThan(1_000_000);
    // each request is in flight for well under a second (500 flushes of 2 ms) and every gap
    // costs at most two of each: below 1% of the ticks
    assertThat(sim.scrapes()).isLessThan(scrapeTicks / 100);
    assertThat(sim.flushes()).isGreaterThan(0).isLessThan(flushTicks / 100);
  }

  /**
   * Leaving out idle scrapes and flushes changes nothing with replicated gateways either: the
   * heartbeats they would have made fall where they would have, with the delivery delay 0 (hints
   * applied at once), 2 ms (one flush interval) and 5 ms.
   */
  @Test
  void skippingIdleFlushesChangesNoOutcome() {
    MultiTurnWorkload dialogs = new MultiTurnWorkload(6, 4, 1000, LengthDist.fixed(300),
        LengthDist.fixed(100), 20, 30);
    // about 20 s between arrivals: every one of them after an idle stretch, in a run short
    // enough to flush tick by tick
    SharedPrefixWorkload sparse = new SharedPrefixWorkload(2, 2, LengthDist.fixed(500),
        LengthDist.fixed(100), LengthDist.fixed(20), 10, 1, 0.05);
    for (Workload w : List.of(sparse, dialogs)) {
      for (Policy p : List.of(Policy.EPP_APPROXIMATE, Policy.EPP4J)) {
        for (long delay : new long[] {0, 2_000_000L, 5_000_000L}) {
          String what = w.name() + " / " + p.name() + " / delay " + delay;
          Simulation skipping = new Simulation(settings(), w, p, null).gateways(3, true, delay);
          PolicyResult a = skipping.run();
          Simulation everyTick = new Simulation(settings(), w, p, null).gateways(3, true, delay)
              .scrapeEveryTick();
          PolicyResult b = everyTick.run();
          assertThat(a.sameOutcomeAs(b)).as(what).isTrue();
          assertThat(skipping.flushes()).as(what).isLessThan(everyTick.flushes() / 10);
        }
      }
    }
  }

  @Test
  void skippingIdleScrapesChangesNoOutcome() {
    // think times of 20 s between turns of a few dialogs: long idle stretches between busy ones
    MultiTurnWorkload dialogs = new MultiTurnWorkload(6, 4, 1000, LengthDist.fixed(300),
        LengthDist.fixed(100), 20, 30);
    for (Workload w : List.of(slowPoisson(), dialogs)) {
      for (Policy p : List.of(Policy.ROUND_ROBIN, Policy.EPP_APPROXIMATE, Policy.EPP_PRECISE,
          Policy.EPP4J)) {
        Simulation skipping = new Simulation(settings(), w, p, null);
        PolicyResult a = skipping.run();
        Simulation everyTick = new Simulation(settings(), w, p, null).scrapeEveryTick();
        PolicyResult b = everyTick.run();
        assertThat(a.sameOutcomeAs(b)).as(w.name() + " / " + p.name()).isTrue();
        assertThat(skipping.scrapes()).as(w.name() + " / " + p.name())
            .isLessThan(everyTick.scrapes());
      }
    }
  }
}
