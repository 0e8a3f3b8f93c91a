package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;

import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.core.Router;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * llm-d's precise-prefix-cache-scorer names speculative indexing {@code speculativeIndexing}
 * (bool) and {@code speculativeTTL} (Go duration), its README's "Speculative Indexing" section;
 * epp4j's own names are {@code speculative} and {@code speculativeTtlMs}.
 */
class UpstreamSpeculativeIndexingTest {
  static final List<Endpoint> POOL = List.of(Endpoint.parse("10.0.0.1:8000"),
      Endpoint.parse("10.0.0.2:8000"));

  static String config(String parameters) {
    return """
        apiVersion: llm-d.ai/v1alpha1
        kind: EndpointPickerConfig
        plugins:
          - type: precise-prefix-cache-scorer
            parameters:
        %s
        schedulingProfiles:
          - name: default
            plugins:
              - pluginRef: precise-prefix-cache-scorer
        """.formatted(parameters.indent(6).stripTrailing());
  }

  static InferenceRequest prompt() {
    int[] ids = new int[64];
    for (int i = 0; i < ids.length; i++) {
      ids[i] = 1000 + i;
    }
    return InferenceRequest.builder().model("m").tokenIds(ids).build();
  }

  @Test
  void speculativeIndexingFalseRecordsNoSpeculativeEntries() {
    KvBlockIndex index = KvBlockIndex.builder().defaultBlockSize(16).build();
    try (Router r = Router.builder().endpoints(POOL)
        .configYaml(config("speculativeIndexing: false"), "p.yaml")
        .service(KvBlockIndex.class, index).randomSeed(1).build()) {
      assertThat(r.route(prompt()).isRouted()).isTrue();
      assertThat(index.metrics().speculativeBlocks()).as("speculative entries recorded").isZero();
      assertThat(r.config().warnings())
          .noneSatisfy(w -> assertThat(w).contains("'speculativeIndexing' is not used"));
    }
  }

  @Test
  void speculativeTtlIsTheLifetimeOfTheEntries() {
    try (Router r = Router.builder().endpoints(POOL)
        .configYaml(config("""
            speculativeIndexing: true
            speculativeTTL: "500ms"
            kvEvents: {mode: none}"""), "p.yaml").randomSeed(1).build()) {
      PrecisePrefixCacheScorer s = (PrecisePrefixCacheScorer) r.config().plugins()
          .get("precise-prefix-cache-scorer");
      assertThat(s.index().speculativeTtlNanos()).as("speculative TTL").isEqualTo(500_000_000L);
      assertThat(r.config().warnings())
          .noneSatisfy(w -> assertThat(w).contains("'speculativeTTL' is not used"));
    }
  }

  /**
   * A Go duration that is not a whole number of milliseconds is rounded up to the next one.
   * Before, it was rounded down, so a positive lifetime under a millisecond became 0, which
   * turns speculative entries off, without a word.
   */
  @Test
  void aSpeculativeTtlUnderAMillisecondIsRoundedUpNotReadAsZero() {
    for (String[] c : new String[][] {{"500us", "1"}, {"0.5ms", "1"}, {"1ns", "1"},
        {"1.5ms", "2"}, {"2ms", "2"}}) {
      try (Router r = Router.builder().endpoints(POOL)
          .configYaml(config("""
              speculativeIndexing: true
              speculativeTTL: "%s"
              kvEvents: {mode: none}""".formatted(c[0])), "p.yaml").randomSeed(1).build()) {
        PrecisePrefixCacheScorer s = (PrecisePrefixCacheScorer) r.config().plugins()
            .get("precise-prefix-cache-scorer");
        long ms = Long.parseLong(c[1]);
        assertThat(s.index().speculativeTtlNanos()).as(c[0]).isEqualTo(ms * 1_000_000L);
        assertThat(r.route(prompt()).isRouted()).isTrue();
        if (ms > 0) {
          assertThat(s.index().metrics().speculativeBlocks()).as(c[0] + ": speculative entries")
              .isPositive();
        } else {
          assertThat(s.index().metrics().speculativeBlocks()).as(c[0] + ": speculation off")
              .isZero();
        }
      }
    }
  }

