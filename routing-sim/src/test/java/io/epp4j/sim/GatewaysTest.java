package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import org.junit.jupiter.api.Test;

/** Several gateways, each with its own router, in front of one set of replicas. */
class GatewaysTest {
  private static final HardwareProfile HW = HardwareProfile.qwen3H100Mps6();
  private static final long TWO_MS = 2_000_000L;

  private static Simulation.Settings settings() {
    return new Simulation.Settings(HW, 6, 1, 50_000_000L, null);
  }

  /** 12 groups of 4 users, 3000-token system prompts, 24 clients: prefixes matter. */
  private static SharedPrefixWorkload sharedPrefix() {
    return new SharedPrefixWorkload(12, 4, LengthDist.fixed(3000), LengthDist.parse("100-300"),
        LengthDist.parse("20-60"), 300, 24, 0);
  }

  @Test
  void oneGatewayRoutesExactlyAsTheSingleRouterDoes() {
    for (Policy p : new Policy[] {Policy.EPP_APPROXIMATE, Policy.EPP4J}) {
      PolicyResult plain = new Simulation(settings(), sharedPrefix(), p, null).run();
      PolicyResult one = new Simulation(settings(), sharedPrefix(), p, null)
          .gateways(1, true, TWO_MS).run();
      assertThat(one.prefixCacheHitRate()).isEqualTo(plain.prefixCacheHitRate());
      assertThat(one.ttftP95Ms()).isEqualTo(plain.ttftP95Ms());
      assertThat(one.evictions()).isEqualTo(plain.evictions());
    }
  }

  /**
   * Four independent routers each see a quarter of the traffic, so a group's prompt is sent to
   * up to four replicas; shared without delay, every router knows what the single router would,
   * so sharing must win back most (here: more than half) of what independence lost.
   */
  @Test
  void sharingWinsBackWhatIndependentGatewaysLose() {
    for (Policy p : new Policy[] {Policy.EPP_APPROXIMATE, Policy.EPP4J}) {
      double single = new Simulation(settings(), sharedPrefix(), p, null).run()
          .prefixCacheHitRate();
      double independent = new Simulation(settings(), sharedPrefix(), p, null)
          .gateways(4, false, 0).run().prefixCacheHitRate();
      double shared = new Simulation(settings(), sharedPrefix(), p, null)
          .gateways(4, true, 0).run().prefixCacheHitRate();
      double delayed = new Simulation(settings(), sharedPrefix(), p, null)
          .gateways(4, true, TWO_MS).run().prefixCacheHitRate();
      assertThat(independent).as(p.name() + " independent").isLessThan(single);
      assertThat(shared - independent).as(p.name() + " recovered")
          .isGreaterThan((single - independent) / 2);
      assertThat(delayed).as(p.name() + " delayed").isGreaterThan(independent);
    }
  }
}
