package io.epp4j.scorers;

import com.dynatrace.hash4j.hashing.Hasher64;
import com.dynatrace.hash4j.hashing.Hashing;
import io.epp4j.api.AttributeKey;
import io.epp4j.api.ChatMessage;
import io.epp4j.api.CycleState;
import io.epp4j.api.InferenceRequest;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.CharBuffer;
import java.nio.charset.CharsetEncoder;
import java.nio.charset.StandardCharsets;
import java.util.List;
import org.jspecify.annotations.Nullable;

/**
 * Turns a request's prompt into chained 64-bit block hashes: {@code h0} from model, LoRA adapter
 * and cache salt, then {@code h(i) = chain(h(i-1), XXH3(block(i)))} (see {@link #chain}). Token prompts
 * use blocks of {@code blockSizeTokens} token IDs, hashed as little-endian 32-bit values. Text
 * prompts use blocks of {@code 4 × blockSizeTokens} UTF-16 characters; a block whose characters
 * are all at most U+00FF is hashed as one byte per character (ISO-8859-1), any other block as
 * UTF-16LE. The two forms differ in length, so they never collide, and a block's bytes depend on
 * that block alone. Only full blocks count, as in vLLM.
 *
 * <p>Chat requests are hashed in a canonical form, not as raw JSON: the tools JSON (compact, keys
 * in the order given, since the model's template prints them in that order) first, then for each
 * message its role, a unit separator (U+001F), its content, its other template fields (tool
 * calls, tool result ids, reasoning) after a unit separator when it has any, and a record
 * separator (U+001E). Two clients that send the same conversation with different message field
 * order, whitespace or escaping therefore hash alike, and a conversation
 * extended by one turn keeps every earlier block, since the form of a message never depends on
 * what follows it.
 *
 * <p>Cost: each block is hashed on its own (the blocks are independent, so the CPU overlaps
 * them) and chained with a multiply-xorshift mix. Text is copied in chunks of a few thousand
 * characters into a per-thread scratch by {@link String#getChars} and narrowed by the ISO-8859-1
 * encoder, both of which the JDK implements with vector instructions (a character-by-character
 * loop costs ten times more). A chunk that lies wholly in one long string the JDK stores as
 * Latin-1 (a prompt, a system message, a document; see {@link Latin1}) is copied as its bytes
 * instead, which skips the widening and narrowing. A request allocates only its result array,
 * and about 90 bytes more for each such string's check.
 */
final class BlockHasher {
  private static final String UNIT_SEP = "\u001f";
  private static final String RECORD_SEP = "\u001e";
  private static final String TOOLS = "tools";
  private static final Hasher64 XXH3 = Hashing.xxh3_64();
  private static final VarHandle INT_LE =
      MethodHandles.byteArrayViewVarHandle(int[].class, ByteOrder.LITTLE_ENDIAN);
  private static final VarHandle CHAR_LE =
      MethodHandles.byteArrayViewVarHandle(char[].class, ByteOrder.LITTLE_ENDIAN);
  /** Characters (or token bytes) copied per pass: small enough to stay in the L1 cache. */
  private static final int CHUNK = 4096;
  private static final ThreadLocal<Scratch> SCRATCH = ThreadLocal.withInitial(Scratch::new);
  /**
   * The first block hashes computed in a cycle, for every other plugin of the cycle that hashes
   * with the same block size and block limit: a prompt is hashed once per request however many
   * prefix-aware plugins (both profiles of a P/D pair, two prefix scorers) read it.
   */
  static final AttributeKey<Shared> SHARED = AttributeKey.of("block-hashes", Shared.class);

  /** A cycle's block hashes and the two settings that determine them besides the request. */
  record Shared(int blockSizeTokens, int maxBlocks, long[] hashes) {}

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
   * The request's block hashes, taken from the cycle when a plugin with the same settings has
   * computed them already, else computed and, if the cycle holds none yet, published there.
   * Callers must not modify the array.
   */
  long[] hash(InferenceRequest request, CycleState state) {
    Shared s = state.get(SHARED);
    if (s != null && s.blockSizeTokens() == blockSizeTokens && s.maxBlocks() == maxBlocks) {
      return s.hashes();
    }
    long[] h = hash(request);
    if (s == null) {
      state.put(SHARED, new Shared(blockSizeTokens, maxBlocks, h));
    }
    return h;
  }

  /** The request's block hashes (length = number of full blocks, capped at the maximum). */
  long[] hash(InferenceRequest request) {
    long seed = namespace(request);
    int[] tokens = request.tokenIds();
    return tokens != null ? hashTokens(seed, tokens) : hashText(seed, request);
  }

