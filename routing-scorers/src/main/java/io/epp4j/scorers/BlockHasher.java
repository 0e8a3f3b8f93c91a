package io.epp4j.scorers;

import com.dynatrace.hash4j.hashing.Hasher64;
import com.dynatrace.hash4j.hashing.Hashing;
import io.epp4j.api.ChatMessage;
import io.epp4j.api.InferenceRequest;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;
import java.util.List;

/**
 * Turns a request's prompt into chained 64-bit block hashes: {@code h0} from model, LoRA adapter
 * and cache salt (all XXH3), then {@code h(i) = XXH3(LE64(h(i-1)) ‖ block(i))}, token IDs as
 * little-endian 32-bit values and characters as little-endian UTF-16 units. Token
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
  private static final Hasher64 XXH3 = Hashing.xxh3_64();
  private static final VarHandle INT_LE =
      MethodHandles.byteArrayViewVarHandle(int[].class, ByteOrder.LITTLE_ENDIAN);
  private static final VarHandle LONG_LE =
      MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.LITTLE_ENDIAN);
  private static final VarHandle CHAR_LE =
      MethodHandles.byteArrayViewVarHandle(char[].class, ByteOrder.LITTLE_ENDIAN);

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

  /**
   * The request's block hashes (length = number of full blocks, capped at the maximum). Each
   * block is laid out as {@code LE64(parent) ‖ block bytes} in one small scratch array and hashed
   * in one call, so a request allocates only the result and that scratch array.
   */
  long[] hash(InferenceRequest request) {
    long seed = namespace(request);
    int[] tokens = request.tokenIds();
    if (tokens != null) {
      int n = Math.min(maxBlocks, tokens.length / blockSizeTokens);
      long[] out = new long[n];
      byte[] buf = new byte[8 + 4 * blockSizeTokens];
      long h = seed;
      for (int i = 0; i < n; i++) {
        putLong(buf, 0, h);
        int base = i * blockSizeTokens;
        for (int j = 0, p = 8; j < blockSizeTokens; j++, p += 4) {
          INT_LE.set(buf, p, tokens[base + j]);
        }
        h = XXH3.hashBytesToLong(buf, 0, buf.length);
        out[i] = h;
      }
      return out;
    }
    TextBlocks text = new TextBlocks(seed, estimateChars(request));
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

  /** {@code h0}: model, LoRA adapter and cache salt (absent and empty differ), prompt form. */
  static long namespace(InferenceRequest request) {
    String lora = request.loraAdapter();
    String salt = request.cacheSalt();
    long h = XXH3.hashLongLongLongToLong(
        XXH3.hashCharsToLong(request.targetModel()),
        lora == null ? 0x6E6F2D6C6F7261L : XXH3.hashCharsToLong(lora),
        salt == null ? 0x6E6F2D73616C74L : XXH3.hashCharsToLong(salt));
    int flags = (lora == null ? 0 : 1) | (salt == null ? 0 : 2) | (request.tokenIds() != null ? 4 : 0);
    return XXH3.hashLongIntToLong(h, flags);
  }

  private static void putLong(byte[] b, int off, long v) {
    LONG_LE.set(b, off, v);
  }

  private long estimateChars(InferenceRequest request) {
    String p = request.prompt();
    if (p != null) {
      return p.length();
    }
    long n = request.toolsJson() == null || request.toolsJson().isEmpty()
        ? 0 : request.toolsJson().length() + 7;
    for (ChatMessage m : request.messages()) {
      n += m.role().length() + m.content().length() + 2;
    }
    return n;
  }

  /** Accumulates characters into fixed-size blocks (two bytes per char) and hashes each full block. */
  private final class TextBlocks {
    private final byte[] buf = new byte[8 + 2 * blockChars];
    private final long[] out;
    private int fill; // chars in the current block
    private int n;
    private long h;

    TextBlocks(long seed, long chars) {
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
      CHAR_LE.set(buf, 8 + 2 * fill, c);
      if (++fill == blockChars) {
        emit();
      }
    }

    void append(String s) {
      int len = s.length();
      for (int pos = 0; pos < len && !full(); pos++) {
        append(s.charAt(pos));
      }
    }

    private void emit() {
      putLong(buf, 0, h);
      h = XXH3.hashBytesToLong(buf, 0, buf.length);
      out[n++] = h;
      fill = 0;
    }

    long[] result() {
      return n == out.length ? out : java.util.Arrays.copyOf(out, n);
    }
  }
}
