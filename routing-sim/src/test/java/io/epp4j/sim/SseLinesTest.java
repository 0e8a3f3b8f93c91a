package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Flow;
import org.junit.jupiter.api.Test;

class SseLinesTest {

  /** Records what the line subscriber hears. */
  static final class Heard implements Flow.Subscriber<String> {
    final List<String> lines = new ArrayList<>();
    Throwable error;
    boolean completed;

    @Override public void onSubscribe(Flow.Subscription s) {}
    @Override public void onNext(String item) { lines.add(item); }
    @Override public void onError(Throwable t) { error = t; }
    @Override public void onComplete() { completed = true; }
  }

  static final class Upstream implements Flow.Subscription {
    long requested;
    boolean cancelled;

    @Override public void request(long n) { requested += n; }
    @Override public void cancel() { cancelled = true; }
  }

  static List<ByteBuffer> chunks(String... parts) {
    List<ByteBuffer> out = new ArrayList<>();
    for (String p : parts) {
      out.add(ByteBuffer.wrap(p.getBytes(StandardCharsets.UTF_8)));
    }
    return out;
  }

  @Test
  void linesEndAtLfCrOrCrlfAcrossBufferBoundariesAndTheLastUnendedLineComesAtTheEnd() {
    Heard h = new Heard();
    SseLines s = new SseLines(h);
    Upstream up = new Upstream();
    s.onSubscribe(up);
    assertThat(up.requested).isEqualTo(Long.MAX_VALUE);
    s.onNext(chunks("data: {\"a\":", "\"é\"}\r", "\ndata: [DO"));
    s.onNext(chunks("NE]\n\nx\ry"));
    s.onComplete();
    assertThat(h.lines).containsExactly("data: {\"a\":\"é\"}", "data: [DONE]", "", "x", "y");
    assertThat(h.completed).isTrue();
    assertThat(h.error).isNull();
  }

  @Test
  void aLineAboveTheLimitCancelsTheBodyAndEndsWithLineTooLongOnce() {
    Heard h = new Heard();
    SseLines s = new SseLines(h, 8);
    Upstream up = new Upstream();
    s.onSubscribe(up);
    s.onNext(chunks("12345678\n", "123456789"));
    assertThat(h.lines).containsExactly("12345678"); // exactly the limit is kept
    assertThat(up.cancelled).isTrue();
    assertThat(h.error).isInstanceOf(SseLines.LineTooLong.class).hasMessageContaining("8 bytes");
    s.onNext(chunks("\nmore\n"));
    s.onComplete();
    assertThat(h.lines).containsExactly("12345678");
    assertThat(h.completed).isFalse();
  }
}
