package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.within;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.ByteArrayOutputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The load generator against the in-process emulator and against servers that fail on purpose,
 * all on loopback; every run is bounded by its per-request timeout.
 */
@Timeout(60)
class LoadGeneratorTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final double SPEED = 20;
  private final List<AutoCloseable> open = new ArrayList<>();

  @AfterEach
  void closeAll() throws Exception {
    for (int i = open.size() - 1; i >= 0; i--) {
      open.get(i).close();
    }
  }

  private EmulatedReplicas replicas(int n) {
    EmulatedReplicas r = EmulatedReplicas.startOnFreePorts(n, false, SPEED, 1);
    open.add(r);
    return r;
  }

  private LoadGenerator generator(URI target, Duration timeout, int maxRequests) {
    LoadGenerator g = new LoadGenerator(new LoadGenerator.Settings(target, "qwen3-1.7b", timeout,
        maxRequests, SPEED, 1, null));
    open.add(g::close);
    return g;
  }

  /** 3 groups × 2 users, 256-token system prompts, one client at a time: nothing is evicted. */
  private static SharedPrefixWorkload small(int requests, int concurrency) {
    return new SharedPrefixWorkload(3, 2, LengthDist.fixed(256), LengthDist.parse("32-64"),
        LengthDist.parse("4-8"), requests, concurrency, 0);
  }

  private static URI url(int port) {
    return URI.create("http://127.0.0.1:" + port);
  }

  /**
   * A stub answering every completion with {@code events} as a whole event stream, calling
   * {@code onRequest} once each request's body is read; stopped after the test.
   */
  private HttpServer sseStub(String events, Runnable onRequest) throws java.io.IOException {
    HttpServer server = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(),
        0), 50);
    server.createContext("/v1/completions", ex -> {
      ex.getRequestBody().readAllBytes();
      onRequest.run();
      ex.getResponseHeaders().set("Content-Type", "text/event-stream");
      ex.sendResponseHeaders(200, 0);
      try (OutputStream os = ex.getResponseBody()) {
        os.write(events.getBytes(StandardCharsets.UTF_8));
      }
    });
    server.setExecutor(java.util.concurrent.Executors.newCachedThreadPool());
    server.start();
    open.add(() -> server.stop(0));
    return server;
  }

  @Test
  void aServerThatNamesNoCachedTokensGivesNoHitRateRatherThanZero() throws Exception {
    // vLLM's default: usage without prompt_tokens_details (--enable-prompt-tokens-details off)
    EmulatedReplicas r = EmulatedReplicas.startOnFreePorts(1, false, SPEED, 1, false);
    open.add(r);
    SharedPrefixWorkload w = small(12, 1);
    LoadGenerator.Result res = generator(url(r.httpPort(0)), Duration.ofSeconds(20),
        Integer.MAX_VALUE).run(w, "direct");

    assertThat(res.errors()).isEmpty();
    assertThat(res.result().requests()).isEqualTo(12);
    // the same run with the details has hits (the test below): 0 here would be a false figure
    assertThat(res.result().prefixCacheHitRate()).isNaN();
    LoadReport.Scenario s = LoadReport.Scenario.of(w, "http://127.0.0.1", SPEED, List.of(res));
    ByteArrayOutputStream table = new ByteArrayOutputStream();
    LoadReport.print(s, new PrintStream(table, true, StandardCharsets.UTF_8));
    String row = table.toString(StandardCharsets.UTF_8).lines()
        .map(String::trim).filter(l -> l.startsWith("direct ")).findFirst().orElseThrow();
    assertThat(row.split("\\s+")[1]).isEqualTo(Report.NO_FIGURE);
    JsonNode json = new ObjectMapper().readTree(LoadReport.toJson(
        LoadReport.runInfo(1, 1, true, 50, List.of()), List.of(s), Map.of()));
    assertThat(json.at("/scenarios/0/results/0/prefixCacheHitRate").isNull()).isTrue();
  }

  @Test
  void oneClientOnOneReplicaHitsExactlyTheWorkloadsCeiling() throws Exception {
    EmulatedReplicas r = replicas(1);
    SharedPrefixWorkload w = small(24, 1);
    LoadGenerator.Result res = generator(url(r.httpPort(0)), Duration.ofSeconds(20),
        Integer.MAX_VALUE).run(w, "direct");

    PolicyResult p = res.result();
    assertThat(res.errors()).isEmpty();
    assertThat(res.sent()).isEqualTo(24);
    assertThat(p.requests()).isEqualTo(24);
    // one replica whose cache holds all three prompts and one request at a time: every request
    // finds what an infinite cache would, so usage's cached tokens give the ceiling exactly
    assertThat(p.prefixCacheHitRate()).isCloseTo(w.hitRateCeiling(1, 16), within(1e-9));
    assertThat(p.ttftP50Ms()).isPositive();
    assertThat(p.itlP50Ms()).isPositive();
    assertThat(p.e2eP95Ms()).isGreaterThanOrEqualTo(p.ttftP95Ms());
    assertThat(p.outputTokensPerSec()).isPositive();
    assertThat(p.ttftCdfMs()).hasSize(24);
  }

  /**
   * A finished request's deadline leaves the timer's queue at once: a cancelled task that stayed
   * queued until its time (60 s by default) would keep its request's buffers, so a long run at a
   * high rate would hold rate × timeout requests' worth of memory.
   */
  @Test
  void aFinishedRequestLeavesNoDeadlineQueued() throws Exception {
    EmulatedReplicas r = replicas(1);
    LoadGenerator g = generator(url(r.httpPort(0)), Duration.ofSeconds(600), Integer.MAX_VALUE);
    LoadGenerator.Result res = g.run(small(12, 3), "deadlines");
    assertThat(res.errors()).isEmpty();
    assertThat(res.result().requests()).isEqualTo(12);
    assertThat(g.timerTasksQueued()).as("timer tasks left after every request finished")
        .isZero();
  }

  @Test
  void aClosedLoopKeepsItsClientsBusyAndDialogsGoOnTurnByTurn() throws Exception {
    EmulatedReplicas r = replicas(2);
    LoadGenerator g = generator(url(r.httpPort(1)), Duration.ofSeconds(20), Integer.MAX_VALUE);
    LoadGenerator.Result shared = g.run(small(30, 4), "closed loop");
    assertThat(shared.result().requests()).isEqualTo(30);
    assertThat(shared.errors()).isEmpty();

    MultiTurnWorkload mt = new MultiTurnWorkload(3, 3, 128, LengthDist.fixed(32),
        LengthDist.fixed(8), 0.05, 0.1);
    LoadGenerator.Result dialogs = g.run(mt, "dialogs");
    assertThat(dialogs.result().requests()).isEqualTo(9);
    assertThat(dialogs.errors()).isEmpty();
  }

  @Test
  void aDialogsNextTurnCarriesTheReplyTheServerGenerated() throws Exception {
    EmulatedReplicas r = replicas(1);
    // one dialog on one replica, one turn at a time: over HTTP each turn finds what it finds in
    // process (its system prompt, earlier messages and replies) only if the replies it sends
    // back are the tokens the server generated (return_token_ids), not the ones it planned
    MultiTurnWorkload mt = new MultiTurnWorkload(1, 4, 128, LengthDist.fixed(40),
        LengthDist.fixed(24), 0.01, 0);
    LoadGenerator.Result res = generator(url(r.httpPort(0)), Duration.ofSeconds(20),
        Integer.MAX_VALUE).run(mt, "dialog");
    PolicyResult inProcess = new Simulation(new Simulation.Settings(
        HardwareProfile.qwen3H100Mps6(), 1, 1, 50_000_000, null), mt, Policy.ROUND_ROBIN, null)
        .run();
    assertThat(res.result().requests()).isEqualTo(4);
    assertThat(inProcess.prefixCacheHitRate()).isNotNaN().isPositive();
    assertThat(res.result().prefixCacheHitRate())
        .isCloseTo(inProcess.prefixCacheHitRate(), within(1e-9));
  }

  @Test
  void theWarmUpSharesNoPromptWithTheWorkload() throws Exception {
    EmulatedReplicas r = replicas(1);
    LoadGenerator g = generator(url(r.httpPort(0)), Duration.ofSeconds(20), Integer.MAX_VALUE);
    assertThat(g.warmUp(8)).isEmpty();
    SharedPrefixWorkload w = small(24, 1);
    // the ceiling again: nothing the warm-up cached is hit by the workload's prompts
    assertThat(g.run(w, "after warm-up").result().prefixCacheHitRate())
        .isCloseTo(w.hitRateCeiling(1, 16), within(1e-9));
  }

  /**
   * {@code --max-requests} caps the measured run, not the warm-up: {@code --warmup 5
   * --max-requests 2} sends five warm-up requests, then at most two measured ones.
   */
  @Test
  void maxRequestsDoesNotCutTheWarmUpShort() throws Exception {
    java.util.concurrent.atomic.AtomicInteger calls =
        new java.util.concurrent.atomic.AtomicInteger();
    HttpServer server = sseStub("data: {\"choices\":[{\"index\":0,\"text\":\" a\"}]}\n\n"
        + "data: [DONE]\n\n", calls::incrementAndGet);
    LoadGenerator g = generator(url(server.getAddress().getPort()), Duration.ofSeconds(5), 2);
    assertThat(g.warmUp(5)).isEmpty();
    assertThat(calls.get()).isEqualTo(5);
    LoadGenerator.Result res = g.run(small(6, 1), "capped");
    assertThat(res.sent()).isEqualTo(2);
    assertThat(calls.get()).isEqualTo(7);
  }

  @Test
  void maxRequestsCapsTheRun() throws Exception {
    EmulatedReplicas r = replicas(1);
    LoadGenerator.Result res = generator(url(r.httpPort(0)), Duration.ofSeconds(20), 5)
        .run(small(50, 2), "capped");
    assertThat(res.sent()).isEqualTo(5);
    assertThat(res.result().requests()).isEqualTo(5);
  }

  @Test
  void aRefusedPortCountsConnectErrors() throws Exception {
    int port;
    try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
      port = s.getLocalPort();
    }
    LoadGenerator.Result res = generator(url(port), Duration.ofSeconds(5), Integer.MAX_VALUE)
        .run(small(6, 2), "refused");
    assertThat(res.errors()).isEqualTo(Map.of("connect", 6));
    assertThat(res.result().requests()).isZero();
    assertThat(res.result().rejectedRequests()).isEqualTo(6);
  }

  @Test
  void aServerThatNeverAnswersCostsTimeoutsNotAHang() throws Exception {
    try (ServerSocket silent = new ServerSocket(0, 50, InetAddress.getLoopbackAddress())) {
      List<Socket> held = new ArrayList<>();
      Thread acceptor = new Thread(() -> {
        try {
          while (true) {
            held.add(silent.accept()); // read nothing, answer nothing
          }
        } catch (java.io.IOException closed) {
          // the test is over
        }
      });
      acceptor.setDaemon(true);
      acceptor.start();
      long start = System.nanoTime();
      LoadGenerator.Result res = generator(url(silent.getLocalPort()), Duration.ofMillis(500),
          Integer.MAX_VALUE).run(small(4, 2), "silent");
      double seconds = (System.nanoTime() - start) / 1e9;
      assertThat(res.errors()).isEqualTo(Map.of("timeout", 4));
      // two clients, two rounds of one timeout each, plus scheduling slack
      assertThat(seconds).isLessThan(10);
      for (Socket s : held) {
        s.close();
      }
    }
  }

  @Test
  void aModelsListThatNeverEndsCostsTheTimeoutNotAHang() throws Exception {
    // every answer starts (status line, headers, one byte of a 100-byte body) and then stalls:
    // the models list asked for when no --model is given must end within the timeout too
    try (ServerSocket stalling = new ServerSocket(0, 50, InetAddress.getLoopbackAddress())) {
      List<Socket> held = new java.util.concurrent.CopyOnWriteArrayList<>();
      Thread acceptor = new Thread(() -> {
        try {
          while (true) {
            Socket s = stalling.accept();
            held.add(s);
            s.getOutputStream().write(("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                + "Content-Length: 100\r\n\r\n{").getBytes(StandardCharsets.US_ASCII));
            s.getOutputStream().flush();
          }
        } catch (java.io.IOException closed) {
          // the test is over
        }
      });
      acceptor.setDaemon(true);
      acceptor.start();
      LoadGenerator g = new LoadGenerator(new LoadGenerator.Settings(
          url(stalling.getLocalPort()), null, Duration.ofMillis(500), Integer.MAX_VALUE, SPEED,
          1, null));
      open.add(g::close);
      long start = System.nanoTime();
      LoadGenerator.Result res = org.junit.jupiter.api.Assertions.assertTimeoutPreemptively(
          Duration.ofSeconds(15), () -> g.run(small(2, 1), "stalling"));
      double seconds = (System.nanoTime() - start) / 1e9;
      assertThat(res.errors()).isEqualTo(Map.of("timeout", 2));
      assertThat(seconds).isLessThan(10);
      for (Socket s : held) {
        s.close();
      }
    }
  }

  @Test
  void anErrorAnswerWhoseBodyNeverEndsHasItsConnectionClosedWhenItIsCounted() throws Exception {
    // the first connection gets a 400, the second a 503, each with 1 byte of a 1,000-byte body
    // and then nothing: each request is counted, and the client closes its connection
    try (ServerSocket stalling = new ServerSocket(0, 50, InetAddress.getLoopbackAddress())) {
      java.util.concurrent.CountDownLatch closed = new java.util.concurrent.CountDownLatch(2);
      List<Socket> held = new java.util.concurrent.CopyOnWriteArrayList<>();
      Thread acceptor = new Thread(() -> {
        try {
          for (String status : List.of("400 Bad Request", "503 Service Unavailable")) {
            Socket s = stalling.accept();
            held.add(s);
            s.getOutputStream().write(("HTTP/1.1 " + status + "\r\nContent-Type: application/json"
                + "\r\nContent-Length: 1000\r\n\r\n{").getBytes(StandardCharsets.US_ASCII));
            s.getOutputStream().flush();
            Thread reader = new Thread(() -> {
              try {
                // the request, then the end of the connection (a close or a reset)
                while (s.getInputStream().read(new byte[8192]) >= 0) {
                  // discard
                }
              } catch (java.io.IOException reset) {
                // closed too
              }
              closed.countDown();
            });
            reader.setDaemon(true);
            reader.start();
          }
        } catch (java.io.IOException over) {
          // the test is over
        }
      });
      acceptor.setDaemon(true);
      acceptor.start();
      LoadGenerator.Result res = generator(url(stalling.getLocalPort()), Duration.ofMillis(500),
          Integer.MAX_VALUE).run(small(2, 1), "stalling errors");
      assertThat(res.errors()).isEqualTo(Map.of("timeout", 1, "http 503", 1));
      // the generator is still open: only the cancelled bodies can have closed the connections
      assertThat(closed.await(10, java.util.concurrent.TimeUnit.SECONDS))
          .as("both connections closed by the client").isTrue();
      for (Socket s : held) {
        s.close();
      }
    }
  }

  @Test
  void anOpenLoopSendsOnItsScheduleWhateverTheServerDoes() throws Exception {
    try (ServerSocket silent = new ServerSocket(0, 50, InetAddress.getLoopbackAddress())) {
      List<Socket> held = new java.util.concurrent.CopyOnWriteArrayList<>();
      Thread acceptor = new Thread(() -> {
        try {
          while (true) {
            held.add(silent.accept());
          }
        } catch (java.io.IOException closed) {
          // the test is over
        }
      });
      acceptor.setDaemon(true);
      acceptor.start();
      // 10 Poisson arrivals at 200 per workload second (the generator runs at speed 20, so all
      // leave within milliseconds of wall time); none waits for an answer to another, so the
      // run lasts about one 2 s timeout, where a closed loop of one client would take ten
      SharedPrefixWorkload open = new SharedPrefixWorkload(3, 2, LengthDist.fixed(64),
          LengthDist.fixed(8), LengthDist.fixed(4), 10, 1, 200);
      long start = System.nanoTime();
      LoadGenerator.Result res = generator(url(silent.getLocalPort()), Duration.ofSeconds(2),
          Integer.MAX_VALUE).run(open, "open loop");
      double seconds = (System.nanoTime() - start) / 1e9;
      assertThat(res.errors()).isEqualTo(Map.of("timeout", 10));
      assertThat(seconds).isLessThan(2 * 2 + 2);
      for (Socket s : held) {
        s.close();
      }
    }
  }

  @Test
  void errorStatusesAndCutStreamsAreCountedByKind() throws Exception {
    HttpServer server = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(),
        0), 50);
    int[] calls = {0};
    server.createContext("/v1/completions", ex -> {
      ex.getRequestBody().readAllBytes();
      int n;
      synchronized (calls) {
        n = calls[0]++;
      }
      if (n % 2 == 0) {
        byte[] b = "{\"error\":{\"message\":\"busy\",\"code\":503}}"
            .getBytes(StandardCharsets.UTF_8);
        ex.sendResponseHeaders(503, b.length);
        ex.getResponseBody().write(b);
        ex.close();
      } else {
        ex.getResponseHeaders().set("Content-Type", "text/event-stream");
        ex.sendResponseHeaders(200, 0);
        OutputStream os = ex.getResponseBody();
        os.write("data: {\"choices\":[{\"index\":0,\"text\":\" a\"}]}\n\n"
            .getBytes(StandardCharsets.UTF_8));
        os.flush();
        ex.close(); // ends without [DONE]
      }
    });
    server.start();
    open.add(() -> server.stop(0));
    LoadGenerator.Result res = generator(url(server.getAddress().getPort()),
        Duration.ofSeconds(5), Integer.MAX_VALUE).run(small(6, 1), "failing");
    assertThat(res.errors()).isEqualTo(Map.of("http 503", 3, "stream cut", 3));
    assertThat(res.failed()).isEqualTo(6);
  }

  /**
   * A server (or a proxy) that ignores {@code stream} answers a whole JSON completion: no event
   * ever came, which is counted as its own kind rather than as a cut connection.
   */
  @Test
  void aWholeJsonAnswerToAStreamedRequestIsNotAStream() throws Exception {
    HttpServer server = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(),
        0), 50);
    server.createContext("/v1/completions", ex -> {
      ex.getRequestBody().readAllBytes();
      byte[] b = ("{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,"
          + "\"text\":\" a b\",\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":300,"
          + "\"completion_tokens\":2,\"total_tokens\":302}}\n").getBytes(StandardCharsets.UTF_8);
      ex.getResponseHeaders().set("Content-Type", "application/json");
      ex.sendResponseHeaders(200, b.length);
      ex.getResponseBody().write(b);
      ex.close();
    });
    server.start();
    open.add(() -> server.stop(0));
    LoadGenerator.Result res = generator(url(server.getAddress().getPort()),
        Duration.ofSeconds(5), Integer.MAX_VALUE).run(small(3, 1), "json");
    assertThat(res.errors()).isEqualTo(Map.of("not a stream", 3));
    assertThat(res.result().requests()).isZero();
    assertThat(res.sent()).isEqualTo(3);
  }

  @Test
  void aDialogWhoseTurnFailedGoesOnWithoutTheReplyItNeverGot() throws Exception {
    HttpServer server = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(),
        0), 50);
    List<Integer> prompts = java.util.Collections.synchronizedList(new ArrayList<>());
    server.createContext("/v1/completions", ex -> {
      prompts.add(JSON.readTree(ex.getRequestBody()).get("prompt").size());
      byte[] b = "{\"error\":{\"message\":\"busy\",\"code\":503}}"
          .getBytes(StandardCharsets.UTF_8);
      ex.sendResponseHeaders(503, b.length);
      ex.getResponseBody().write(b);
      ex.close();
    });
    server.start();
    open.add(() -> server.stop(0));
    MultiTurnWorkload mt = new MultiTurnWorkload(1, 3, 160, LengthDist.fixed(32),
        LengthDist.fixed(48), 0.01, 0);
    LoadGenerator.Result res = generator(url(server.getAddress().getPort()),
        Duration.ofSeconds(5), Integer.MAX_VALUE).run(mt, "refused dialog");
    assertThat(res.failed()).isEqualTo(3);
    // every turn is the system prompt and its own message: no reply ever joined the history
    assertThat(prompts).containsExactly(192, 192, 192);
  }

  /**
   * A dialog that outgrows the model's context ends there, over HTTP as in process: the turn the
   * server refuses with vLLM's context-length 400 is a failure, the turns after it (which would
   * carry it and be longer still) are not sent and count as given up, so completed + failed is
   * the workload's total, as requests + rejected is in the simulator.
   */
  @Test
  void aDialogWhoseTurnIsTooLongForTheContextEndsThere() throws Exception {
    int maxLen = HardwareProfile.qwen3H100Mps6().maxModelLen();
    // turns of 20,000 + 5,100 tokens each: the second ends at 30,200, the third would at 35,300
    MultiTurnWorkload mt = new MultiTurnWorkload(1, 5, 20_000, LengthDist.fixed(5_000),
        LengthDist.fixed(100), 0.01, 0);
    assertThat(maxLen).isBetween(30_200, 35_299);
    EmulatedReplicas r = replicas(1);
    LoadGenerator g = generator(url(r.httpPort(0)), Duration.ofSeconds(20), Integer.MAX_VALUE);
    LoadGenerator.Result res = g.run(mt, "outgrown");
    assertThat(res.sent()).isEqualTo(3);
    assertThat(res.result().requests()).isEqualTo(2);
    assertThat(res.errors()).isEqualTo(Map.of("http 400", 1, LoadGenerator.GIVEN_UP, 2));
    assertThat(res.result().requests() + res.failed()).isEqualTo(mt.dialogs() * mt.turns());

    PolicyResult inProcess = new Simulation(new Simulation.Settings(
        HardwareProfile.qwen3H100Mps6(), 1, 1, 50_000_000, null), mt, Policy.ROUND_ROBIN, null)
        .run();
    assertThat(inProcess.requests()).isEqualTo(res.result().requests());
    assertThat(inProcess.rejectedRequests()).isEqualTo(res.failed());

    // with --max-requests the turns given up count within the cap
    LoadGenerator.Result capped = generator(url(r.httpPort(0)), Duration.ofSeconds(20), 4)
        .run(mt, "outgrown, capped");
    assertThat(capped.sent()).isEqualTo(3);
    assertThat(capped.errors()).isEqualTo(Map.of("http 400", 1, LoadGenerator.GIVEN_UP, 1));
  }

  /** Only a 400 that says the context is exceeded ends a dialog; any other goes on. */
  @Test
  void aContextLengthRefusalIsToldFromOtherBadRequests() throws Exception {
    assertThat(LoadGenerator.contextLengthExceeded("{\"error\":{\"message\":\"This model's"
        + " maximum context length is 32768 tokens. However, you requested 35300 tokens\"}}"))
        .isTrue();
    assertThat(LoadGenerator.contextLengthExceeded("{\"error\":{\"message\":\"The decoder"
        + " prompt (length 40000) is longer than the maximum model length of 32768.\"}}"))
        .isTrue();
    assertThat(LoadGenerator.contextLengthExceeded(
        "{\"error\":{\"code\":\"context_length_exceeded\"}}")).isTrue();
    assertThat(LoadGenerator.contextLengthExceeded(
        "{\"error\":{\"message\":\"field 'stream' must be a boolean\"}}")).isFalse();

    HttpServer server = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(),
        0), 50);
    List<Integer> prompts = java.util.Collections.synchronizedList(new ArrayList<>());
    server.createContext("/v1/completions", ex -> {
      prompts.add(JSON.readTree(ex.getRequestBody()).get("prompt").size());
      byte[] b = "{\"error\":{\"message\":\"field 'ignore_eos' is not known\",\"code\":400}}"
          .getBytes(StandardCharsets.UTF_8);
      ex.sendResponseHeaders(400, b.length);
      ex.getResponseBody().write(b);
      ex.close();
    });
    server.start();
    open.add(() -> server.stop(0));
    MultiTurnWorkload mt = new MultiTurnWorkload(1, 3, 160, LengthDist.fixed(32),
        LengthDist.fixed(48), 0.01, 0);
    LoadGenerator.Result res = generator(url(server.getAddress().getPort()),
        Duration.ofSeconds(5), Integer.MAX_VALUE).run(mt, "bad requests");
    assertThat(res.errors()).isEqualTo(Map.of("http 400", 3));
    assertThat(prompts).hasSize(3);
  }

  @Test
  void aStreamThatStaysOpenAfterDoneCountsAsCompletedNotAsATimeout() throws Exception {
    // the answer ends with [DONE] but the body never closes (chunked, no last chunk)
    HttpServer server = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(),
        0), 50);
    List<HttpExchange> held = new java.util.concurrent.CopyOnWriteArrayList<>();
    server.createContext("/v1/completions", ex -> {
      ex.getRequestBody().readAllBytes();
      ex.getResponseHeaders().set("Content-Type", "text/event-stream");
      ex.sendResponseHeaders(200, 0);
      OutputStream os = ex.getResponseBody();
      os.write(("data: {\"choices\":[{\"index\":0,\"text\":\" a\"}]}\n\n"
          + "data: {\"choices\":[{\"index\":0,\"text\":\" b\"}]}\n\n"
          + "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":300,\"completion_tokens\":2}}\n\n"
          + "data: [DONE]\n\n").getBytes(StandardCharsets.UTF_8));
      os.flush();
      held.add(ex); // not closed
    });
    server.setExecutor(java.util.concurrent.Executors.newCachedThreadPool());
    server.start();
    open.add(() -> server.stop(0));
    LoadGenerator.Result res = generator(url(server.getAddress().getPort()),
        Duration.ofMillis(1500), Integer.MAX_VALUE).run(small(3, 1), "open after done");
    assertThat(res.errors()).isEmpty();
    assertThat(res.result().requests()).isEqualTo(3);
    held.forEach(HttpExchange::close);
  }

  /**
   * A client times no routing decision: the routing times are no figure (– in the table, null
   * in the JSON), not 0 µs, which reads as a router that costs nothing.
   */
  @Test
  void routingTimesAreNoFigureOverTheNetworkNotZero() throws Exception {
    HttpServer server = sseStub("data: {\"choices\":[{\"index\":0,\"text\":\" a\"}]}\n\n"
        + "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":300,"
        + "\"completion_tokens\":1}}\n\n"
        + "data: [DONE]\n\n", () -> { });
    LoadGenerator.Result res = generator(url(server.getAddress().getPort()),
        Duration.ofSeconds(5), Integer.MAX_VALUE).run(small(2, 1), "stub");
    assertThat(res.result().requests()).isEqualTo(2);
    LoadReport.Scenario s = LoadReport.Scenario.of(small(2, 1), "http://stub", SPEED,
        List.of(res));
    JsonNode r = JSON.readTree(LoadReport.toJson(LoadReport.runInfo(1, 0, false, 0, List.of()),
        List.of(s), Map.of())).at("/scenarios/0/results/0");
    for (String f : List.of("routingMeanMicros", "routingP99Micros", "routingWarmMeanMicros",
        "routingWarmP99Micros")) {
      assertThat(r.get(f)).as(f).isNotNull();
      assertThat(r.get(f).isNull()).as(f + " is " + r.get(f)).isTrue();
    }
    ByteArrayOutputStream table = new ByteArrayOutputStream();
    LoadReport.print(s, new PrintStream(table, true, StandardCharsets.UTF_8));
    String row = table.toString(StandardCharsets.UTF_8).lines()
        .filter(l -> l.startsWith("stub ")).findFirst().orElseThrow();
    // route µs and warm µs, then clipped
    assertThat(row).containsPattern("–/\\s*–\\s+–/\\s*–\\s+0$");
  }

  /**
   * Output tokens/s counts from the first send, as the simulator counts from the first arrival:
   * a workload whose first request is due 3 s in (a trace's first timestamp, a Poisson arrival)
   * does not spread its tokens over the idle start. Both requests are due together and answered
   * at once, so from the first send they take far less than the 3 s of waiting before it.
   */
  @Test
  void outputTokensPerSecondCountsFromTheFirstSendNotFromTheStart(@TempDir Path dir)
      throws Exception {
    HttpServer server = sseStub("data: {\"choices\":[{\"index\":0,\"text\":\" a\"}]}\n\n"
        + "data: {\"choices\":[{\"index\":0,\"text\":\" b\"}]}\n\n"
        + "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":16,\"completion_tokens\":2}}"
        + "\n\ndata: [DONE]\n\n", () -> { });
    Path trace = dir.resolve("late.jsonl");
    java.nio.file.Files.writeString(trace,
        "{\"timestamp\": 3000, \"input_length\": 16, \"output_length\": 2, \"hash_ids\": [1]}\n"
        + "{\"timestamp\": 3000, \"input_length\": 16, \"output_length\": 2, \"hash_ids\": [2]}\n");
    LoadGenerator g = new LoadGenerator(new LoadGenerator.Settings(
        url(server.getAddress().getPort()), "m", Duration.ofSeconds(20), Integer.MAX_VALUE, 1, 1,
        null));
    open.add(g::close);
    LoadGenerator.Result res = g.run(MooncakeTraceWorkload.load(trace, Integer.MAX_VALUE, 1,
        32_768), "late start");
    assertThat(res.errors()).isEmpty();
    PolicyResult r = res.result();
    assertThat(r.requests()).isEqualTo(2);
    assertThat(r.simulatedSeconds()).as("the run, from its start").isGreaterThanOrEqualTo(3);
    // from the start, 4 tokens over at least 3 s; from the first send, over far less
    assertThat(r.outputTokensPerSec()).isGreaterThan(2 * 4 / r.simulatedSeconds());
  }

  @Test
  void aBodyWithoutLineEndsIsCutAtTheLineLimitNotBufferedUntilTheTimeout() throws Exception {
    HttpServer server = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(),
        0), 50);
    server.createContext("/v1/completions", ex -> {
      ex.getRequestBody().readAllBytes();
      ex.getResponseHeaders().set("Content-Type", "text/event-stream");
      ex.sendResponseHeaders(200, 0);
      OutputStream os = ex.getResponseBody();
      byte[] chunk = new byte[64 * 1024];
      java.util.Arrays.fill(chunk, (byte) 'x');
      try {
        os.write("data: ".getBytes(StandardCharsets.UTF_8));
        for (int i = 0; i < 4 * 16; i++) { // 4 MiB, no line end
          os.write(chunk);
        }
        os.flush();
      } catch (java.io.IOException gone) {
        // the client cancelled: what the test expects
      }
      ex.close();
    });
    server.setExecutor(java.util.concurrent.Executors.newCachedThreadPool());
    server.start();
    open.add(() -> server.stop(0));
    long start = System.nanoTime();
    LoadGenerator.Result res = generator(url(server.getAddress().getPort()),
        Duration.ofSeconds(30), Integer.MAX_VALUE).run(small(2, 1), "no line ends");
    assertThat(res.errors()).isEqualTo(Map.of("stream error", 2));
    // ended by the line limit, not by the 30 s timeout
    assertThat((System.nanoTime() - start) / 1e9).isLessThan(20);
  }

  @Test
  void theLoadCommandPrintsTheSimulatorsTableAndWritesJson(@TempDir Path dir) throws Exception {
    EmulatedReplicas r = replicas(1);
    Path json = dir.resolve("load.json");
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    ByteArrayOutputStream err = new ByteArrayOutputStream();
    int code = Main.run(new String[] {"load", "--target", "http://127.0.0.1:" + r.httpPort(0),
        "--speed", "20", "--groups", "2", "--users-per-group", "2", "--system-prompt-len", "128",
        "--question-len", "16", "--output-len", "4", "--requests", "8", "--concurrency", "2",
        "--json", json.toString(), "--chart", dir.resolve("ttft.png").toString(),
        "--label", "replica-0"},
        new PrintStream(out, true, StandardCharsets.UTF_8),
        new PrintStream(err, true, StandardCharsets.UTF_8));
    String text = out.toString(StandardCharsets.UTF_8);
    assertThat(code).as(err.toString(StandardCharsets.UTF_8)).isZero();
    assertThat(text).contains("== shared-prefix").contains("ttft p50").contains("replica-0")
        .contains("replica-0: 8 sent, 8 completed, 0 failed");
    assertThat(err.toString(StandardCharsets.UTF_8)).contains("8 of 8 requests done");

    assertThat(Files.size(dir.resolve("ttft.png"))).isPositive();
    JsonNode root = JSON.readTree(Files.readString(json));
    assertThat(root.at("/run/arguments/0").asText()).isEqualTo("--target");
    assertThat(root.get("target").asText()).isEqualTo("http://127.0.0.1:" + r.httpPort(0));
    JsonNode s = root.at("/scenarios/0");
    assertThat(s.get("scenario").asText()).isEqualTo("shared-prefix");
    assertThat(s.get("speed").asDouble()).isEqualTo(20.0);
    assertThat(s.at("/load/requests").asInt()).isEqualTo(8);
    JsonNode res = s.at("/results/0");
    assertThat(res.get("policy").asText()).isEqualTo("replica-0");
    assertThat(res.get("requests").asInt()).isEqualTo(8);
    assertThat(res.get("sentRequests").asInt()).isEqualTo(8);
    assertThat(res.get("failedRequests").asInt()).isZero();
    assertThat(res.get("errors").isObject()).isTrue();
    for (String f : List.of("prefixCacheHitRate", "ttftP50Ms", "ttftP95Ms", "ttftP99Ms",
        "itlP50Ms", "itlP95Ms", "e2eP50Ms", "e2eP95Ms", "outputTokensPerSec", "wallSeconds")) {
      assertThat(res.has(f)).as(f).isTrue();
    }
  }

  @Test
  void loadNamesAnOptionOfAScenarioItDoesNotRun() throws Exception {
    // load runs shared-prefix unless told otherwise: the dialogs setting would do nothing
    LoadCommand.Options o = LoadCommand.parse(new String[] {"--target", "http://127.0.0.1:1",
        "--dialogs", "4", "--concurrency", "2"});
    assertThat(o).isNotNull();
    assertThat(o.warnings()).singleElement().asString()
        .startsWith("--dialogs has no effect: it sets the multi-turn scenario");
  }

  @Test
  void loadUsageErrorsNameTheOption() {
    assertThat(usageError("load", "--scenario", "shared-prefix")).contains("--target is required");
    assertThat(usageError("load", "--target", "ftp://x")).contains("--target must be an http://");
    assertThat(usageError("load", "--target", "http://127.0.0.1:1", "--policies", "sticky"))
        .contains("--policies does not apply to load");
    // simulator-only options: refused, not silently ignored (no CSV written, no gateways)
    for (String[] sim : List.of(new String[] {"--gateways", "2"},
        new String[] {"--shared-state", "replicated"},
        new String[] {"--replication-delay-ms", "5"},
        new String[] {"--requests-csv", "requests.csv"}, new String[] {"--dominance"})) {
      List<String> args = new ArrayList<>(List.of("load", "--target", "http://127.0.0.1:1"));
      args.addAll(List.of(sim));
      assertThat(usageError(args.toArray(String[]::new)))
          .contains(sim[0] + " does not apply to load");
    }
    assertThat(usageError("load", "--target", "http://127.0.0.1:1", "--timeout-s", "0"))
        .contains("--timeout-s must be in");
    // a flag given a value: named, not reported as a stray argument
    assertThat(usageError("load", "--target", "http://127.0.0.1:1", "--quiet=yes"))
        .contains("--quiet takes no value");
    assertThat(usageError("--quiet=yes")).contains("--quiet takes no value");
    assertThat(usageError("--dominance=1")).contains("--dominance takes no value");
    assertThat(usageError("load", "--target", "http://127.0.0.1:1", "--bogus", "1"))
        .contains("unknown option '--bogus'");
  }

  /**
   * An empty {@code --model} (a shell variable left unset) would send {@code "model": ""}, which
   * epp4j's gateway refuses as a missing model: every request of the run would fail.
   */
  @Test
  void anEmptyModelIsRefusedNamingTheOption() {
    for (String empty : List.of("", " ")) {
      assertThat(usageError("load", "--target", "http://127.0.0.1:1", "--model", empty))
          .contains("--model must not be empty");
      assertThat(usageError("load", "--target", "http://127.0.0.1:1", "--model=" + empty))
          .contains("--model must not be empty");
    }
  }

  @Test
  void loadRefusesAnOptionGivenTwiceAndTwoReportsInOneFile(@TempDir Path dir) {
    // http://127.0.0.1:1 refuses connections: were these accepted, the run would end with
    // exit code 1, not 2
    for (String option : List.of("--label", "--model", "--speed", "--max-requests",
        "--timeout-s", "--warmup")) {
      assertThat(usageError("load", "--target", "http://127.0.0.1:1", "--max-requests", "1",
          option, "2", option + "=3")).as(option).contains(option + " is given twice");
    }
    assertThat(usageError("load", "--target", "http://127.0.0.1:1", "--target",
        "http://127.0.0.1:2")).contains("--target is given twice");
    assertThat(usageError("load", "--target", "http://127.0.0.1:1", "--seed", "1",
        "--seed", "2")).contains("--seed is given twice");
    Path f = dir.resolve("report");
    assertThat(usageError("load", "--target", "http://127.0.0.1:1", "--max-requests", "1",
        "--json", f.toString(), "--chart", f.toString()))
        .contains("--json and --chart name the same file");
    assertThat(f).doesNotExist();
  }

  /**
   * A misspelt flag as the last argument ({@code --quite} for {@code --quiet}) is an unknown
   * option, not an option that "needs a value"; a real option left without its value still is.
   */
  @Test
  void aMisspeltLastArgumentIsAnUnknownOption() {
    assertThat(usageError("--quite")).contains("unknown option '--quite'")
        .doesNotContain("needs a value");
    assertThat(usageError("--seed", "2", "--polices")).contains("unknown option '--polices'");
    assertThat(usageError("--seed")).contains("--seed needs a value");
    assertThat(usageError("--groups")).contains("--groups needs a value");
    assertThat(usageError("--config")).contains("--config needs a value");
    assertThat(usageError("load", "--target", "http://127.0.0.1:1", "--quite"))
        .contains("unknown option '--quite'").doesNotContain("needs a value");
    assertThat(usageError("load", "--target", "http://127.0.0.1:1", "--groups"))
        .contains("--groups needs a value");
    assertThat(usageError("load", "--target", "http://127.0.0.1:1", "--warmup"))
        .contains("--warmup needs a value");
    assertThat(usageError("load", "--target", "http://127.0.0.1:1", "--policies"))
        .contains("--policies does not apply to load");
    assertThat(usageError("serve", "--replicas", "1", "--port", "8000", "--speeed"))
        .contains("unknown option --speeed").doesNotContain("needs a value");
    assertThat(usageError("serve", "--replicas", "1", "--port")).contains("--port needs a value");
  }

  /**
   * An option left without its value took the next option as its value: {@code --label --quiet}
   * labelled the run "--quiet" and ran without {@code --quiet}.
   */
  @Test
  void loadNamesAnOptionFollowedByAnotherOptionInsteadOfItsValue() {
    // http://127.0.0.1:1 refuses connections: were these accepted, the run would end with
    // exit code 1, not 2
    String target = "http://127.0.0.1:1";
    for (String option : List.of("--label", "--model", "--max-requests", "--warmup")) {
      assertThat(usageError("load", "--target", target, option, "--quiet")).as(option)
          .contains(option + " needs a value, but is followed by the option --quiet");
    }
    assertThat(usageError("load", "--target", "--label", "x"))
        .contains("--target needs a value, but is followed by the option --label");
    // the workload's options, which the simulator's parser reads
    assertThat(usageError("load", "--target", target, "--json", "--quiet"))
        .contains("--json needs a value, but is followed by the option --quiet");
    assertThat(usageError("load", "--target", target, "--seed", "--max-requests", "1"))
        .contains("--seed needs a value, but is followed by the option --max-requests");
    // a one-dash word that is no number is an option as well ("--label -q" named the run -q)
    for (String option : List.of("--label", "--model", "--seed", "--json")) {
      assertThat(usageError("load", "--target", target, option, "-q")).as(option)
          .contains(option + " needs a value, but is followed by the option -q");
    }
    // a negative number is a value, for the range check
    assertThat(usageError("load", "--target", target, "--warmup", "-1"))
        .contains("--warmup must be in [0, 100000], got -1");
    assertThat(usageError("load", "--target", target, "--groups", "-1"))
        .contains("--groups").doesNotContain("needs a value");
    // given with =, the simulator's parser takes the value as it is
    assertThat(usageError("load", "--target", target, "--output-len=-x"))
        .contains("--output-len: ").doesNotContain("needs a value");
    assertThat(usageError("load", "--target", target, "--quite", "--max-requests", "1"))
        .contains("unknown option '--quite'").doesNotContain("needs a value");
  }

  private static String usageError(String... args) {
    ByteArrayOutputStream err = new ByteArrayOutputStream();
    int code = Main.run(args, new PrintStream(new ByteArrayOutputStream(), true,
        StandardCharsets.UTF_8), new PrintStream(err, true, StandardCharsets.UTF_8));
    assertThat(code).isEqualTo(2);
    return err.toString(StandardCharsets.UTF_8);
  }
}