  /**
   * {@code fmix64(parent × φ + blockHash)} with φ = 0x9E3779B97F4A7C15 and MurmurHash3's
   * finaliser: for a fixed parent it is a bijection of the block hash and for a fixed block hash
   * a bijection of the parent, so distinct prefixes collide only as often as random 64-bit
   * values. It sits on the dependency chain between blocks, where a full XXH3 of 16 bytes cost
   * about a quarter of the hashing time.
   */
  static long chain(long parent, long blockHash) {
    long x = parent * 0x9E3779B97F4A7C15L + blockHash;
    x = (x ^ (x >>> 33)) * 0xFF51AFD7ED558CCDL;
    x = (x ^ (x >>> 33)) * 0xC4CEB9FE1A85EC53L;
    return x ^ (x >>> 33);
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

  private long[] hashTokens(long seed, int[] tokens) {
    int n = Math.min(maxBlocks, tokens.length / blockSizeTokens);
    long[] out = new long[n];
    if (n == 0) {
      return out;
    }
    long h = seed;
    if (ShortXxh3.coversTokens(blockSizeTokens)) {
      int bs = blockSizeTokens;
      for (int i = 0; i < n; i++) {
        h = chain(h, ShortXxh3.hash(tokens, i * bs, bs));
        out[i] = h;
      }
      return out;
    }
    int blockBytes = 4 * blockSizeTokens;
    int perChunk = Math.max(1, CHUNK / blockBytes);
    byte[] buf = SCRATCH.get().bytes(perChunk * blockBytes);
    for (int first = 0; first < n; first += perChunk) {
      int k = Math.min(perChunk, n - first);
      int base = first * blockSizeTokens;
      for (int j = 0, count = k * blockSizeTokens; j < count; j++) {
        INT_LE.set(buf, 4 * j, tokens[base + j]);
      }
      for (int i = 0; i < k; i++) {
        h = chain(h, XXH3.hashBytesToLong(buf, i * blockBytes, blockBytes));
        out[first + i] = h;
      }
    }
    return out;
  }

  private long[] hashText(long seed, InferenceRequest request) {
    int n = (int) Math.min(maxBlocks, textLength(request) / blockChars);
    long[] out = new long[n];
    if (n == 0) {
      return out;
    }
    int bc = blockChars;
    int perChunk = Math.max(1, Math.min(Long.SIZE, CHUNK / bc));
    Scratch s = SCRATCH.get();
    s.prepareText(perChunk * bc, 2 * bc);
    TextCursor text = s.cursor.start(request);
    char[] chars = s.chars;
    byte[] narrow = s.narrow;
    byte[] wide = s.wide;
    boolean shortNarrow = ShortXxh3.coversBytes(bc);
    boolean shortWide = ShortXxh3.coversBytes(2 * bc);
    long h = seed;
    for (int first = 0; first < n; first += perChunk) {
      int k = Math.min(perChunk, n - first);
      int len = k * bc;
      long wideBlocks;
      if (text.copyLatin1(narrow, len)) {
        wideBlocks = 0;
      } else {
        text.copyTo(chars, len);
        wideBlocks = s.narrow(len, bc);
      }
      for (int i = 0; i < k; i++) {
        int off = i * bc;
        long blockHash;
        if ((wideBlocks & (1L << i)) == 0) {
          blockHash = shortNarrow ? ShortXxh3.hash(narrow, off, bc)
              : XXH3.hashBytesToLong(narrow, off, bc);
        } else {
          for (int j = 0; j < bc; j++) {
            CHAR_LE.set(wide, 2 * j, chars[off + j]);
          }
          blockHash = shortWide ? ShortXxh3.hash(wide, 0, 2 * bc)
              : XXH3.hashBytesToLong(wide, 0, 2 * bc);
        }
        h = chain(h, blockHash);
        out[first + i] = h;
      }
    }
    text.clear();
    return out;
  }

  /** Characters of the canonical text of a request. */
  private static long textLength(InferenceRequest request) {
    String p = request.prompt();
    if (p != null) {
      return p.length();
    }
    String tools = request.toolsJson();
    long n = tools == null || tools.isEmpty() ? 0 : TOOLS.length() + tools.length() + 2;
    List<ChatMessage> messages = request.messages();
    for (int i = 0, size = messages.size(); i < size; i++) {
      ChatMessage m = messages.get(i);
      n += m.role().length() + m.content().length() + 2
          + (m.hasFields() ? m.fields().length() + 1 : 0);
    }
    return n;
  }

  /**
   * Walks the canonical text of a request as a sequence of strings (the prompt; or tools and
   * messages with their separators) without concatenating them.
   */
  private static final class TextCursor {
    private @Nullable String prompt;
    private @Nullable String tools;
    private List<ChatMessage> messages = List.of();
    private int piece;
    private int offset;
    /** The piece {@link #probedLatin1} is about, or -1. */
    private int probed;
    private boolean probedLatin1;

    TextCursor start(InferenceRequest r) {
      prompt = r.prompt();
      String t = r.toolsJson();
      tools = t == null || t.isEmpty() ? null : t;
      messages = r.messages();
      piece = 0;
      offset = 0;
      probed = -1;
      return this;
    }

    void clear() {
      prompt = null;
      tools = null;
      messages = List.of();
    }

    /** The {@code k}-th string of the canonical text, or {@code null} past the end. */
    private @Nullable String piece(int k) {
      if (prompt != null) {
        return k == 0 ? prompt : null;
      }
      if (tools != null) {
        if (k < 4) {
          return k == 0 ? TOOLS : k == 1 ? UNIT_SEP : k == 2 ? tools : RECORD_SEP;
        }
        k -= 4;
      }
      // role, content and the other fields a template reads (tool calls, ...), the last with
      // its separator only when there are some, so a chat without them hashes as it always did
      int m = k / 6;
      if (m >= messages.size()) {
        return null;
      }
      switch (k % 6) {
        case 0:
          return messages.get(m).role();
        case 1:
          return UNIT_SEP;
        case 2:
          return messages.get(m).content();
        case 3:
          return messages.get(m).hasFields() ? UNIT_SEP : "";
        case 4:
          return messages.get(m).fields();
        default:
          return RECORD_SEP;
      }
    }

    /**
     * If the next {@code len} characters all lie in one string known to be Latin-1 (see {@link
     * Latin1}; each string is probed once, when a chunk first starts in it), copies them as
     * bytes into {@code dst[0..len)} and returns true; otherwise copies nothing.
     */
    @SuppressWarnings("deprecation") // getBytes(int, int, byte[], int) is exact for such a string
    boolean copyLatin1(byte[] dst, int len) {
      String s = piece(piece);
      if (s == null || s.length() - offset < len) {
        return false;
      }
      if (probed != piece) {
        probed = piece;
        probedLatin1 = Latin1.known(s);
      }
      if (!probedLatin1) {
        return false;
      }
      s.getBytes(offset, offset + len, dst, 0);
      offset += len;
      if (offset == s.length()) {
        piece++;
        offset = 0;
      }
      return true;
    }

    /** Copies the next {@code len} characters into {@code dst[0..len)}; they must exist. */
    void copyTo(char[] dst, int len) {
      int at = 0;
      while (at < len) {
        String s = java.util.Objects.requireNonNull(piece(piece), "text shorter than counted");
        int take = Math.min(len - at, s.length() - offset);
        s.getChars(offset, offset + take, dst, at);
        at += take;
        offset += take;
        if (offset == s.length()) {
          piece++;
          offset = 0;
        }
      }
    }
  }

  /** Per-thread buffers, grown on demand and reused by every request of the thread. */
  private static final class Scratch {
    private final CharsetEncoder latin1 = StandardCharsets.ISO_8859_1.newEncoder();
    final TextCursor cursor = new TextCursor();
    private byte[] bytes = new byte[0];
    char[] chars = new char[0];
    byte[] narrow = new byte[0];
    byte[] wide = new byte[0];
    private CharBuffer charView = CharBuffer.wrap(chars);
    private ByteBuffer narrowView = ByteBuffer.wrap(narrow);

    byte[] bytes(int length) {
      if (bytes.length < length) {
        bytes = new byte[length];
      }
      return bytes;
    }

    void prepareText(int chunkChars, int wideBytes) {
      if (chars.length < chunkChars) {
        chars = new char[chunkChars];
        narrow = new byte[chunkChars];
        charView = CharBuffer.wrap(chars);
        narrowView = ByteBuffer.wrap(narrow);
      }
      if (wide.length < wideBytes) {
        wide = new byte[wideBytes];
      }
    }

    /**
     * Narrows {@code chars[0..len)} into {@code narrow} with the ISO-8859-1 encoder and returns
     * a mask of the blocks (of {@code blockChars}) that hold a character above U+00FF; those
     * blocks' bytes in {@code narrow} are not meaningful.
     */
    long narrow(int len, int blockChars) {
      CharBuffer in = charView;
      ByteBuffer out = narrowView;
      in.clear().limit(len);
      out.clear().limit(len);
      long wideBlocks = 0;
      while (true) {
        latin1.reset();
        latin1.encode(in, out, true);
        int stop = in.position();
        if (stop >= len) {
          return wideBlocks;
        }
        int block = stop / blockChars;
        wideBlocks |= 1L << block;
        int next = (block + 1) * blockChars;
        if (next >= len) {
          return wideBlocks;
        }
        in.position(next);
        out.position(next);
      }
    }
  }

  /**
   * Tells, without reflection, whether a long string is one the JDK stores one byte per
   * character (a compact Latin-1 string), whose characters are therefore all at most U+00FF:
   * such a string's {@link String#chars()} runs on a spliterator class of its own. The probe
   * allocates a stream and a spliterator (about 90 bytes) and costs about what copying its bytes
   * saves on two thousand characters, so strings shorter than {@value #PROBE_FROM} characters
   * are not probed (and not taken as Latin-1): a 1 KB prompt allocates nothing more. On a JDK whose strings do not differ that way (compact strings
   * disabled, another implementation) the two probes below see one class and no string is taken
   * as Latin-1.
   */
  static final class Latin1 {
    static final int PROBE_FROM = 4096;
    private static final Class<?> LATIN1_CHARS = "a".chars().spliterator().getClass();
    private static final boolean PROBE = LATIN1_CHARS != "\u0100".chars().spliterator().getClass();

    private Latin1() {}

    static boolean known(String s) {
      return s.length() >= PROBE_FROM && PROBE && s.chars().spliterator().getClass() == LATIN1_CHARS;
    }
  }
}