  /**
   * llm-d takes a {@code speculativeTTL} that is not positive for its default, 2 s (its
   * {@code buildSpeculativeCache}: {@code if parsed > 0 { ttl = parsed }}). Before, {@code 0s}
   * turned speculative entries off and {@code -1s} was refused as not a duration, unlike llm-d
   * and without a word for the first.
   */
  @Test
  void aSpeculativeTtlThatIsNotPositiveIsLlmdsDefaultWithANotice() {
    for (String ttl : List.of("0", "0s", "-0s", "-1s", "-1.5ms")) {
      try (Router r = Router.builder().endpoints(POOL)
          .configYaml(config("""
              speculativeIndexing: true
              speculativeTTL: "%s"
              kvEvents: {mode: none}""".formatted(ttl)), "p.yaml").randomSeed(1).build()) {
        PrecisePrefixCacheScorer s = (PrecisePrefixCacheScorer) r.config().plugins()
            .get("precise-prefix-cache-scorer");
        assertThat(s.index().speculativeTtlNanos()).as(ttl).isEqualTo(2_000_000_000L);
        assertThat(r.route(prompt()).isRouted()).isTrue();
        assertThat(s.index().metrics().speculativeBlocks()).as(ttl + ": speculative entries")
            .isPositive();
        assertThat(r.config().warnings()).as(ttl).anySatisfy(w -> assertThat(w)
            .contains("'speculativeTTL' is '" + ttl + "'").contains("2s")
            .contains("speculativeIndexing: false"));
      }
    }
    for (String bad : List.of("-", "-x", "--1s", "-+1s", "-1")) {
      Throwable t = catchThrowable(() -> Router.builder().endpoints(POOL)
          .configYaml(config("""
              speculativeTTL: "%s"
              kvEvents: {mode: none}""".formatted(bad)), "p.yaml").build());
      assertThat(t).as(bad).isNotNull();
      assertThat(t.getMessage()).as(bad).contains("'speculativeTTL'").contains("'" + bad + "'");
    }
  }

  /** llm-d reads an empty {@code speculativeTTL} as its default; it was refused here. */
  @Test
  void anEmptySpeculativeTtlIsTheDefault() {
    try (Router r = Router.builder().endpoints(POOL)
        .configYaml(config("""
            speculativeIndexing: true
            speculativeTTL: ""
            kvEvents: {mode: none}"""), "p.yaml").randomSeed(1).build()) {
      PrecisePrefixCacheScorer s = (PrecisePrefixCacheScorer) r.config().plugins()
          .get("precise-prefix-cache-scorer");
      assertThat(s.index().speculativeTtlNanos()).isEqualTo(2_000_000_000L);
      assertThat(r.config().warnings()).noneMatch(w -> w.contains("speculativeTTL"));
    }
  }

  /**
   * With a {@code KvBlockIndex} service, whose builder sets the lifetime, a {@code speculativeTTL}
   * that means the default names no other lifetime: it loads, where it must not be refused as a
   * 2 s that differs from the index's.
   */
  @Test
  void aSpeculativeTtlThatMeansTheDefaultLoadsWithAnIndexService() {
    for (String ttl : List.of("", "0s", "-1s")) {
      KvBlockIndex index = KvBlockIndex.builder().defaultBlockSize(16)
          .speculativeTtl(java.time.Duration.ofSeconds(5)).build();
      try (Router r = Router.builder().endpoints(POOL)
          .configYaml(config("speculativeIndexing: true\nspeculativeTTL: \"" + ttl + "\""),
              "p.yaml")
          .service(KvBlockIndex.class, index).randomSeed(1).build()) {
        assertThat(index.speculativeTtlNanos()).as(ttl).isEqualTo(5_000_000_000L);
        assertThat(r.route(prompt()).isRouted()).isTrue();
        assertThat(index.metrics().speculativeBlocks()).as(ttl + ": speculative entries")
            .isPositive();
      }
    }
  }

  @Test
  void aSpeculativeTtlAboveTheLimitIsRefusedNamingSpeculativeTtl() {
    Throwable t = catchThrowable(() -> Router.builder().endpoints(POOL)
        .configYaml(config("""
            speculativeTTL: "9000h"
            kvEvents: {mode: none}"""), "p.yaml").build());
    assertThat(t).as("a lifetime of 375 days").isNotNull();
    assertThat(t.getMessage()).contains("speculativeTTL").contains("365 days")
        .doesNotContain("speculativeTtlMs");
  }
}
