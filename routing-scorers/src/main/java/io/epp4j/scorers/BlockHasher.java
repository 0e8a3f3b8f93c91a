package io.epp4j.scorers;

import com.dynatrace.hash4j.hashing.HashStream64;
import com.dynatrace.hash4j.hashing.Hashing;
import io.epp4j.api.ChatMessage;
import io.epp4j.api.InferenceRequest;
import java.util.List;

/**
 * Turns a request's prompt into chained 64-bit block hashes: {@code h0 = XXH3(namespace)} from
 * model, LoRA adapter and cache salt, then {@code h(i) = XXH3(LE64(h(i-1)) ‖ block(i))}. Token
 * prompts use blocks of {@code blockSizeTokens} token IDs; text prompts use blocks of
 * {@code 4 × blockSizeTokens} UTF-16 characters. Only full blocks count, as in vLLM.
 *
 * <p>Chat requests are hashed in a canonical form, not as raw JSON: the tools JSON (already
 * canonical with sorted keys) first, then for each message its role, a unit separator (U+001F),
 * its content and a record separator (U+001E). Two clients that send the same conversation with
 * different JSON field order, whitespace or escaping therefore hash alike, and a conversation
 * extended by one turn keeps every earlier block, since the form of a message never depends on
 * what follows it.
 */
final class BlockHasher {
  private static final char UNIT_SEP = '\u001f';
  private static final char RECORD_SEP = '\u001e';

  private final int blockSizeTokens;
  private final int blockChars;
  private final int maxBlocks;

  BlockHasher(int blockSizeTokens, int maxBlocks) {
    this.blockSizeTokens = blockSizeTokens;
    this.blockChars = blockSizeTokens * 4;
    this.maxBlocks = maxBlocks;
  }

  int blockSizeTokens() {
    return blockSizeTokens;
  }

  /** The request's block hashes (length = number of full blocks, capped at the maximum). */
  long[] hash(InferenceRequest request) {
    HashStream64 stream = Hashing.xxh3_64().hashStream();
    long seed = namespace(stream, request);
    int[] tokens = request.tokenIds();
    if (tokens != null) {
      int n = Math.min(maxBlocks, tokens.length / blockSizeTokens);
      long[] out = new long[n];
      long h = seed;
      for (int i = 0; i < n; i++) {
        h = stream.reset().putLong(h).putInts(tokens, i * blockSizeTokens, blockSizeTokens).getAsLong();
        out[i] = h;
      }
      return out;
    }
    TextBlocks text = new TextBlocks(stream, seed, estimateChars(request));
    String prompt = request.prompt();
    if (prompt != null) {
      text.append(prompt);
    } else {
      String tools = request.toolsJson();
      if (tools != null && !tools.isEmpty()) {
        text.append("tools");
        text.append(UNIT_SEP);
        text.append(tools);
        text.append(RECORD_SEP);
      }
      List<ChatMessage> messages = request.messages();
      for (int i = 0; i < messages.size() && !text.full(); i++) {
        ChatMessage m = messages.get(i);
        text.append(m.role());
        text.append(UNIT_SEP);
        text.append(m.content());
        text.append(RECORD_SEP);
      }
    }
    return text.result();
  }

  private static long namespace(HashStream64 stream, InferenceRequest request) {
    String lora = request.loraAdapter();
    String salt = request.cacheSalt();
    return stream.reset()
        .putString(request.targetModel())
        .putBoolean(lora != null).putString(lora == null ? "" : lora)
        .putBoolean(salt != null).putString(salt == null ? "" : salt)
        .putBoolean(request.tokenIds() != null)
        .getAsLong();
  }

  private long estimateChars(InferenceRequest request) {
    String p = request.prompt();
    if (p != null) {
      return p.length();
    }
    long n = request.toolsJson() == null ? 0 : request.toolsJson().length() + 7;
    for (ChatMessage m : request.messages()) {
      n += m.role().length() + m.content().length() + 2;
    }
    return n;
  }

  /** Accumulates characters into fixed-size blocks and hashes each full block. */
  private final class TextBlocks {
    private final HashStream64 stream;
    private final char[] buf = new char[blockChars];
    private final long[] out;
    private int fill;
    private int n;
    private long h;

    TextBlocks(HashStream64 stream, long seed, long chars) {
      this.stream = stream;
      this.h = seed;
      this.out = new long[(int) Math.min(maxBlocks, chars / blockChars)];
    }

    boolean full() {
      return n >= out.length;
    }

    void append(char c) {
      if (full()) {
        return;
      }
      buf[fill++] = c;
      if (fill == blockChars) {
        emit();
      }
    }

    void append(String s) {
      int pos = 0;
      int len = s.length();
      while (pos < len && !full()) {
        int take = Math.min(len - pos, blockChars - fill);
        s.getChars(pos, pos + take, buf, fill);
        fill += take;
        pos += take;
        if (fill == blockChars) {
          emit();
        }
      }
    }

    private void emit() {
      h = stream.reset().putLong(h).putChars(buf, 0, blockChars).getAsLong();
      out[n++] = h;
      fill = 0;
    }

    long[] result() {
      return n == out.length ? out : java.util.Arrays.copyOf(out, n);
    }
  }
}
