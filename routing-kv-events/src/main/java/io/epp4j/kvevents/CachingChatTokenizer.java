package io.epp4j.kvevents;

import com.github.benmanes.caffeine.cache.Cache;
import com.github.benmanes.caffeine.cache.Caffeine;
import io.epp4j.api.ChatMessage;
import io.epp4j.api.ChatTemplateArgs;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.atomic.LongAdder;
import org.jspecify.annotations.Nullable;

/**
 * Tokenizes chats a piece at a time and remembers each piece's tokens, so turn N of a dialog
 * only tokenizes what was added since turn N−1 instead of the whole history. Plain text goes
 * straight to the delegate. {@link #tokensFromCache()} and {@link #tokensEncoded()} measure the
 * saving.
 *
 * <p>Two ways to cut a chat into pieces, both exact because a tokenizer never merges across a
 * special (added) token:
 * <ul>
 *   <li>{@linkplain #CachingChatTokenizer(Tokenizer, ChatTemplate, long) per message} with a
 *       {@link ChatTemplate} whose every message starts and ends with special tokens (ChatML);
 *   <li>{@linkplain #ofRenderedChats(HuggingFaceTokenizer, long) per rendered chunk}: the whole
 *       chat is rendered with the model's Jinja template, then cut before each added token. Only
 *       for a model whose {@link HuggingFaceTokenizer#chunkingExact()} proved on a rendered probe
 *       conversation that the chunks give the whole rendering's tokens and that every message
 *       lands in a chunk of its own; other models are tokenized whole.
 * </ul>
 */
public final class CachingChatTokenizer implements Tokenizer {
  private final Tokenizer delegate;
  private final @Nullable ChatTemplate template;
  private final @Nullable HuggingFaceTokenizer renderer;
  private final Cache<String, int[]> cache;
  private final LongAdder fromCache = new LongAdder();
  private final LongAdder encoded = new LongAdder();
  private volatile int @Nullable [] generationPrompt;

  /**
   * @param delegate     the tokenizer doing the work
   * @param template     how messages are rendered
   * @param maxCachedTokens bound on the cache size, in tokens: an entry weighs its tokens or a
   *     quarter of its text's characters, whichever is more (the text is kept too), and 16 more
   */
  public CachingChatTokenizer(Tokenizer delegate, ChatTemplate template, long maxCachedTokens) {
    this(delegate, Objects.requireNonNull(template, "template"), null, maxCachedTokens);
  }

  private CachingChatTokenizer(Tokenizer delegate, @Nullable ChatTemplate template,
      @Nullable HuggingFaceTokenizer renderer, long maxCachedTokens) {
    this.delegate = Objects.requireNonNull(delegate, "delegate");
    this.template = template;
    this.renderer = renderer;
    if (maxCachedTokens < 1) {
      throw new IllegalArgumentException("maxCachedTokens must be >= 1, got " + maxCachedTokens);
    }
    // the text is kept as the key and comes from users' prompts: a piece that tokenizes to few
    // tokens (a run of whitespace) can be long, so it weighs at least a token per 4 chars, the
    // text's share of ordinary prose; ordinary text weighs its tokens, as before, and every
    // weight unit holds at most one token (4 bytes) and 4 chars (up to 8 bytes)
    this.cache = Caffeine.newBuilder().maximumWeight(maxCachedTokens)
        .weigher((String k, int[] v) -> (int) Math.min(Integer.MAX_VALUE,
            Math.max(v.length, (k.length() + 3L) / 4) + 16)).build();
  }

  /**
   * Caches the chunks of chats rendered with the model's own template.
   *
   * @throws IllegalArgumentException when the model's chunks are not proven exact
   *     ({@link HuggingFaceTokenizer#chunkingExact()} is false): tokenize those chats whole
   */
  public static CachingChatTokenizer ofRenderedChats(HuggingFaceTokenizer tokenizer,
      long maxCachedTokens) {
    if (!tokenizer.chunkingExact()) {
      throw new IllegalArgumentException("the chat template of this tokenizer does not put every"
          + " message between special tokens; its chats must be tokenized whole");
    }
    return new CachingChatTokenizer(tokenizer, null, tokenizer, maxCachedTokens);
  }

  @Override
  public int[] encode(String text) {
    int[] t = delegate.encode(text);
    encoded.add(t.length);
    return t;
  }

  @Override
  public int[] encodePrompt(String prompt) {
    int[] t = delegate.encodePrompt(prompt);
    encoded.add(t.length);
    return t;
  }

  @Override
  public int[] encodeChat(List<ChatMessage> messages) {
    return encodeChat(messages, null);
  }

