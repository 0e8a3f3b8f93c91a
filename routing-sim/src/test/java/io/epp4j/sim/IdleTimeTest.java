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
