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
 * instead, which skips the widening and narrowing. The hashes of a cycle are written into an
 * array the thread keeps from cycle to cycle (up to {@value #MAX_KEPT_HASHES} hashes, 128 KiB), so a
 * routed request allocates no array for them; only about 90 bytes for each such string's check.
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

  /**
   * Hash arrays a thread keeps for its next cycle at most this long (128 KiB): a prompt of more
   * blocks gets an array of its own, as it would without the reuse.
   */
  static final int MAX_KEPT_HASHES = 16_384;
  private static final long[] NO_HASHES = new long[0];

  /**
   * A cycle's block hashes and the two settings that determine them besides the request. When
   * the cycle's state is ended ({@link CycleState#end()}) an array borrowed from the thread's
   * scratch goes back to it for the thread's next cycle, and the hashes can no longer be read.
   */
  static final class Shared implements Runnable {
    final int blockSizeTokens;
    final int maxBlocks;
    /** Hashes in the array; the array may be longer. */
    final int size;
    private final boolean borrowed;
    private volatile long @Nullable [] hashes;

    Shared(int blockSizeTokens, int maxBlocks, long[] hashes, int size, boolean borrowed) {
      this.blockSizeTokens = blockSizeTokens;
      this.maxBlocks = maxBlocks;
      this.hashes = hashes;
      this.size = size;
      this.borrowed = borrowed;
    }

    /**
     * The array the first {@link #size} hashes are in. Callers must not modify it.
     *
     * @throws IllegalStateException once the cycle has ended
     */
    long[] hashes() {
      long[] a = hashes;
      if (a == null) {
        throw new IllegalStateException("the block hashes of a scheduling cycle were read after"
            + " the cycle ended; a plugin that keeps them copies them (PrefixBlocks.toArray())");
      }
      return a;
    }

    /** The cycle ended: the hashes are gone, and a borrowed array goes back to the scratch. */
    @Override
    public void run() {
      long[] a = hashes;
      hashes = null;
      if (borrowed && a != null) {
        SCRATCH.get().giveBack(a);
      }
    }
  }

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
   * computed them already, else computed and, if the cycle holds none yet, published there. The
   * hashes published in a cycle are written into an array the thread reuses from cycle to cycle:
   * it is taken back when the cycle ends, so nothing may read them after that.
   */
  Shared hash(InferenceRequest request, CycleState state) {
    Shared s = state.get(SHARED);
    if (s != null && s.blockSizeTokens == blockSizeTokens && s.maxBlocks == maxBlocks) {
      return s;
    }
    int n = blocks(request);
    if (s != null || state.ended() || n == 0 || n > MAX_KEPT_HASHES) {
      long[] h = n == 0 ? NO_HASHES : fill(request, new long[n], n);
      Shared own = new Shared(blockSizeTokens, maxBlocks, h, n, false);
      if (s == null) {
        state.put(SHARED, own);
      }
      return own;
    }
    Scratch scratch = SCRATCH.get();
    long[] buf = scratch.borrowHashes(n);
    Shared own;
    try {
      fill(request, buf, n);
      own = new Shared(blockSizeTokens, maxBlocks, buf, n, true);
    } catch (RuntimeException | Error e) {
      scratch.giveBack(buf);
      throw e;
    }
    state.put(SHARED, own);
    state.onEnd(own);
    return own;
  }

  /** The request's block hashes (length = number of full blocks, capped at the maximum). */
  long[] hash(InferenceRequest request) {
    int n = blocks(request);
    return n == 0 ? NO_HASHES : fill(request, new long[n], n);
  }

  /**
   * The request's block hashes into a scratch array, for a caller that is done with them before
   * it returns; {@code use} gets the array and the number of hashes in it.
   */
  void withHashes(InferenceRequest request, java.util.function.ObjIntConsumer<long[]> use) {
    int n = blocks(request);
    if (n == 0) {
      use.accept(NO_HASHES, 0);
      return;
    }
    if (n > MAX_KEPT_HASHES) {
      use.accept(fill(request, new long[n], n), n);
      return;
    }
    Scratch scratch = SCRATCH.get();
    long[] buf = scratch.borrowHashes(n);
    try {
      use.accept(fill(request, buf, n), n);
    } finally {
      scratch.giveBack(buf);
    }
  }

  /** Full blocks of the request's prompt, capped at the maximum. */
  private int blocks(InferenceRequest request) {
    int[] tokens = request.tokenIds();
    return tokens != null ? Math.min(maxBlocks, tokens.length / blockSizeTokens)
        : (int) Math.min(maxBlocks, textLength(request) / blockChars);
  }

  /** Writes the first {@code n} block hashes into {@code out}; returns it. */
  private long[] fill(InferenceRequest request, long[] out, int n) {
    long seed = namespace(request);
    int[] tokens = request.tokenIds();
    if (tokens != null) {
      hashTokens(seed, tokens, out, n);
    } else {
      hashText(seed, request, out, n);
    }
    return out;
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

  private void hashTokens(long seed, int[] tokens, long[] out, int n) {
    long h = seed;
    if (ShortXxh3.coversTokens(blockSizeTokens)) {
      int bs = blockSizeTokens;
      for (int i = 0; i < n; i++) {
        h = chain(h, ShortXxh3.hash(tokens, i * bs, bs));
        out[i] = h;
      }
      return;
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
  }

  private void hashText(long seed, InferenceRequest request, long[] out, int n) {
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
    /** A hash array for the thread's next cycle, or {@code null} while one is lent out. */
    private long @Nullable [] spareHashes;

    /**
     * An array of at least {@code n} hashes: the thread's spare when it is long enough (then no
     * longer the spare until given back), else a new one with room to grow.
     */
    long[] borrowHashes(int n) {
      long[] a = spareHashes;
      if (a != null && a.length >= n) {
        spareHashes = null;
        return a;
      }
      int grown = a == null ? n : Math.max(n, Math.min(MAX_KEPT_HASHES, 2 * a.length));
      return new long[grown];
    }

    /** Keeps {@code a} as the spare unless it is too long to keep or shorter than the spare. */
    void giveBack(long[] a) {
      long[] kept = spareHashes;
      if (a.length <= MAX_KEPT_HASHES && (kept == null || kept.length < a.length)) {
        spareHashes = a;
      }
    }

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
