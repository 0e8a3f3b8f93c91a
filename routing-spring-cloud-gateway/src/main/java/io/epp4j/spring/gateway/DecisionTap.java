package io.epp4j.spring.gateway;

import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.concurrent.CancellationException;
import org.jspecify.annotations.Nullable;
import org.reactivestreams.Publisher;
import org.springframework.core.io.buffer.DataBuffer;
import org.springframework.http.HttpStatusCode;
import org.springframework.http.server.reactive.ServerHttpResponse;
import reactor.core.publisher.Flux;

/**
 * Watches the replica's answer on its way to the client, buffer by buffer as the gateway writes
 * it (streamed answers keep their flush per chunk; nothing is held back), and reports the outcome
 * to the decision: the first byte of a 2xx answer is the first token, the end of the answer
 * completes it with the {@code usage} found in its last bytes, an error or the client going away
 * fails it. Only the last {@value #TAIL_BYTES} bytes are kept, copied, for the usage.
 *
 * <p>The {@code Epp4j} filter creates it and leaves it in the exchange attribute
 * {@link #ATTRIBUTE}; {@link Epp4jResponseTapFilter}, which runs before the gateway writes the
 * response, wraps the response so that the writes pass through {@link #watch}.
 */
final class DecisionTap {
  /** Exchange attribute holding the tap of a routed request. */
  static final String ATTRIBUTE = DecisionTap.class.getName();

  /** Usage is in the last JSON object or SSE chunk of an answer; this much of the end is kept. */
  static final int TAIL_BYTES = 64 * 1024;
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final byte[] USAGE_KEY = "\"usage\"".getBytes(java.nio.charset.StandardCharsets.US_ASCII);

  private final RoutingDecision decision;
  private final ServerHttpResponse response;
  private volatile boolean answered;
  private volatile boolean finished;
  private boolean success;
  // ring of the answer's last bytes; grows to TAIL_BYTES, then wraps
  private byte[] tail = new byte[0];
  private long written;

  DecisionTap(ServerHttpResponse response, RoutingDecision decision) {
    this.response = response;
    this.decision = decision;
  }

  RoutingDecision decision() {
    return decision;
  }

  /** Whether any byte of an answer reached this response. */
  boolean answered() {
    return answered;
  }

  /** The body of a {@code writeWith}, watched. */
  Flux<DataBuffer> watch(Publisher<? extends DataBuffer> body) {
    return watchEnd(Flux.<DataBuffer>from(body).doOnNext(this::seen));
  }

  /** The body of a {@code writeAndFlushWith}, watched chunk by chunk. */
  Flux<Publisher<DataBuffer>> watchChunks(Publisher<? extends Publisher<? extends DataBuffer>> body) {
    return watchEnd(Flux.from(body).map(chunk -> Flux.<DataBuffer>from(chunk).doOnNext(this::seen)));
  }

  private <T> Flux<T> watchEnd(Flux<T> body) {
    return body
        .doOnComplete(this::finished)
        .doOnError(decision::onFailure)
        .doOnCancel(() -> decision.onFailure(new CancellationException("client went away")));
  }

  private void seen(DataBuffer buffer) {
    if (!answered) {
      HttpStatusCode status = response.getStatusCode();
      success = status == null || status.is2xxSuccessful();
      answered = true;
    }
    int n = buffer.readableByteCount();
    if (n == 0) {
      return;
    }
    if (success) {
      decision.onFirstToken(); // only the first call counts
    }
    keep(buffer, n);
  }

  private void keep(DataBuffer buffer, int n) {
    int from = buffer.readPosition();
    if (n >= TAIL_BYTES) {
      ensure(TAIL_BYTES);
      buffer.toByteBuffer(from + n - TAIL_BYTES, ByteBuffer.wrap(tail), 0, TAIL_BYTES);
      written = TAIL_BYTES; // ring starts over at 0
      return;
    }
    ensure((int) Math.min(TAIL_BYTES, written + n));
    int pos = (int) (written % tail.length);
    int first = Math.min(n, tail.length - pos);
    buffer.toByteBuffer(from, ByteBuffer.wrap(tail), pos, first);
    if (first < n) {
      buffer.toByteBuffer(from + first, ByteBuffer.wrap(tail), 0, n - first);
    }
    written += n;
  }

  /** Grows the ring to {@code size}, which only happens before it first wraps. */
  private void ensure(int size) {
    if (tail.length >= size) {
      return;
    }
    int grown = Math.min(TAIL_BYTES, Math.max(size, Math.max(4096, tail.length * 2)));
    byte[] bigger = new byte[grown];
    System.arraycopy(tail, 0, bigger, 0, (int) Math.min(written, tail.length));
    tail = bigger;
  }

  /** The kept bytes, oldest first. */
  private byte[] tailBytes() {
    int len = (int) Math.min(written, tail.length);
    if (written <= tail.length) {
      return java.util.Arrays.copyOf(tail, len);
    }
    byte[] out = new byte[len];
    int pos = (int) (written % tail.length);
    System.arraycopy(tail, pos, out, 0, len - pos);
    System.arraycopy(tail, 0, out, len - pos, pos);
    return out;
  }

  /** The answer ended (or the chain ended without one): completion unless the replica failed. */
  void finished() {
    if (finished) { // the end of the answer, then the end of the exchange: one report, one parse
      return;
    }
    finished = true;
    HttpStatusCode status = response.getStatusCode();
    if (status != null && status.is5xxServerError()) {
      decision.onFailure(new IOException("upstream answered " + status.value()));
    } else {
      decision.onComplete(usageOf(tailBytes()));
    }
  }

  /**
   * The {@code usage} object after the last {@code "usage"} key of an answer's end: the final SSE
   * chunk of a stream with {@code include_usage}, or the end of a plain JSON answer.
   */
  static Usage usageOf(byte[] tail) {
    int at = lastIndexOf(tail, USAGE_KEY);
    if (at < 0) {
      return Usage.NONE;
    }
    int i = at + USAGE_KEY.length;
    while (i < tail.length && (tail[i] == ' ' || tail[i] == ':' || tail[i] == '\t')) {
      i++;
    }
    try (JsonParser p = JSON.getFactory().createParser(tail, i, tail.length - i)) {
      @Nullable JsonNode u = JSON.readTree(p);
      if (u == null || !u.isObject()) {
        return Usage.NONE;
      }
      return new Usage(u.path("prompt_tokens").asInt(0),
          u.path("prompt_tokens_details").path("cached_tokens").asInt(0),
          u.path("completion_tokens").asInt(0));
    } catch (IOException | RuntimeException e) {
      return Usage.NONE;
    }
  }

  private static int lastIndexOf(byte[] hay, byte[] needle) {
    outer:
    for (int i = hay.length - needle.length; i >= 0; i--) {
      for (int j = 0; j < needle.length; j++) {
        if (hay[i + j] != needle[j]) {
          continue outer;
        }
      }
      return i;
    }
    return -1;
  }
}
