package io.epp4j.sim;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.Flow;
import org.jspecify.annotations.Nullable;

/**
 * Cuts a response body into lines (ended by LF, CR or CRLF, as server-sent events allow) for a
 * line subscriber, keeping at most {@link #MAX_LINE_BYTES} of an unfinished line. The JDK's
 * {@code BodySubscribers.fromLineSubscriber} keeps any line whole, so a server that sends a body
 * without line ends would make the client buffer it all until the request's timeout. A longer
 * line cancels the body and ends the line subscriber with {@link LineTooLong}.
 *
 * <p>It asks for the whole body at once; the line subscriber's requests are not counted (the
 * load generator's exchange asks for everything).
 */
final class SseLines implements Flow.Subscriber<List<ByteBuffer>> {
  /** The longest line kept: far above any event vLLM sends (one token, or a usage chunk). */
  static final int MAX_LINE_BYTES = 1 << 20;

  /** A line longer than {@link #MAX_LINE_BYTES}. */
  static final class LineTooLong extends IOException {
    LineTooLong(int limit) {
      super("a line of the answer is longer than " + limit + " bytes");
    }
  }

  private final Flow.Subscriber<String> lines;
  private final int maxLineBytes;
  private byte[] buf = new byte[512];
  private int len;
  private boolean afterCr;
  private boolean over;
  private Flow.@Nullable Subscription upstream;

  SseLines(Flow.Subscriber<String> lines) {
    this(lines, MAX_LINE_BYTES);
  }

  SseLines(Flow.Subscriber<String> lines, int maxLineBytes) {
    this.lines = lines;
    this.maxLineBytes = maxLineBytes;
  }

  @Override
  public void onSubscribe(Flow.Subscription s) {
    upstream = s;
    lines.onSubscribe(new Flow.Subscription() {
      @Override
      public void request(long n) {
        // everything was asked for below
      }

      @Override
      public void cancel() {
        s.cancel();
      }
    });
    s.request(Long.MAX_VALUE);
  }

  @Override
  public void onNext(List<ByteBuffer> item) {
    for (ByteBuffer b : item) {
      while (b.hasRemaining() && !over) {
        byte c = b.get();
        if (c == '\n') {
          if (!afterCr) {
            emit();
          }
          afterCr = false;
        } else if (c == '\r') {
          emit();
          afterCr = true;
        } else {
          afterCr = false;
          if (len == maxLineBytes) {
            over = true;
            Flow.Subscription up = upstream;
            if (up != null) {
              up.cancel();
            }
            lines.onError(new LineTooLong(maxLineBytes));
            return;
          }
          if (len == buf.length) {
            buf = java.util.Arrays.copyOf(buf, Math.min(maxLineBytes, buf.length * 2));
          }
          buf[len++] = c;
        }
      }
    }
  }

  private void emit() {
    String line = new String(buf, 0, len, StandardCharsets.UTF_8);
    len = 0;
    lines.onNext(line);
  }

  @Override
  public void onError(Throwable t) {
    if (!over) {
      over = true;
      lines.onError(t);
    }
  }

  @Override
  public void onComplete() {
    if (!over) {
      over = true;
      if (len > 0) {
        emit();
      }
      lines.onComplete();
    }
  }
}
