package io.epp4j.kvevents;

import static io.epp4j.kvevents.KvEventSubscriberIntegrationTest.await;
import static org.assertj.core.api.Assertions.assertThat;

import java.net.InetAddress;
import java.net.UnknownHostException;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;

class HostLookupsTest {
  @Test
  void oneLookupPerNameRunsHoweverOftenItIsAskedForAndItsAnswerIsTakenOnce() throws Exception {
    CountDownLatch answer = new CountDownLatch(1);
    AtomicInteger lookups = new AtomicInteger();
    try (HostLookups l = new HostLookups(host -> {
      lookups.incrementAndGet();
      try {
        answer.await(20, TimeUnit.SECONDS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
      return new InetAddress[] {InetAddress.getByAddress(host, new byte[16])};
    })) {
      for (int i = 0; i < 1000; i++) {
        assertThat(l.take("engine-0.test")).as("no answer yet").isNull();
      }
      await(() -> lookups.get() == 1, "the lookup started");
      answer.countDown();
      AtomicReference<HostLookups.Answer> taken = new AtomicReference<>();
      await(() -> {
        taken.set(l.take("engine-0.test"));
        return taken.get() != null;
      }, "the answer");
      assertThat(lookups.get()).as("lookups for a thousand asks").isEqualTo(1);
      assertThat(taken.get().failure()).isNull();
      assertThat(taken.get().address()).as("an IPv6 address only")
          .isInstanceOf(java.net.Inet6Address.class);
      assertThat(l.take("engine-0.test")).as("taken: the next ask looks it up again").isNull();
      await(() -> lookups.get() == 2, "the second lookup");
    }
  }

  @Test
  void aNameThatDoesNotResolveIsAnsweredWithTheFailure() throws Exception {
    try (HostLookups l = new HostLookups(host -> {
      throw new UnknownHostException(host);
    })) {
      assertThat(l.take("nonexistent.invalid")).isNull();
      AtomicReference<HostLookups.Answer> taken = new AtomicReference<>();
      await(() -> {
        taken.set(l.take("nonexistent.invalid"));
        return taken.get() != null;
      }, "the answer");
      assertThat(taken.get().failure()).isInstanceOf(UnknownHostException.class)
          .hasMessageContaining("nonexistent.invalid");
    }
  }

  /**
   * An answer nobody takes (its endpoint left the pool before the answer came) is forgotten once
   * it is older than {@link HostLookups#KEPT_NANOS}, and the name is looked up again when asked
   * for anew; one taken in time is the lookup's.
   */
  @Test
  void anAnswerNobodyTookIsForgottenAfterItsTimeAndTheNameLookedUpAgain() throws Exception {
    AtomicLong now = new AtomicLong(1_000);
    AtomicInteger lookups = new AtomicInteger();
    try (HostLookups l = new HostLookups(host -> {
      lookups.incrementAndGet();
      return new InetAddress[] {InetAddress.getByAddress(host, new byte[] {10, 0, 0, 1})};
    }, now::get)) {
      assertThat(l.take("left.test")).isNull();
      assertThat(l.take("stays.test")).isNull();
      await(() -> l.answersKept() == 2, "both answers");
      now.addAndGet(HostLookups.KEPT_NANOS);
      l.prune();
      assertThat(l.answersKept()).as("answers exactly as old as kept").isEqualTo(2);
      HostLookups.Answer taken = l.take("stays.test");
      assertThat(taken).as("taken within its time").isNotNull();
      assertThat(taken.failure()).isNull();
      assertThat(taken.address()).isInstanceOf(java.net.Inet4Address.class);
      now.incrementAndGet();
      l.prune();
      assertThat(l.answersKept()).as("the answer nobody took, past its time").isZero();
      assertThat(lookups.get()).isEqualTo(2);
      // forgotten, not only hidden: asked for again, the name is looked up anew
      assertThat(l.take("left.test")).isNull();
      await(() -> lookups.get() == 3, "the name looked up again");
      await(() -> l.answersKept() == 1, "its new answer");
      assertThat(l.take("left.test")).isNotNull();
    }
  }

  /**
   * A lookup that ends without an answer (the resolver throws an Error, which ends the lookup
   * thread) leaves the name free to be looked up again: before, the name stayed marked as being
   * looked up, and its endpoint waited for an answer for ever.
   */
  @Test
  void aLookupThatEndsWithoutAnAnswerIsTriedAgainWhenAskedAgain() throws Exception {
    AtomicInteger lookups = new AtomicInteger();
    try (HostLookups l = new HostLookups(host -> {
      if (lookups.incrementAndGet() == 1) {
        throw new AssertionError("resolver failure for the test");
      }
      return new InetAddress[] {InetAddress.getByAddress(host, new byte[] {10, 0, 0, 2})};
    })) {
      Thread.UncaughtExceptionHandler quiet = (t, e) -> { };
      Thread.UncaughtExceptionHandler was = Thread.getDefaultUncaughtExceptionHandler();
      Thread.setDefaultUncaughtExceptionHandler(quiet);
      try {
        assertThat(l.take("engine-1.test")).isNull();
        await(() -> lookups.get() == 1, "the failing lookup");
        AtomicReference<HostLookups.Answer> taken = new AtomicReference<>();
        await(() -> {
          taken.set(l.take("engine-1.test"));
          return taken.get() != null;
        }, "an answer from a lookup after the failed one");
        assertThat(taken.get().failure()).isNull();
        assertThat(lookups.get()).isEqualTo(2);
      } finally {
        Thread.setDefaultUncaughtExceptionHandler(was);
      }
    }
  }

  @Test
  void addressesAreNotNames() {
    assertThat(HostLookups.isName("10.0.0.1")).isFalse();
    assertThat(HostLookups.isName("fd00::1")).isFalse();
    assertThat(HostLookups.isName("*")).isFalse();
    assertThat(HostLookups.isName("")).isFalse();
    assertThat(HostLookups.isName("engine-0.vllm.svc")).isTrue();
    assertThat(HostLookups.isName("localhost")).isTrue();
  }
}
