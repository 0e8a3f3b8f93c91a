package io.epp4j.sim;

import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import org.jspecify.annotations.Nullable;

/**
 * What one replica runs on and how long its engine steps take: model shape, GPU speed, how many
 * replicas share a GPU, and the vLLM engine limits. Every number of the built-in profile and its
 * source is listed in {@code routing-sim/README.md}.
 *
 * <p>Latency model (a roofline per step): a step that computes {@code T} new tokens is bound by
 * the larger of its compute time, {@code FLOPs / (peak × computeEfficiency)}, and its memory time,
 * {@code bytes / (bandwidth × bandwidthEfficiency)}, where FLOPs = 2 × non-embedding parameters
 * × T + attention (4 × layers × query width × Σ new × context) + the LM head for each sampled
 * token, and bytes = the weights (read once per step) + the KV of every token attended to or
 * written. That is the step's cost on an unshared GPU; replicas that share a GPU split it while
 * their steps overlap (see {@link GpuShare}). A fixed CPU overhead per step and per sequence is
 * added outside the GPU share.
 *
 * @param name                     profile name
 * @param model                    model name the router sees
 * @param nonEmbeddingParams       parameters in the transformer blocks
 * @param weightBytes              bytes of weights read every step
 * @param kvBytesPerToken          KV bytes per token over all layers
 * @param layers                   transformer layers
 * @param queryWidth               attention heads × head dimension
 * @param hidden                   hidden size
 * @param vocab                    vocabulary size
 * @param maxModelLen              context length; longer prompts are clipped
 * @param gpuMemoryBytes           GPU memory as the runtime reports it
 * @param gpuMemoryUtilization     vLLM {@code --gpu-memory-utilization} of each replica
 * @param runtimeOverheadBytes     per-replica memory that is neither weights nor KV (CUDA context,
 *                                 activations, CUDA graphs)
 * @param peakFlops                dense BF16 tensor throughput of the GPU
 * @param peakBandwidth            HBM bandwidth of the GPU, bytes/s
 * @param computeEfficiency        achieved fraction of {@code peakFlops}
 * @param bandwidthEfficiency      achieved fraction of {@code peakBandwidth}
 * @param replicasPerGpu           replicas sharing one GPU (MPS)
 * @param blockSize                KV block size in tokens
 * @param maxNumBatchedTokens      vLLM {@code max_num_batched_tokens}
 * @param maxNumSeqs               vLLM {@code max_num_seqs}
 * @param stepOverheadSeconds      CPU time per engine step
 * @param perSequenceOverheadSeconds CPU time per scheduled sequence per step
 */