  @Override
  public int[] encodeChat(List<ChatMessage> messages, @Nullable String toolsJson) {
    return encodeChat(messages, toolsJson, ChatTemplateArgs.DEFAULTS);
  }

  /**
   * With {@code add_special_tokens}: the rendered chat tokenized whole by the model's tokenizer,
   * whose special tokens wrap the whole sequence rather than any one chunk (so the cache is not
   * used); a per-message {@link ChatTemplate} refuses it, as {@link Tokenizer} does.
   */
  @Override
  public int[] encodeChat(List<ChatMessage> messages, @Nullable String toolsJson,
      ChatTemplateArgs args, boolean addSpecialTokens) {
    HuggingFaceTokenizer r = renderer;
    if (!addSpecialTokens || r == null) {
      return Tokenizer.super.encodeChat(messages, toolsJson, args, addSpecialTokens);
    }
    int[] t = r.encodeChat(messages, toolsJson, args, true);
    encoded.add(t.length);
    return t;
  }

  /**
   * With the model's rendered template, every field as {@link HuggingFaceTokenizer} renders it.
   * With a per-message {@link ChatTemplate}: {@code add_generation_prompt} false leaves the
   * generation prompt out, {@code continue_final_message} ends the last message just after its
   * text (as transformers cuts it); {@code chat_template_kwargs} cannot be rendered by such a
   * template and fail the call, as do messages with fields besides role and content (tool
   * calls, ...) and {@code continue_final_message} with {@code add_generation_prompt}.
   */
  @Override
  public int[] encodeChat(List<ChatMessage> messages, @Nullable String toolsJson,
      ChatTemplateArgs args) {
    HuggingFaceTokenizer r = renderer;
    if (r != null) {
      List<String> chunks = r.chunks(r.renderChat(messages, toolsJson, args));
      int[][] parts = new int[chunks.size()][];
      for (int i = 0; i < parts.length; i++) {
        parts[i] = cached(chunks.get(i));
      }
      return concat(parts);
    }
    ChatTemplate tpl = Objects.requireNonNull(template);
    if (args.requestTemplate() != null) {
      throw new TokenizationException(JinjaChatTemplate.REQUEST_TEMPLATE);
    }
    if (args.kwargsJson() != null) {
      throw new TokenizationException("a per-message chat template has no variables to give"
          + " the request's chat_template_kwargs; render the model's own template instead");
    }
    if (args.continueFinalMessage() && args.addGenerationPrompt()) {
      throw new TokenizationException("continue_final_message needs add_generation_prompt"
          + " false: the template cannot both continue the last message and open a new one");
    }
    int n = messages.size();
    for (ChatMessage m : messages) {
      if (m.hasFields()) {
        // it would render the message without them: the tokens of a chat the engine never sees
        throw new TokenizationException("a per-message chat template cannot render a message's"
            + " tool calls, tool_call_id, name or reasoning; render the model's own template"
            + " instead");
      }
    }
    int[][] parts = new int[n + (args.addGenerationPrompt() ? 1 : 0)][];
    for (int i = 0; i < n; i++) {
      String piece = tpl.renderMessage(messages.get(i));
      if (i == n - 1 && args.continueFinalMessage()) {
        piece = ChatTemplate.cutAfterFinalMessage(piece, messages.subList(i, n), false);
      }
      parts[i] = cached(piece);
    }
    if (args.addGenerationPrompt()) {
      int[] gp = generationPrompt;
      if (gp == null) {
        gp = delegate.encode(tpl.generationPrompt());
        generationPrompt = gp;
      }
      parts[n] = gp;
    }
    return concat(parts);
  }

  private int[] cached(String piece) {
    int[] t = cache.getIfPresent(piece);
    if (t == null) {
      t = delegate.encode(piece);
      encoded.add(t.length);
      cache.put(piece, t);
    } else {
      fromCache.add(t.length);
    }
    return t;
  }

  private static int[] concat(int[][] parts) {
    int total = 0;
    for (int[] p : parts) {
      total += p.length;
    }
    int[] out = new int[total];
    int at = 0;
    for (int[] p : parts) {
      System.arraycopy(p, 0, out, at, p.length);
      at += p.length;
    }
    return out;
  }

  /** Characters of the pieces the cache holds now, after pending evictions; for tests. */
  long cachedTextChars() {
    cache.cleanUp();
    long n = 0;
    for (String k : cache.asMap().keySet()) {
      n += k.length();
    }
    return n;
  }

  /** Tokens served from the cache instead of being tokenized again. */
  public long tokensFromCache() {
    return fromCache.sum();
  }

  /** Tokens produced by the delegate. */
  public long tokensEncoded() {
    return encoded.sum();
  }

  @Override
  public void close() {
    delegate.close();
  }
}
