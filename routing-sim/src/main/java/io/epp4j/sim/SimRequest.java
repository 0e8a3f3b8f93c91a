package io.epp4j.sim;

import io.epp4j.api.RoutingDecision;
import org.jspecify.annotations.Nullable;

/**
 * A request's life inside one replica: its tokens (prompt followed by the output it will
 * generate), how many have KV computed, the KV blocks it holds and its timestamps.
 */
final class SimRequest {
  final RequestSpec spec;
  final int[] tokens;
  final int promptLength;
  final int outputLength;
  final long arrivalNanos;
  final @Nullable RoutingDecision decision;
  final long blockSeed;
  final int blockSize;
  /**
   * The LoRA adapter ({@code lora_id} 1.., name) and {@code cache_salt} of an emulated request;
   * they seed its hash chain and go out with its KV events, as in vLLM. Unset (-1, null) in
   * simulations.
   */
  int loraId = -1;
  @Nullable String loraName;
  @Nullable String cacheSalt;

  /** Block ids held, in sequence order. */
  int[] blocks = new int[8];
  int numBlocks;
  /** Leading blocks already registered in the prefix cache (or skipped as duplicates). */
  int numCachedBlocks;
  /** Tokens whose KV is computed. */
  int numComputed;
  /** Tokens generated so far. */
  int numOutput;
  /** Prompt tokens hit in the prefix cache at first admission; -1 until admitted. */
  int cachedAtFirstAdmission = -1;
  int preemptions;
  /** The replica's waiting and running requests and KV usage when this one arrived there. */
  int waitingAtArrival;
  int runningAtArrival;
  double kvUsageAtArrival;
  long firstTokenNanos = -1;
  long lastTokenNanos = -1;

  /*
   * Prefill/decode disaggregation. A request routed with a prefill pick is two of these: the
   * prefill request on the prefill replica (its prompt and one output token, as the P/D proxy
   * sends it with max_tokens 1), which names the decode request and its replica, and the decode
   * request, queued on the decode replica once the prefill is done, which takes its prompt's KV
   * over the link instead of computing it.
   */
  /** For a prefill request: the decode request waiting for its KV; null otherwise. */
  @Nullable SimRequest decodeRequest;
  /** For a prefill request: the replica that decodes. */
  int decodeReplica = -1;
  /** For a decode request: the prefill request whose KV it receives; null otherwise. */
  @Nullable SimRequest prefillRequest;
  /** For a decode request: the replica that prefilled it. */
  int prefillReplica = -1;
  /**
   * A decode request whose prompt KV is to come from its prefill replica: admitted with blocks
   * for the whole prompt, then waiting for the transfer. Cleared when the KV has arrived (a later
   * preemption recomputes it locally, as vLLM does).
   */
  boolean remotePrefill;
  /** For a decode request: prompt tokens its own replica had cached when it was admitted. */
  int localHitTokens = -1;
  /** For a decode request: how long its KV took to cross the link; -1 before the transfer. */
  long transferNanos = -1;

  private long[] hashes;
  private int hashesComputed;

  SimRequest(RequestSpec spec, int[] tokens, long arrivalNanos, @Nullable RoutingDecision decision,
      long blockSeed, int blockSize) {
    if (tokens.length != spec.promptLength() + spec.outputLength()) {
      throw new IllegalArgumentException("token count " + tokens.length + " does not match "
          + spec.promptLength() + " + " + spec.outputLength());
    }
    this.spec = spec;
    this.tokens = tokens;
    this.promptLength = spec.promptLength();
    this.outputLength = spec.outputLength();
    this.arrivalNanos = arrivalNanos;
    this.decision = decision;
    this.blockSeed = blockSeed;
    this.blockSize = blockSize;
    this.hashes = new long[tokens.length / blockSize];
  }

  /** Tokens known so far: the prompt plus the generated output. */
  int numTokens() {
    return promptLength + numOutput;
  }

  /** The chained hash of full block {@code i}. */
  long blockHash(int i) {
    while (hashesComputed <= i) {
      long parent = hashesComputed == 0 ? blockSeed : hashes[hashesComputed - 1];
      hashes[hashesComputed] =
          ChainedBlockHash.hash(parent, tokens, hashesComputed * blockSize, blockSize);
      hashesComputed++;
    }
    return hashes[i];
  }

  void addBlock(int id) {
    if (numBlocks == blocks.length) {
      blocks = java.util.Arrays.copyOf(blocks, blocks.length * 2);
    }
    blocks[numBlocks++] = id;
  }

  /** Whether this is the prefill half of a disaggregated request (it produces no output). */
  boolean isPrefillOnly() {
    return decodeRequest != null;
  }

  boolean isFinished() {
    return numOutput >= outputLength;
  }

  @Override
  public String toString() {
    return "SimRequest{" + spec.id() + ", computed=" + numComputed + "/" + numTokens()
        + ", blocks=" + numBlocks + "}";
  }
}
