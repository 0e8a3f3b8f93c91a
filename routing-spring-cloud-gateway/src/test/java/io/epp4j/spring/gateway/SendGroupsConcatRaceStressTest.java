package io.epp4j.spring.gateway;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.condition.EnabledIfSystemProperty;
import org.reactivestreams.Subscription;
import reactor.core.CoreSubscriber;
import reactor.core.Scannable;
import reactor.core.publisher.Flux;
import reactor.core.publisher.Mono;
import reactor.core.publisher.Operators;
import reactor.core.publisher.Sinks;

/**
 * A manual stress run, not part of the build: the stall {@link Epp4jReloadUnderTrafficTest} meets,
 * reproduced with Reactor alone (no Netty, Spring or epp4j). Reactor Netty's {@code sendGroups}
 * writes each chunk of a streamed answer as
 * {@code concatMap(p -> p.concatWith(Mono.just(BOUNDARY)), 32)}; the writer
 * ({@code MonoSendMany}) asks for 128 items at once and for one more, from its event loop, each
 * time it meets a {@code BOUNDARY}, while the chunks arrive on the replica connection's event
 * loop. The subscriber below does the same with two plain threads.
 *
 * <pre>
 * ./mvnw -B -q -o -pl routing-spring-cloud-gateway -am test \
 *     -Dtest=SendGroupsConcatRaceStressTest -Dsurefire.failIfNoSpecifiedTests=false \
 *     -Dconcat.race.iterations=200000 -DargLine=-Xint
 * </pre>
 *
 * {@code -Xint} (the interpreter only, as in the first seconds of an application) widens the
 * window: on a loaded 2-core machine about one stream in ten thousand never ends. A stalled
 * stream is reported with the state of the chunk's {@code concatWith}: its demand is stored, its
 * {@code BOUNDARY} was never asked for.
 */
@EnabledIfSystemProperty(named = "concat.race.iterations", matches = "\\d+")
class SendGroupsConcatRaceStressTest {
  private static final Object BOUNDARY = new Object();
  private static final int GROUPS = 5;

  @Test
  void everyGroupOfAStreamEndsWhenTheWriterAsksFromItsOwnThread() throws Exception {
    int iterations = Integer.getInteger("concat.race.iterations");
    ExecutorService emitter = Executors.newSingleThreadExecutor(r -> new Thread(r, "emitter"));
    ExecutorService loop = Executors.newSingleThreadExecutor(r -> new Thread(r, "writer"));
    List<String> stalls = new ArrayList<>();
    try {
      for (int i = 0; i < iterations && stalls.isEmpty(); i++) {
        Sinks.Many<Object> chunks = Sinks.many().unicast().onBackpressureBuffer();
        // the subscriber of the latest group's concatWith (its first source is the chunk)
        AtomicReference<Object> group = new AtomicReference<>();
        Flux<Object> body = chunks.asFlux()
            .map(chunk -> Flux.just(chunk).map(c -> c))
            .concatMap(p -> Flux.from(Operators.<Object, Object>lift((s, sub) -> {
              group.set(sub);
              return sub;
            }).apply(p)).concatWith(Mono.just(BOUNDARY)), 32);
        Writer writer = new Writer(loop);
        body.subscribe(writer);
        emitter.execute(() -> {
          for (int g = 0; g < GROUPS; g++) {
            chunks.tryEmitNext("chunk " + g);
          }
          chunks.tryEmitComplete();
        });
        // slow is not stalled: the first streams of a cold JVM take seconds
        if (!writer.done.await(60, TimeUnit.SECONDS)) {
          Scannable concat = Scannable.from(group.get());
          Scannable boundary = Scannable.from(concat.scan(Scannable.Attr.PARENT));
          stalls.add("stream " + i + " stalled after " + writer.seen + "; the group's concatWith "
              + "stores a demand of " + concat.scan(Scannable.Attr.REQUESTED_FROM_DOWNSTREAM)
              + " while its current source (" + boundary.name() + ") was asked for nothing: "
              + "terminated=" + boundary.scan(Scannable.Attr.TERMINATED) + ", cancelled="
              + boundary.scan(Scannable.Attr.CANCELLED));
        }
      }
    } finally {
      emitter.shutdownNow();
      loop.shutdownNow();
    }
    assertThat(stalls).isEmpty();
  }

  /**
   * What {@code MonoSendMany} does with its source: asks 128 items up front, takes them on its
   * own thread, and asks one more from there for each end of group it meets.
   */
  private static final class Writer implements CoreSubscriber<Object>, Runnable {
    final ExecutorService loop;
    final ConcurrentLinkedQueue<Object> queue = new ConcurrentLinkedQueue<>();
    final AtomicInteger wip = new AtomicInteger();
    final CountDownLatch done = new CountDownLatch(1);
    final StringBuffer seen = new StringBuffer();
    volatile boolean completed;
    volatile Subscription upstream;

    Writer(ExecutorService loop) {
      this.loop = loop;
    }

    @Override
    public void onSubscribe(Subscription s) {
      upstream = s;
      s.request(128);
    }

    @Override
    public void onNext(Object item) {
      queue.offer(item);
      schedule();
    }

    @Override
    public void onError(Throwable t) {
      seen.append("error ").append(t);
      done.countDown();
    }

    @Override
    public void onComplete() {
      completed = true;
      schedule();
    }

    private void schedule() {
      if (wip.getAndIncrement() == 0) {
        loop.execute(this);
      }
    }

    @Override
    public void run() {
      int missed = 1;
      for (;;) {
        int ends = 0;
        for (Object item = queue.poll(); item != null; item = queue.poll()) {
          if (item == BOUNDARY) {
            ends++;
            seen.append("| ");
          } else {
            seen.append(item).append(' ');
          }
        }
        if (ends != 0) {
          upstream.request(ends);
        }
        if (completed && queue.isEmpty()) {
          done.countDown();
          return;
        }
        missed = wip.addAndGet(-missed);
        if (missed == 0) {
          return;
        }
      }
    }
  }
}
