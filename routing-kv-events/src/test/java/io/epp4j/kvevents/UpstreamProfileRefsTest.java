package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.core.Router;
import org.junit.jupiter.api.Test;

/**
 * Upstream's SchedulerProfile.AddPlugins takes the filters, scorers and picker among a
 * profile's plugins and passes over any other plugin a profile names (llm-d v0.8.0's
 * deploy/config/epp-precise-prefix-cache-config.yaml lists its tokenizer in the profile; the
 * EPP's request-attribute-reporter integration config lists openai-parser).
 */
class UpstreamProfileRefsTest {
  @Test
  void llmd080PreciseConfigWithItsTokenizerInTheProfileLoads() {
    String name = "llmd-v0.8.0-epp-precise-prefix-cache-config.yaml";
    try (Router r = Router.builder().endpoints(UpstreamExampleConfigsTest.pool(3))
        .configYaml(UpstreamExampleConfigsTest.upstream(name), name)
        .service(KvBlockIndex.class, KvBlockIndex.builder().defaultBlockSize(64).build())
        .randomSeed(7).build()) {
      assertThat(UpstreamExampleConfigsTest.shape(r, "default")).isEqualTo("filters=[DecodeFilter]"
          + " scorers={precise-prefix-cache-scorer=2.0, kv-cache-utilization-scorer=1.0,"
          + " queue-scorer=1.0} picker=MaxScorePicker");
      assertThat(r.config().warnings()).anySatisfy(w -> assertThat(w)
          .contains("pluginRef 'tokenizer'").contains("not a filter, scorer or picker"));
    }
  }
}
