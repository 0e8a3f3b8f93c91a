package io.epp4j.api;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicLong;
import java.util.logging.Handler;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

class HeaderChecksTest {
  final Logger log = Logger.getLogger(HeaderChecksTest.class.getName() + ".refusals");
  final List<String> logged = new CopyOnWriteArrayList<>();
  final Handler capture = new Handler() {
    @Override
    public void publish(LogRecord record) {
      logged.add(record.getMessage());
    }

    @Override
    public void flush() {}

    @Override
    public void close() {}
  };
  final AtomicLong now = new AtomicLong(1_000);
  final HeaderChecks.Refusals refusals = new HeaderChecks.Refusals(log, now::get);

  {
    log.setUseParentHandlers(false);
    log.addHandler(capture);
  }

  @AfterEach
  void detach() {
    log.removeHandler(capture);
  }

  @Test
  void tokensAreLettersDigitsAndTheRfcSymbols() {
    assertThat(HeaderChecks.isToken("x-Session_id.2")).isTrue();
    assertThat(HeaderChecks.isToken("!#$%&'*+-.^_`|~")).isTrue();
    assertThat(HeaderChecks.isToken("")).isFalse();
    assertThat(HeaderChecks.isToken("x bad")).isFalse();
    assertThat(HeaderChecks.isToken("x:y")).isFalse();
    assertThat(HeaderChecks.isToken(":path")).isFalse();
    assertThat(HeaderChecks.isToken("x-\u00e9")).isFalse();
    assertThat(HeaderChecks.isToken("x\r\ny")).isFalse();
  }

  @Test
  void valuesMayNotHoldControlsButHtab() {
    assertThat(HeaderChecks.isValidValue("a b\tc \u00e9")).isTrue();
    assertThat(HeaderChecks.isValidValue("")).isTrue();
    assertThat(HeaderChecks.isValidValue("a\r\nb")).isFalse();
    assertThat(HeaderChecks.isValidValue("v\n")).isFalse();
    assertThat(HeaderChecks.isValidValue("a\u0000")).isFalse();
    assertThat(HeaderChecks.isValidValue("a\u001b")).isFalse();
    assertThat(HeaderChecks.isValidValue("a\u007f")).isFalse();
    assertThat(HeaderChecks.whyInvalidValue("ab\rc")).isEqualTo("U+000D at index 2");
    assertThat(HeaderChecks.whyNotToken("x bad")).isEqualTo("U+0020 at index 1");
    assertThat(HeaderChecks.whyNotToken("")).isEqualTo("it is empty");
  }

  @Test
  void quotingEscapesControlsAndCutsLongNames() {
    assertThat(HeaderChecks.quoted("x\r\n'y")).isEqualTo("'x\\u000D\\u000A\\'y'");
    assertThat(HeaderChecks.quoted("a".repeat(100)))
        .isEqualTo("'" + "a".repeat(64) + "' (cut, 100 characters)");
  }

  @Test
  void badHeadersAreLeftOutCountedAndLoggedByNameNeverByValue() {
    Map<String, String> asked = new LinkedHashMap<>();
    asked.put("x-first", "1");
    asked.put("x-tag", "secret\r\nx-injected: b");
    asked.put("x bad", "secret too");
    asked.put("x-last", "2");
    Map<String, String> kept = refusals.settable(asked, HeaderChecks.Refusals.Kind.REQUEST_SET);
    assertThat(kept).containsExactly(Map.entry("x-first", "1"), Map.entry("x-last", "2"));
    assertThat(refusals.count()).isEqualTo(2);
    assertThat(logged).hasSize(2);
    assertThat(logged.get(0)).contains("request header").contains("'x-tag'")
        .contains("U+000D at index 6").doesNotContain("secret");
    assertThat(logged.get(1)).contains("'x bad'").contains("not a valid header name")
        .doesNotContain("secret");
  }

  @Test
  void nothingLeftOutGivesTheSameMapAndSet() {
    Map<String, String> asked = Map.of("x-a", "1");
    Set<String> removed = Set.of("x-b");
    assertThat(refusals.settable(asked, HeaderChecks.Refusals.Kind.RESPONSE_SET)).isSameAs(asked);
    assertThat(refusals.removable(removed)).isSameAs(removed);
    assertThat(refusals.count()).isZero();
    assertThat(logged).isEmpty();
  }