public record HardwareProfile(
    String name,
    String model,
    double nonEmbeddingParams,
    double weightBytes,
    long kvBytesPerToken,
    int layers,
    int queryWidth,
    int hidden,
    int vocab,
    int maxModelLen,
    double gpuMemoryBytes,
    double gpuMemoryUtilization,
    double runtimeOverheadBytes,
    double peakFlops,
    double peakBandwidth,
    double computeEfficiency,
    double bandwidthEfficiency,
    int replicasPerGpu,
    int blockSize,
    int maxNumBatchedTokens,
    int maxNumSeqs,
    double stepOverheadSeconds,
    double perSequenceOverheadSeconds) {

  /** Name of the built-in profile. */
  public static final String QWEN3_1_7B_H100_MPS6 = "qwen3-1.7b-h100-mps6";

  /**
   * Qwen3-1.7B on an H100 SXM 80GB shared by six vLLM replicas through MPS. Sources in
   * {@code routing-sim/README.md}.
   */
  public static HardwareProfile qwen3H100Mps6() {
    return new HardwareProfile(
        QWEN3_1_7B_H100_MPS6,
        "qwen3-1.7b",
        1.4e9,                 // model card: 1.7B parameters, 1.4B non-embedding
        3.4e9,                 // ~1.7B bf16 parameters = 3.4 GB
        114_688L,              // 28 layers × 8 KV heads × 128 × 2 (K,V) × 2 bytes
        28,
        16 * 128,              // 16 query heads × head dim 128
        2048,
        151_936,
        32_768,                // model card context length
        80.0 * (1L << 30),     // H100 80GB: 80 GiB of HBM3
        0.15,                  // six replicas on one GPU: 6 × 0.15 = 0.9, vLLM's default total
        1.5e9,                 // CUDA context, activation peak, CUDA graphs (assumed)
        989e12,                // H100 SXM dense BF16 tensor core peak
        3.35e12,               // H100 SXM HBM3 bandwidth
        0.5,                   // assumed achieved fraction of peak compute
        0.8,                   // assumed achieved fraction of peak bandwidth
        6,
        16,                    // vLLM default block size
        8192,                  // vLLM max_num_batched_tokens on an H100 (vllm serve)
        1024,                  // vLLM max_num_seqs default on >= 70 GiB GPUs
        0.002,                 // assumed CPU time per engine step
        0.00002);              // assumed CPU time per scheduled sequence
  }

  /** Name of the full-GPU profile. */
  public static final String LLAMA3_1_8B_H100 = "llama3.1-8b-h100";

  /**
   * Llama-3.1-8B on a whole H100 SXM 80GB, one vLLM replica per GPU with vLLM's defaults. Sources
   * in {@code routing-sim/README.md}.
   */
  public static HardwareProfile llama31H100() {
    return new HardwareProfile(
        LLAMA3_1_8B_H100,
        "llama3.1-8b",
        6.98e9,                // 8.03B parameters less input embeddings and LM head (2 × 128,256 × 4096)
        16.06e9,               // 8.03B bf16 parameters = 16.06 GB
        131_072L,              // 32 layers × 8 KV heads × 128 × 2 (K,V) × 2 bytes
        32,
        32 * 128,              // 32 query heads × head dim 128
        4096,
        128_256,
        131_072,               // max_position_embeddings; vLLM's default max_model_len, and it fits
        80.0 * (1L << 30),     // H100 80GB: 80 GiB of HBM3
        0.9,                   // vLLM's default --gpu-memory-utilization
        3.0e9,                 // CUDA context, activation peak at 8192 batched tokens, CUDA graphs
                               // (assumed, twice the 1.7B profile's for a 4× wider model)
        989e12,                // H100 SXM dense BF16 tensor core peak
        3.35e12,               // H100 SXM HBM3 bandwidth
        0.5,                   // assumed achieved fraction of peak compute (as the 1.7B profile)
        0.8,                   // assumed achieved fraction of peak bandwidth (as the 1.7B profile)
        1,
        16,                    // vLLM default block size
        8192,                  // vLLM max_num_batched_tokens on an H100 (vllm serve)
        1024,                  // vLLM max_num_seqs default on >= 70 GiB GPUs
        0.002,                 // assumed CPU time per engine step
        0.00002);              // assumed CPU time per scheduled sequence
  }

  /** Profiles by name. */
  public static Map<String, HardwareProfile> builtIns() {
    Map<String, HardwareProfile> m = new TreeMap<>();
    for (HardwareProfile p : new HardwareProfile[] {qwen3H100Mps6(), llama31H100()}) {
      m.put(p.name(), p);
    }
    return m;
  }

  /** A built-in profile by name, or {@code null}. */
  public static @Nullable HardwareProfile named(String name) {
    return builtIns().get(name.toLowerCase(Locale.ROOT));
  }

  /** KV blocks per replica ({@code num_gpu_blocks}) from the memory budget. */
  public int kvBlocksPerReplica() {
    double kvBytes = gpuMemoryBytes * gpuMemoryUtilization - weightBytes - runtimeOverheadBytes;
    long tokens = (long) Math.floor(kvBytes / kvBytesPerToken);
    return (int) Math.max(1, tokens / blockSize);
  }

  /** KV tokens per replica. */
  public long kvTokensPerReplica() {
    return (long) kvBlocksPerReplica() * blockSize;
  }

  /**
   * Cost of one step on an unshared GPU, in seconds.
   *
   * @param newTokens       tokens computed in the step
   * @param attentionTerm   Σ over requests of new × (context + new / 2)
   * @param kvTokensTouched Σ over requests of context + new (KV read or written)
   * @param sampled         requests that produce a token this step
   */
  double stepGpuSeconds(long newTokens, double attentionTerm, long kvTokensTouched, int sampled) {
    double flops = 2.0 * nonEmbeddingParams * newTokens
        + 4.0 * layers * queryWidth * attentionTerm
        + 2.0 * hidden * (double) vocab * sampled;
    double bytes = weightBytes + (double) kvBytesPerToken * kvTokensTouched;
    double compute = flops / (peakFlops * computeEfficiency);
    double memory = bytes / (peakBandwidth * bandwidthEfficiency);
    return Math.max(compute, memory);
  }

  /**
   * Token IDs of ordinary text in the model's vocabulary, {@code 0} to this less one: the IDs the
   * emulator's stand-in tokenizer and filler output draw from. {@link #vocab()} counts the rows of
   * the embedding table, which also hold the special tokens (and padding) after the ordinary ones:
   * Llama 3.1 has 128,000 ordinary tokens and 256 special ones; Qwen3 151,643 ordinary tokens in
   * 151,936 rows.
   */
  public int ordinaryTokens() {
    return LLAMA3_1_8B_H100.equals(name) ? 128_000 : Math.min(vocab, SyntheticTokens.VOCAB);
  }

  /** CPU-side time of a step that schedules {@code sequences} requests. */
  double stepOverheadSeconds(int sequences) {
    return stepOverheadSeconds + perSequenceOverheadSeconds * sequences;
  }

  /**
   * A copy whose engines cache KV in blocks of {@code tokens} (the same memory, so as many fewer
   * blocks): for a precise configuration that names the engines' block size.
   */
  public HardwareProfile withBlockSize(int tokens) {
    if (tokens < 1) {
      throw new IllegalArgumentException("blockSize must be >= 1, got " + tokens);
    }
    return new HardwareProfile(name, model, nonEmbeddingParams, weightBytes, kvBytesPerToken,
        layers, queryWidth, hidden, vocab, maxModelLen, gpuMemoryBytes, gpuMemoryUtilization,
        runtimeOverheadBytes, peakFlops, peakBandwidth, computeEfficiency, bandwidthEfficiency,
        replicasPerGpu, tokens, maxNumBatchedTokens, maxNumSeqs, stepOverheadSeconds,
        perSequenceOverheadSeconds);
  }

  /** A copy with different engine limits (CLI overrides). */
  public HardwareProfile withEngineLimits(int maxNumBatchedTokens, int maxNumSeqs) {
    return new HardwareProfile(name, model, nonEmbeddingParams, weightBytes, kvBytesPerToken,
        layers, queryWidth, hidden, vocab, maxModelLen, gpuMemoryBytes, gpuMemoryUtilization,
        runtimeOverheadBytes, peakFlops, peakBandwidth, computeEfficiency, bandwidthEfficiency,
        replicasPerGpu, blockSize, maxNumBatchedTokens, maxNumSeqs, stepOverheadSeconds,
        perSequenceOverheadSeconds);
  }
}
