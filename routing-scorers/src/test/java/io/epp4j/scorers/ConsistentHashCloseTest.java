package io.epp4j.scorers;

import static io.epp4j.scorers.MaglevOffRouteTest.holdBuilder;
import static io.epp4j.scorers.RingHashOffRouteTest.weighted;
import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.api.Endpoint;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Supplier;
import org.junit.jupiter.api.Test;

/**
 * Closing a picker while its builder thread builds a table of millions of entries: the build
 * stops at its next look at whether the picker closed, installs nothing, and the picker holds
 * no table afterwards.
 */
class ConsistentHashCloseTest {

  /** Counts a build's looks at whether the picker closed; parks the builder at one of them. */
  static final class Looks implements Runnable {
    final AtomicInteger count = new AtomicInteger();
    final int parkAt;
    final CountDownLatch parked = new CountDownLatch(1);
    final CountDownLatch release = new CountDownLatch(1);

    Looks(int parkAt) {
      this.parkAt = parkAt;
    }

    @Override
    public void run() {
      if (count.incrementAndGet() == parkAt) {
        parked.countDown();
        try {
          release.await(60, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt(); // close() interrupts the builder: go on
        }
      }
    }
  }

  /** Announces {@code pool} while the builder is held, so that it builds the whole pool once. */
  static void announce(ConsistentHashPicker picker, List<Endpoint> pool) {
    CountDownLatch hold = holdBuilder(picker);
    pool.forEach(picker::onEndpointAdded);
    hold.countDown();
  }

  /** Looks a whole build of {@code pool} takes; checks the table is then held. */
  static int looksOfAWholeBuild(Supplier<ConsistentHashPicker> pickers, List<Endpoint> pool)
      throws Exception {
    ConsistentHashPicker picker = pickers.get();
    Looks looks = new Looks(0);
    picker.buildCheckHook = looks;
    announce(picker, pool);
    assertThat(picker.awaitBuilds(60, TimeUnit.SECONDS)).as("whole build").isTrue();
    assertThat(picker.heldTables()).as("tables held after a whole build").isEqualTo(1);
    picker.close();
    assertThat(picker.heldTables()).as("tables held after close").isZero();
    return looks.count.get();
  }

  static void closeDuringTheBuild(Supplier<ConsistentHashPicker> pickers, List<Endpoint> pool)
      throws Exception {
    int whole = looksOfAWholeBuild(pickers, pool);
    assertThat(whole).as("looks of a whole build").isGreaterThan(100);
    // early (making entries), midway, and at the last look (the sort's end for a ring)
    for (int parkAt : new int[] {1, whole / 2, whole}) {
      ConsistentHashPicker picker = pickers.get();
      Looks looks = new Looks(parkAt);
      picker.buildCheckHook = looks;
      announce(picker, pool);
      assertThat(looks.parked.await(60, TimeUnit.SECONDS)).as("build under way").isTrue();
      picker.close();
      looks.release.countDown();
      assertThat(picker.awaitBuilds(60, TimeUnit.SECONDS)).as("builder stopped").isTrue();
      assertThat(looks.count.get()).as("looks after close, parked at %d of %d", parkAt, whole)
          .isEqualTo(parkAt);
      assertThat(picker.heldTables()).as("tables held after close, parked at %d", parkAt)
          .isZero();
    }
  }

  @Test
  void closingARingHashPickerStopsItsBuildAndInstallsNothing() throws Exception {
    closeDuringTheBuild(RingHashPicker::create,
        List.of(weighted("10.4.0.1:8000", 1), weighted("10.4.0.2:8000", 1_000_000)));
  }

  @Test
  void closingAMaglevPickerStopsItsBuildAndInstallsNothing() throws Exception {
    closeDuringTheBuild(
        () -> new MaglevPicker(HashKeySource.SESSION, MaglevPicker.MAX_TABLE_SIZE, 0, 1),
        List.of(weighted("10.5.0.1:8000", 1), weighted("10.5.0.2:8000", 3),
            weighted("10.5.0.3:8000", 7)));
  }

  /**
   * A route that still reaches a closed picker (a request that read the configuration before a
   * reload retired it) gets an answer, but the table it builds or reads is not kept.
   */
  static void aRouteAfterCloseCachesNothing(ConsistentHashPicker picker) throws Exception {
    List<Endpoint> small = List.of(weighted("10.6.0.1:8000", 1), weighted("10.6.0.2:8000", 2));
    List<Candidate> all = RingHashOffRouteTest.candidates(small);
    picker.close();
    assertThat(picker.pick(MaglevOffRouteTest.session("alice"), TestCandidates.state(), all,
        new double[2])).hasSize(1);
    assertThat(picker.heldTables()).as("tables held after a route past close").isZero();
  }

  @Test
  void aRingHashPickerClosedKeepsNoTableARouteBuilds() throws Exception {
    aRouteAfterCloseCachesNothing(RingHashPicker.create());
  }

  @Test
  void aMaglevPickerClosedKeepsNoTableARouteBuilds() throws Exception {
    aRouteAfterCloseCachesNothing(new MaglevPicker(HashKeySource.SESSION, 65_537, 0, 1));
  }
}
