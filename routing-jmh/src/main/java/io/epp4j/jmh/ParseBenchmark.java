package io.epp4j.jmh;

import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Result;
import io.epp4j.core.OpenAiRequestParser;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
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
import org.openjdk.jmh.annotations.Warmup;

/**
 * OpenAI chat-body parsing. The auxiliary counter {@code bytes} reports parsed bytes per
 * second; divide by 1e6 for MB/s.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.Throughput)
@OutputTimeUnit(TimeUnit.SECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(value = 1, jvmArgsAppend = {
    BenchmarkJvm.HEAP_MIN, BenchmarkJvm.HEAP_MAX, BenchmarkJvm.PRE_TOUCH, BenchmarkJvm.HUGE_PAGES})
public class ParseBenchmark {

  @Param({"1024", "10240", "102400"})
  public int bodyBytes;

  private final OpenAiRequestParser parser = OpenAiRequestParser.defaults();
  private final Map<String, String> headers = Map.of("x-session-id", "alice", "x-request-id", "r1");
  private byte[] body;

  @State(Scope.Thread)
  @AuxCounters(AuxCounters.Type.OPERATIONS)
  public static class Bytes {
    public long bytes;
  }

  @Setup(Level.Trial)
  public void setUp() {
    SplittableRandom rnd = new SplittableRandom(3);
    int textBytes = Math.max(16, bodyBytes - 400);
    String system = BenchmarkPrompts.text(rnd, textBytes * 3 / 4);
    String user = BenchmarkPrompts.text(rnd, textBytes - system.length());
    String json = "{\"model\":\"qwen3-1.7b\",\"stream\":true,\"max_tokens\":256,\"temperature\":0.7,"
        + "\"messages\":[{\"role\":\"system\",\"content\":\"" + system + "\"},"
        + "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"" + user + "\"}]}],"
        + "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"lookup\",\"parameters\":{\"type\":\"object\"}}}]}";
    body = json.getBytes(StandardCharsets.UTF_8);
  }

  @Benchmark
  public Result<InferenceRequest> parseChat(Bytes counter) {
    counter.bytes += body.length;
    return parser.parse("/v1/chat/completions", headers, body);
  }
}
