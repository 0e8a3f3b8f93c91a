package io.epp4j.scorers;

import static io.epp4j.scorers.MaglevOffRouteTest.LARGE;
import static io.epp4j.scorers.MaglevOffRouteTest.envoyTable;
import static io.epp4j.scorers.MaglevOffRouteTest.host;
import static io.epp4j.scorers.MaglevOffRouteTest.session;
import static io.epp4j.scorers.RingHashOffRouteTest.candidates;
import static io.epp4j.scorers.TestCandidates.state;
import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Candidate;
import io.epp4j.api.Endpoint;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * A table too large to build on the route is built on the picker's one builder thread. Filters
 * that hand each request another subset of the pool (a prefix or session filter keeping the few
 * endpoints that qualify) asked for one build per subset, queued without bound behind a build
 * that takes up to a second: the queue, and the memory it holds, grew for as long as requests
 * came faster than builds, although the picker caches only four tables. Builds waiting are now
 * at most as many as the tables cached, and a subset whose build was not queued is asked for
 * again by its next route, so it still gets its exact table.
 */
class ConsistentHashQueuedBuildsTest {

  @Test
  void buildsQueuedForFilteredSubsetsStayWithinTheTablesCached() throws Exception {
    MaglevPicker picker = new MaglevPicker(HashKeySource.SESSION, LARGE, 0, 1);
    List<Endpoint> pool = new ArrayList<>();
    for (int i = 1; i <= 8; i++) {
      pool.add(Endpoint.parse("10.7.0." + i + ":8000"));
    }
    List<List<Endpoint>> subsets = new ArrayList<>();
    for (int i = 0; i < pool.size(); i++) {
      for (int j = i + 1; j < pool.size(); j++) {
        subsets.add(List.of(pool.get(i), pool.get(j)));
      }
    }
    try {
      CountDownLatch hold = MaglevOffRouteTest.holdBuilder(picker);
      for (List<Endpoint> subset : subsets) {
        List<Candidate> c = candidates(subset);
        List<Candidate> picked = picker.pick(session("k"), state(), c, new double[c.size()]);
        assertThat(c).as("answered from a stand-in meanwhile").contains(picked.get(0));
      }
      assertThat(picker.queuedListBuilds()).as("builds waiting for %s subsets", subsets.size())
          .isLessThanOrEqualTo(4);
      hold.countDown();
      assertThat(picker.awaitBuilds(60, TimeUnit.SECONDS)).isTrue();

      // the last subset's build was not queued while the builder was busy: its next route asks
      // again, and once that build is done routes place keys as Envoy's table of the subset
      List<Endpoint> last = subsets.get(subsets.size() - 1);
      List<Candidate> c = candidates(last);
      picker.pick(session("k"), state(), c, new double[c.size()]);
      assertThat(picker.awaitBuilds(60, TimeUnit.SECONDS)).isTrue();
      MaglevPicker.MaglevTable envoy = envoyTable(last, LARGE);
      for (int i = 0; i < 50; i++) {
        String key = "user-" + i;
        assertThat(picker.pick(session(key), state(), c, new double[c.size()]).get(0).id())
            .as(key).isEqualTo(host(envoy, last, key));
      }
    } finally {
      picker.close();
    }
  }
}
