package io.epp4j.jmh;

import io.epp4j.api.ChatMessage;
import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RoutingDecision;
import io.epp4j.core.Router;
import io.epp4j.kvevents.KvBlockIndex;
import io.epp4j.kvevents.KvEventsPresets;
import io.epp4j.kvevents.Tokenizer;
import io.epp4j.kvevents.CachingChatTokenizer;
import io.epp4j.kvevents.HuggingFaceTokenizer;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
import org.jspecify.annotations.Nullable;
import org.openjdk.jmh.annotations.AuxCounters;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;

/**
 * In-process tokenization of chats per template family, in tokens per second (the
 * {@code tokens} counter; ops/s are requests). Real tokenizer files of Llama 3.1, Qwen3, Gemma 3
 * and DeepSeek V3 (fetched by {@code routing-kv-events/scripts/fetch-tokenizers.sh}). The
 * workload is multi-turn sessions: each request is the next turn of a dialog, so it re-sends the
 * history (system prompt, earlier turns) and adds one new user message.
 *
 * <ul>
 *   <li>{@code encodePlain}: {@code encode} of requests' text rendered beforehand: the
 *       tokenizer alone;
 *   <li>{@code encodeChatWhole}: render the model's Jinja template and tokenize the whole chat;
 *   <li>{@code encodeChatCached}: the same through {@link CachingChatTokenizer#ofRenderedChats},
 *       which renders the whole chat but tokenizes only chunks it has not seen.
 * </ul>
 *
 * <p>Routing cost, ops/s of {@code Router.route} for the same chat requests over 8 endpoints:
 * {@code routePreciseChat} with the {@code epp-precise} preset tokenizing in process (the
 * cached tokenizer, the model's template; the index is empty, so every request pays the full
 * tokenization, key chain and lookup), {@code routeApproximateChat} with the EPP default
 * profile (approximate prefix cache over the request's text).
 */
@Warmup(iterations = 2, time = 2)
@Measurement(iterations = 3, time = 2)
@Fork(value = 1, jvmArgsAppend = {
    BenchmarkJvm.HEAP_MIN, BenchmarkJvm.HEAP_MAX, BenchmarkJvm.PRE_TOUCH, BenchmarkJvm.HUGE_PAGES})
@BenchmarkMode(Mode.Throughput)
@OutputTimeUnit(TimeUnit.SECONDS)
public class ChatTokenizerBenchmark {
  static final int TURNS = 8;
  private static final String[] WORDS = ("the a of to and in is that for it with as on be by "
      + "this are from or an at which cache prefix token block routing request model replica "
      + "latency throughput attention layer memory GPU queue score endpoint session prompt "
      + "answer question system user assistant tool call result value error retry budget "
      + "because however therefore while when where what why how 12 256 2048 3.5 % ( ) , . ?")
      .split(" ");

  /** Token counter: JMH reports it per second. */
  @State(Scope.Thread)
  @AuxCounters(AuxCounters.Type.OPERATIONS)
  public static class Tokens {
    public long tokens;

    @Setup(Level.Iteration)
    public void reset() {
      tokens = 0;
    }
  }

  /** One family's tokenizer and a pool of dialogs. */
  @State(Scope.Thread)
  public static class Chats {
    @Param({"llama3_1", "qwen3", "gemma3", "deepseek_v3"})
    public String family;

    HuggingFaceTokenizer tokenizer;
    @Nullable CachingChatTokenizer cached;
    List<List<ChatMessage>> dialogs = new ArrayList<>();
    List<String> rendered = new ArrayList<>();
    long serial;
    int next;

    @Setup(Level.Trial)
    public void setUp() throws IOException {
      String root = System.getenv("EPP4J_TOKENIZERS");
      Path dir = (root == null || root.isEmpty()
          ? Path.of(System.getProperty("user.home"), ".cache", "epp4j-tokenizers")
          : Path.of(root)).resolve(family);
      if (!Files.isRegularFile(dir.resolve("tokenizer.json"))) {
        throw new IllegalStateException("no tokenizer files in " + dir
            + "; run routing-kv-events/scripts/fetch-tokenizers.sh");
      }
      tokenizer = HuggingFaceTokenizer.load(dir);
      cached = tokenizer.chunkingExact()
          ? CachingChatTokenizer.ofRenderedChats(tokenizer, 4_000_000) : null;
      SplittableRandom rnd = new SplittableRandom(17);
      for (int d = 0; d < 16; d++) {
        List<ChatMessage> dialog = new ArrayList<>();
        dialog.add(ChatMessage.system(words(rnd, 120)));
        for (int t = 0; t < TURNS; t++) {
          dialog.add(ChatMessage.user(words(rnd, 80)));
          dialog.add(ChatMessage.assistant(words(rnd, 160)));
        }
        dialogs.add(dialog);
      }
      for (int i = 0; i < dialogs.size() * TURNS; i++) {
        rendered.add(tokenizer.renderChat(nextRequest(), null, true));
      }
      next = 0;
    }

