package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import com.sun.net.httpserver.HttpServer;
import io.epp4j.api.ChatMessage;
import io.epp4j.api.InferenceRequest;
import io.epp4j.core.Router;
import java.io.File;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Callable;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The DJL tokenizer binding and the jinjava template engine are optional dependencies: precise
 * mode that tokenizes through vLLM's {@code /tokenize} must run on a class path without them. The
 * scenario runs in a class loader that sees the test class path minus every {@code ai.djl} and
 * {@code com.hubspot.jinjava} jar, so any class of theirs the plugin touched would fail with
 * {@link NoClassDefFoundError}.
 */
class PreciseModeWithoutDjlTest {

  private static final int[] TOKENS = {11, 12, 13, 14, 21, 22, 23, 24, 31, 32, 33, 34};

  @Test
  void preciseModeWithTheVllmTokenizerNeedsNoDjlClass() throws Exception {
    List<URL> urls = new ArrayList<>();
    int hidden = 0;
    for (String entry : testClassPath()) {
      String path = entry.replace(File.separatorChar, '/');
      if (path.contains("/ai/djl/") || path.contains("/com/hubspot/jinjava/")) {
        hidden++;
      } else if (!entry.isEmpty()) {
        urls.add(Path.of(entry).toUri().toURL());
      }
    }
    assertThat(hidden).as("DJL and jinjava jars found on the test class path (to hide)")
        .isGreaterThanOrEqualTo(2);

    AtomicInteger tokenizeCalls = new AtomicInteger();
    HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
    server.createContext("/tokenize", ex -> {
      tokenizeCalls.incrementAndGet();
      ex.getRequestBody().readAllBytes();
      StringBuilder tokens = new StringBuilder();
      for (int t : TOKENS) {
        tokens.append(tokens.length() == 0 ? "" : ",").append(t);
      }
      byte[] answer = ("{\"count\":" + TOKENS.length + ",\"max_model_len\":4096,\"tokens\":["
          + tokens + "]}").getBytes(StandardCharsets.UTF_8);
      ex.sendResponseHeaders(200, answer.length);
      try (OutputStream os = ex.getResponseBody()) {
        os.write(answer);
      }
    });
    server.start();
    Thread thread = Thread.currentThread();
    ClassLoader previous = thread.getContextClassLoader();
    try (URLClassLoader noDjl = new URLClassLoader(urls.toArray(URL[]::new),
        ClassLoader.getPlatformClassLoader())) {
      assertThatThrownBy(() -> Class.forName(
          "ai.djl.huggingface.tokenizers.HuggingFaceTokenizer", false, noDjl))
          .isInstanceOf(ClassNotFoundException.class);
      assertThatThrownBy(() -> Class.forName("com.hubspot.jinjava.Jinjava", false, noDjl))
          .isInstanceOf(ClassNotFoundException.class);
      // the router finds its plugins on the context class loader
      thread.setContextClassLoader(noDjl);
      Callable<?> scenario = (Callable<?>) Class.forName(Scenario.class.getName(), true, noDjl)
          .getConstructor(int.class).newInstance(server.getAddress().getPort());
      assertThat(scenario.call()).as("routed by the blocks the vLLM-tokenized chat matches")
          .isEqualTo("10.0.0.2:8000");
    } finally {
      thread.setContextClassLoader(previous);
      server.stop(0);
    }
    assertThat(tokenizeCalls.get()).as("the chat went through vLLM's /tokenize").isPositive();
  }

  @Test
  void withoutJinjavaTheHuggingFaceTokenizerStillTokenizesTextAndSaysWhyChatsFail(
      @TempDir Path dir) throws Exception {
    List<String> kept = new ArrayList<>();
    int hidden = 0;
    for (String entry : testClassPath()) {
      if (entry.replace(File.separatorChar, '/').contains("/com/hubspot/jinjava/")) {
        hidden++;
      } else if (!entry.isEmpty()) {
        kept.add(entry);
      }
    }
    assertThat(hidden).as("jinjava jar found on the test class path (to hide)").isPositive();
    HuggingFaceTokenizerTest.modelDir(dir, "{% for m in messages %}{{ m.content }}{% endfor %}");
    // a JVM of its own: DJL's native library can be loaded by one class loader per JVM only
    Process p = new ProcessBuilder(Path.of(System.getProperty("java.home"), "bin", "java")
        .toString(), "-cp", String.join(File.pathSeparator, kept),
        "-DDJL_CACHE_DIR=" + dir.resolve("djl-cache"), "-Dai.djl.offline=true",
        TextOnly.class.getName(), dir.toString())
        .redirectError(ProcessBuilder.Redirect.DISCARD).start();
    assertThat(p.waitFor(60, java.util.concurrent.TimeUnit.SECONDS)).as("finished").isTrue();
    String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8).trim();
    assertThat(out).isEqualTo("[6, 7] / " + dir
        + " has a chat template but com.hubspot.jinjava:jinjava is not on the class path to"
        + " render it; add it, or tokenize chats with a VllmTokenizer");
  }

  /** Loads a model directory with a chat template, in a JVM without jinjava. */
  public static final class TextOnly {
    private TextOnly() {}

    public static void main(String[] args) throws Exception {
      try (HuggingFaceTokenizer t = HuggingFaceTokenizer.load(Path.of(args[0]))) {
        String text = java.util.Arrays.toString(t.encode("hello world"));
        try {
          t.encodeChat(List.of(ChatMessage.user("hello")));
          System.out.println(text + " / chat tokenized");
        } catch (Tokenizer.TokenizationException e) {
          System.out.println(text + " / " + e.getMessage());
        }
      }
    }
  }

  /** Surefire's real test class path (java.class.path may be a manifest-only jar). */
  private static String[] testClassPath() {
    String cp = System.getProperty("surefire.test.class.path",
        System.getProperty("java.class.path"));
    return cp.split(File.pathSeparator);
  }

  /**
   * Precise mode configured with {@code tokenizer: {type: vllm}}: one endpoint holds the blocks
   * of the tokens the stand-in {@code /tokenize} returns; a chat request must be routed there.
   * Loaded by the class loader without DJL.
   */
  public static final class Scenario implements Callable<String> {
    private final int port;

    public Scenario(int port) {
      this.port = port;
    }

    @Override
    public String call() {
      KvBlockIndex index = KvBlockIndex.builder().defaultBlockSize(4).build();
      index.apply("10.0.0.2:8000", KvEvent.BlockStored.of(new long[] {1, 2, 3}, null, TOKENS, 4));
      String yaml = """
          plugins:
          - type: precise-prefix-cache-scorer
            parameters:
              tokenizer: {type: vllm, url: "http://127.0.0.1:%d", model: m, timeoutMs: 5000}
          schedulingProfiles:
          - name: default
            plugins:
            - pluginRef: precise-prefix-cache-scorer
          """.formatted(port);
      try (Router router = Router.builder().endpoints(PrecisePrefixCacheScorerTest.EPS)
          .service(KvBlockIndex.class, index).configYaml(yaml, "no-djl").build()) {
        InferenceRequest req = InferenceRequest.builder().model("m")
            .messages(List.of(ChatMessage.user("what is a KV cache?"))).build();
        return router.route(req).primary().id();
      }
    }
  }
}
