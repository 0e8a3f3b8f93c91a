package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.api.Plugin;
import java.util.ArrayList;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Set;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;

class RetiredPluginsTest {

  private static final class Counted implements Plugin {
    final AtomicInteger closes = new AtomicInteger();

    @Override
    public void close() {
      closes.incrementAndGet();
    }
  }

  /** Timers fired by hand, in the order their delays would end. */
  private final List<Runnable> timers = new ArrayList<>();
  private final Set<Object> running = Collections.newSetFromMap(new IdentityHashMap<>());
  private final RetiredPlugins retired =
      new RetiredPlugins(timers::add, running::contains, new Object());

  @Test
  void aPluginDroppedAgainAfterBeingTakenBackWaitsTheWholeDelayFromItsLastDrop() {
    Counted p = new Counted();
    retired.closeLater(Set.of(p)); // reload 1 drops it
    running.add(p); // reload 2 takes it back
    running.remove(p); // reload 3 drops it again
    retired.closeLater(Set.of(p));

    timers.get(0).run(); // the first drop's delay ends: only part of the third's has passed
    assertThat(p.closes.get()).as("closed before its last drop's delay ended").isZero();

    timers.get(1).run();
    assertThat(p.closes.get()).isEqualTo(1);
  }

  @Test
  void aPluginStillInUseWhenItsDelayEndsStaysOpenAndAPluginNotInUseIsClosedOnce() {
    Counted kept = new Counted();
    Counted gone = new Counted();
    retired.closeLater(Set.of(kept, gone));
    running.add(kept);
    timers.get(0).run();
    timers.get(0).run();
    assertThat(kept.closes.get()).isZero();
    assertThat(gone.closes.get()).isEqualTo(1);
  }

  @Test
  void closingPendingNowClosesThoseNotRunningAndTheirTimersDoNothingLater() {
    Counted p = new Counted();
    Counted back = new Counted();
    retired.closeLater(Set.of(p, back));
    retired.closePending(Set.of(back));
    assertThat(p.closes.get()).isEqualTo(1);
    assertThat(back.closes.get()).isZero();
    retired.closeNow(Set.of(back));
    timers.get(0).run();
    assertThat(p.closes.get()).isEqualTo(1);
    assertThat(back.closes.get()).isEqualTo(1);
  }

  /**
   * With a long grace delay (or one too long to count, which means never), a reload's timer
   * outlives the router that set it: the JDK's shared delay thread holds it until it is due. Once
   * the router has closed, that timer must reach neither the plugins it was to close (closed by
   * then) nor the router, or every router closed after a reload would stay in memory.
   */
  @Test
  void aTimerStillWaitingWhenTheRouterClosesHoldsNeitherItsPluginsNorTheRouter() throws Exception {
    List<Runnable> waiting = new ArrayList<>(); // the delay thread's queue: never due
    List<java.lang.ref.WeakReference<Object>> refs = retireAndClose(waiting);
    long deadline = System.nanoTime() + java.util.concurrent.TimeUnit.SECONDS.toNanos(20);
    while (refs.stream().anyMatch(r -> r.get() != null) && System.nanoTime() < deadline) {
      System.gc();
      Thread.sleep(20);
    }
    assertThat(waiting).hasSize(1);
    assertThat(refs.get(0).get()).as("the retired plugin").isNull();
    assertThat(refs.get(1).get()).as("the retired plugins' keeper (and the router it reaches)")
        .isNull();
    waiting.get(0).run(); // due at last: nothing to do
  }

  /** Retires a plugin, then closes as the router does; returns weak references to both. */
  private static List<java.lang.ref.WeakReference<Object>> retireAndClose(List<Runnable> timer) {
    Counted p = new Counted();
    RetiredPlugins keeper = new RetiredPlugins(timer::add, o -> false, new Object());
    keeper.closeLater(Set.of(p));
    keeper.closePending(Set.of());
    assertThat(p.closes.get()).isEqualTo(1);
    return List.of(new java.lang.ref.WeakReference<>(p), new java.lang.ref.WeakReference<>(keeper));
  }
}