    /** The next request: a dialog's history up to some turn plus a user message never seen. */
    List<ChatMessage> nextRequest() {
      int i = next++;
      List<ChatMessage> dialog = dialogs.get((i / TURNS) % dialogs.size());
      int turn = i % TURNS;
      List<ChatMessage> req = new ArrayList<>(dialog.subList(0, 1 + 2 * turn));
      req.add(ChatMessage.user(dialog.get(1 + 2 * turn).content() + " #" + serial++));
      return req;
    }

    @TearDown(Level.Trial)
    public void tearDown() {
      tokenizer.close();
    }

    private static String words(SplittableRandom rnd, int n) {
      StringBuilder sb = new StringBuilder();
      for (int i = 0; i < n; i++) {
        sb.append(i == 0 ? "" : " ").append(WORDS[rnd.nextInt(WORDS.length)]);
      }
      return sb.toString();
    }
  }

  /** Routers over the family's chats. */
  @State(Scope.Thread)
  public static class Routers {
    Router precise;
    Router approximate;

    @Setup(Level.Trial)
    public void setUp(Chats c) {
      SplittableRandom rnd = new SplittableRandom(3);
      List<Endpoint> eps = BenchmarkPrompts.endpoints(8);
      Tokenizer tokenizer = c.cached != null ? c.cached : c.tokenizer;
      precise = Router.builder().endpoints(eps).randomSeed(1)
          .service(KvBlockIndex.class, KvBlockIndex.create())
          .service(Tokenizer.class, new Tokenizer() {
            // the benchmark's tokenizer outlives the router: closing the router must not close it
            @Override
            public int[] encode(String text) {
              return tokenizer.encode(text);
            }

            @Override
            public int[] encodeChat(List<ChatMessage> messages, @Nullable String toolsJson) {
              return tokenizer.encodeChat(messages, toolsJson);
            }
          })
          .configYaml(KvEventsPresets.yaml(KvEventsPresets.EPP_PRECISE), "epp-precise").build();
      approximate = Router.builder().endpoints(eps).randomSeed(1).build();
      BenchmarkPrompts.publishMetrics(precise, rnd);
      BenchmarkPrompts.publishMetrics(approximate, rnd);
    }

    @TearDown(Level.Trial)
    public void tearDown() {
      precise.close();
      approximate.close();
    }
  }

  @Benchmark
  public RoutingDecision routePreciseChat(Chats c, Routers r) {
    return r.precise.route(InferenceRequest.builder().model(BenchmarkPrompts.MODEL)
        .messages(c.nextRequest()).build());
  }

  @Benchmark
  public RoutingDecision routeApproximateChat(Chats c, Routers r) {
    return r.approximate.route(InferenceRequest.builder().model(BenchmarkPrompts.MODEL)
        .messages(c.nextRequest()).build());
  }

  @Benchmark
  public int[] encodePlain(Chats c, Tokens n) {
    int[] t = c.tokenizer.encode(c.rendered.get(c.next++ % c.rendered.size()));
    n.tokens += t.length;
    return t;
  }

  @Benchmark
  public int[] encodeChatWhole(Chats c, Tokens n) {
    int[] t = c.tokenizer.encodeChat(c.nextRequest());
    n.tokens += t.length;
    return t;
  }

  @Benchmark
  public int[] encodeChatCached(Chats c, Tokens n) {
    CachingChatTokenizer cached = c.cached;
    if (cached == null) {
      throw new IllegalStateException(c.family + ": chunked caching is not exact for its template");
    }
    int[] t = cached.encodeChat(c.nextRequest());
    n.tokens += t.length;
    return t;
  }
}
