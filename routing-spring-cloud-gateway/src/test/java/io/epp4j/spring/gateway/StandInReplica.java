package io.epp4j.spring.gateway;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

/**
 * A tiny OpenAI-compatible replica on loopback: JSON answers, or SSE when the body asks for a
 * stream (one chunk, then it waits for {@link #gate} before the second chunk, the usage chunk and
 * {@code [DONE]}). Every answer carries usage with {@value #CACHED} cached tokens and names the
 * replica in {@code x-replica}.
 */
final class StandInReplica implements AutoCloseable {
  static final int CACHED = 7;

  final String name;
  final AtomicInteger served = new AtomicInteger();
  final AtomicInteger aborted = new AtomicInteger();
  /** The body of the last request, as received. */
  final AtomicReference<String> lastBody = new AtomicReference<>("");
  /**
   * What this replica did for each request whose prompt carries a tag ({@code "... tag <t>"}):
   * received, each stream chunk written and flushed, the exchange closed, or the exception that
   * ended it; so that a test whose answer stalls can tell a replica that stopped writing from a
   * gateway that held back what it was sent.
   */
  final Map<String, String> progress = new ConcurrentHashMap<>();
  private final ThreadLocal<String> currentTag = new ThreadLocal<>();
  /** Set when the last chunk of a stream went out. */
  final AtomicInteger lastChunksSent = new AtomicInteger();
  final AtomicReference<CountDownLatch> gate = new AtomicReference<>(new CountDownLatch(0));
  /** How many of the next requests get a 500 (an OpenAI error body) instead of an answer. */
  final AtomicInteger failNext = new AtomicInteger();
  /**
   * How many of the next streams drop the connection (no end of the chunked body) after their
   * first chunk, or, with {@link #breakOffAfterDone}, after {@code data: [DONE]}.
   */
  final AtomicInteger breakOffNext = new AtomicInteger();
  volatile boolean breakOffAfterDone;
  /**
   * Waited for after {@code data: [DONE]} is flushed, before the chunked body is ended: the
   * client has the whole stream while the gateway still waits for the end of the replica's body.
   */
  final AtomicReference<CountDownLatch> holdAfterDone =
      new AtomicReference<>(new CountDownLatch(0));
  private final HttpServer server;
  private final ExecutorService executor = Executors.newCachedThreadPool();

  private StandInReplica(String name) throws IOException {
    this.name = name;
    server = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
    server.createContext("/", this::handle);
    server.setExecutor(executor);
    server.start();
  }

  static StandInReplica start(String name) {
    try {
      return new StandInReplica(name);
    } catch (IOException e) {
      throw new IllegalStateException(e);
    }
  }

  int port() {
    return server.getAddress().getPort();
  }

  String id() {
    return "127.0.0.1:" + port();
  }

  private void handle(HttpExchange ex) throws IOException {
    currentTag.remove();
    try {
      answer(ex);
    } catch (BrokeOff e) {
      step("broke off");
      // not closed: the server drops the connection without ending the chunked body
      throw new IOException("replica broke off");
    } catch (IOException | RuntimeException e) {
      step("failed: " + e);
      throw e;
    }
    ex.close();
    step("closed");
  }

  /** Notes a step of the current request in {@link #progress}, when its prompt has a tag. */
  private void step(String what) {
    String tag = currentTag.get();
    if (tag != null) {
      progress.merge(tag, what, (a, b) -> a + ", " + b);
    }
  }

  /** The word after {@code "tag "} in a request body, or null. */
  private static String tagOf(String body) {
    int i = body.indexOf("tag ");
    if (i < 0) {
      return null;
    }
    int end = i + 4;
    while (end < body.length() && !Character.isWhitespace(body.charAt(end))
        && body.charAt(end) != '"') {
      end++;
    }
    return body.substring(i + 4, end);
  }

  private static final class BrokeOff extends RuntimeException {
    private static final long serialVersionUID = 1L;
  }

  private void answer(HttpExchange ex) throws IOException {
    {
      byte[] body = ex.getRequestBody().readAllBytes();
      served.incrementAndGet();
      String text = new String(body, StandardCharsets.UTF_8);
      lastBody.set(text);
      String tag = tagOf(text);
      if (tag != null) {
        currentTag.set(tag);
        step("received");
      }
      int prompt = Math.max(1, body.length / 4);
      String usage = "{\"prompt_tokens\":" + prompt + ",\"completion_tokens\":2,\"total_tokens\":"
          + (prompt + 2) + ",\"prompt_tokens_details\":{\"cached_tokens\":" + CACHED + "}}";
      ex.getResponseHeaders().set("x-replica", name);
      if (failNext.getAndUpdate(n -> Math.max(0, n - 1)) > 0) {
        byte[] error = "{\"error\":{\"message\":\"engine died\",\"type\":\"server_error\"}}"
            .getBytes(StandardCharsets.UTF_8);
        ex.getResponseHeaders().set("content-type", "application/json");
        ex.sendResponseHeaders(500, error.length);
        ex.getResponseBody().write(error);
        return;
      }
      if (!text.replace(" ", "").contains("\"stream\":true")) {
        byte[] json = ("{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"choices\":[{\"text\":\"ok\"}],"
            + "\"usage\":" + usage + "}").getBytes(StandardCharsets.UTF_8);
        ex.getResponseHeaders().set("content-type", "application/json");
        ex.sendResponseHeaders(200, json.length);
        ex.getResponseBody().write(json);
        return;
      }
      ex.getResponseHeaders().set("content-type", "text/event-stream");
      ex.sendResponseHeaders(200, 0);
      OutputStream out = ex.getResponseBody();
      boolean breakOff = breakOffNext.getAndUpdate(n -> Math.max(0, n - 1)) > 0;
      try {
        send(out, "{\"choices\":[{\"text\":\"a\"}],\"usage\":null}");
        step("a flushed");
        if (breakOff && !breakOffAfterDone) {
          throw new BrokeOff();
        }
        if (!gate.get().await(10, TimeUnit.SECONDS)) {
          aborted.incrementAndGet();
          return;
        }
        send(out, "{\"choices\":[{\"text\":\"b\"}],\"usage\":null}");
        step("b flushed");
        send(out, "{\"choices\":[],\"usage\":" + usage + "}");
        step("usage flushed");
        lastChunksSent.incrementAndGet();
        out.write("data: [DONE]\n\n".getBytes(StandardCharsets.UTF_8));
        out.flush();
        step("[DONE] flushed");
        if (breakOff) {
          throw new BrokeOff();
        }
        if (!holdAfterDone.get().await(10, TimeUnit.SECONDS)) {
          step("held after [DONE] too long");
        }
      } catch (IOException clientGone) {
        step("client gone: " + clientGone);
        aborted.incrementAndGet();
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
  }

  private static void send(OutputStream out, String data) throws IOException {
    out.write(("data: " + data + "\n\n").getBytes(StandardCharsets.UTF_8));
    out.flush();
  }

  @Override
  public void close() {
    server.stop(0);
    executor.shutdownNow();
  }
}