  @Test
  void removalsOfNamesThatAreNoTokenAreLeftOut() {
    Set<String> asked = new LinkedHashSet<>(List.of("x-a", "x\nb", "x-c"));
    assertThat(refusals.removable(asked)).containsExactly("x-a", "x-c");
    assertThat(refusals.count()).isEqualTo(1);
    assertThat(logged).singleElement().asString().contains("'x\\u000Ab'").contains("remove");
  }

  @Test
  void reportsAreThrottledToOneAMinutePerHeaderName() {
    Map<String, String> bad = Map.of("x-tag", "a\nb");
    for (int i = 0; i < 5; i++) {
      refusals.settable(bad, HeaderChecks.Refusals.Kind.REQUEST_SET);
    }
    // another name is reported on its own
    refusals.settable(Map.of("x-other", "\u0000"), HeaderChecks.Refusals.Kind.REQUEST_SET);
    assertThat(refusals.count()).isEqualTo(6);
    assertThat(logged).hasSize(2);
    now.addAndGet(HeaderChecks.Refusals.INTERVAL_NANOS - 1);
    refusals.settable(bad, HeaderChecks.Refusals.Kind.REQUEST_SET);
    assertThat(logged).hasSize(2);
    now.addAndGet(1);
    refusals.settable(bad, HeaderChecks.Refusals.Kind.REQUEST_SET);
    assertThat(logged).hasSize(3);
    assertThat(logged.get(2)).contains("'x-tag'").contains("(5 more like it since the last report");
  }

  @Test
  void namesPastTheBoundShareTheirKindsThrottle() {
    for (int i = 0; i < HeaderChecks.Refusals.MAX_THROTTLED_NAMES + 10; i++) {
      refusals.settable(Map.of("x-" + i, "\n"), HeaderChecks.Refusals.Kind.RESPONSE_SET);
    }
    assertThat(refusals.count()).isEqualTo(HeaderChecks.Refusals.MAX_THROTTLED_NAMES + 10);
    assertThat(logged).hasSize(HeaderChecks.Refusals.MAX_THROTTLED_NAMES + 1);
  }

  /** The body's framing both ways, and the request's host, are the gateway's own. */
  @Test
  void theFramingAndTheRequestsHostAreLeftOutAsReserved() {
    Map<String, String> asked = new LinkedHashMap<>();
    asked.put("Content-Length", "1");
    asked.put("transfer-encoding", "chunked");
    asked.put("Host", "elsewhere");
    asked.put("x-kept", "yes");
    assertThat(refusals.settable(asked, HeaderChecks.Refusals.Kind.REQUEST_SET))
        .containsExactly(Map.entry("x-kept", "yes"));
    Map<String, String> answer = new LinkedHashMap<>(asked);
    assertThat(refusals.settable(answer, HeaderChecks.Refusals.Kind.RESPONSE_SET))
        .containsOnlyKeys("Host", "x-kept");
    assertThat(refusals.removable(new LinkedHashSet<>(List.of("host", "x-gone",
        "content-length")))).containsExactly("x-gone");
    assertThat(refusals.count()).isEqualTo(7);
    assertThat(logged).anySatisfy(m -> assertThat(m).contains("'Content-Length' frames the body"))
        .anySatisfy(m -> assertThat(m).contains("'Host' is the request's authority"));
    assertThat(HeaderChecks.whyReserved("x-other", HeaderChecks.Refusals.Kind.REQUEST_SET))
        .isNull();
    // a pseudo-header is named as one, not as a name with a ':' in it
    Map<String, String> pseudo = new LinkedHashMap<>();
    pseudo.put(":path", "/v1/other");
    pseudo.put(":", "x");
    assertThat(refusals.settable(pseudo, HeaderChecks.Refusals.Kind.REQUEST_SET)).isEmpty();
    assertThat(refusals.removable(Set.of(":status"))).isEmpty();
    assertThat(logged).anySatisfy(m -> assertThat(m).contains("':path' is a pseudo-header"))
        .anySatisfy(m -> assertThat(m).contains("':status' is a pseudo-header"))
        .anySatisfy(m -> assertThat(m).contains("':' is not a valid header name"));
  }
}
