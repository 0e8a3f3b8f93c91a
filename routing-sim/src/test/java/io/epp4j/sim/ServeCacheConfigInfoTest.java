package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * {@code vllm:cache_config_info} carries, as labels, the fields of vLLM's {@code CacheConfig} the
 * emulated engine has a value for, each written as Python's {@code str()} writes it
 * ({@code True}, {@code None}, {@code 0.15}), in name order as vLLM's multiprocess collector
 * writes a series' labels. The emulator wrote 4 labels; a dashboard or a scraper that reads the
 * KV cache's data type or the GPU memory share from this series found none.
 */
@Timeout(60)
class ServeCacheConfigInfoTest {
  private static final Pattern LABEL = Pattern.compile("(\\w+)=\"([^\"]*)\"");
  private final OneReplica replica = new OneReplica();

  @AfterEach
  void close() {
    replica.close();
  }

  private static String infoLine(int port) throws Exception {
    HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();
    HttpResponse<String> res = http.send(HttpRequest.newBuilder(
        URI.create("http://127.0.0.1:" + port + "/metrics")).timeout(Duration.ofSeconds(30))
        .GET().build(), HttpResponse.BodyHandlers.ofString());
    assertThat(res.statusCode()).isEqualTo(200);
    List<String> lines = new ArrayList<>();
    for (String line : res.body().split("\n")) {
      if (line.startsWith("vllm:cache_config_info")) {
        lines.add(line);
      }
    }
    assertThat(lines).hasSize(1);
    return lines.get(0);
  }

  private static Map<String, String> labels(String line) {
    Map<String, String> labels = new LinkedHashMap<>();
    Matcher m = LABEL.matcher(line.substring(line.indexOf('{'), line.lastIndexOf('}')));
    while (m.find()) {
      labels.put(m.group(1), m.group(2));
    }
    return labels;
  }

  @Test
  void theLabelsAreTheCacheConfigFieldsTheEngineHasInPythonsWords() throws Exception {
    for (HardwareProfile profile
        : List.of(HardwareProfile.qwen3H100Mps6(), HardwareProfile.llama31H100())) {
      String line;
      try (OneReplica one = new OneReplica()) {
        line = infoLine(one.start(base -> new Serve.Options(1, base, base + 1_000, false, 20,
            profile, 1, List.of(), null)));
      }
      assertThat(line).endsWith("} 1.0");
      Map<String, String> labels = labels(line);
      assertThat(labels.keySet()).as(line).containsExactly("block_size", "cache_dtype",
          "enable_prefix_caching", "engine", "gpu_memory_utilization", "is_attention_free",
          "num_gpu_blocks", "num_gpu_blocks_override", "sliding_window");
      assertThat(labels).containsEntry("block_size", String.valueOf(profile.blockSize()))
          .containsEntry("cache_dtype", "auto")
          .containsEntry("enable_prefix_caching", "True")
          .containsEntry("engine", "0")
          .containsEntry("is_attention_free", "False")
          .containsEntry("num_gpu_blocks", String.valueOf(profile.kvBlocksPerReplica()))
          .containsEntry("num_gpu_blocks_override", "None")
          .containsEntry("sliding_window", "None");
    }
  }

  @Test
  void theGpuMemoryShareIsTheProfilesAsPythonWritesAFloat() throws Exception {
    int port = replica.start();
    assertThat(labels(infoLine(port))).containsEntry("gpu_memory_utilization", "0.15");
  }

  @Test
  void aFloatIsWrittenAsPythonsStrWritesIt() {
    assertThat(EmulatedServer.pythonFloat(0.15)).isEqualTo("0.15");
    assertThat(EmulatedServer.pythonFloat(0.9)).isEqualTo("0.9");
    assertThat(EmulatedServer.pythonFloat(1.0)).isEqualTo("1.0");
    assertThat(EmulatedServer.pythonFloat(100.0)).isEqualTo("100.0");
    assertThat(EmulatedServer.pythonFloat(0.0001)).isEqualTo("0.0001");
    assertThat(EmulatedServer.pythonFloat(1e-5)).isEqualTo("1e-05");
    assertThat(EmulatedServer.pythonFloat(-2.5e-7)).isEqualTo("-2.5e-07");
    assertThat(EmulatedServer.pythonFloat(1.5e16)).isEqualTo("1.5e+16");
    assertThat(EmulatedServer.pythonFloat(1e100)).isEqualTo("1e+100");
    assertThat(EmulatedServer.pythonFloat(0.0)).isEqualTo("0.0");
  }
}
