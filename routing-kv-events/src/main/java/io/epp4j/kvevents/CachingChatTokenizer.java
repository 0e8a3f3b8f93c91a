package io.epp4j.kvevents;

import com.github.benmanes.caffeine.cache.Cache;
import com.github.benmanes.caffeine.cache.Caffeine;
import io.epp4j.api.ChatMessage;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.atomic.LongAdder;

/**
 * Tokenizes chats one message at a time and remembers each message's tokens, so turn N of a
 * dialog only tokenizes the messages added since turn N−1 instead of the whole history. Exact
 * for templates like ChatML where every message starts and ends with special tokens: a
 * tokenizer never merges across a special token, so the concatenation of per-message tokens
 * equals the tokens of the whole rendering. Plain text goes straight to the delegate.
 * {@link #tokensFromCache()} and {@link #tokensEncoded()} measure the saving.
 */
public final class CachingChatTokenizer implements Tokenizer {
  private final Tokenizer delegate;
  private final ChatTemplate template;
  private final Cache<String, int[]> cache;
  private final LongAdder fromCache = new LongAdder();
  private final LongAdder encoded = new LongAdder();
  private volatile int @org.jspecify.annotations.Nullable [] generationPrompt;

  /**
   * @param delegate     the tokenizer doing the work
   * @param template     how messages are rendered
   * @param maxCachedTokens bound on the cache size, in tokens (each entry also weighs 16)
   */
  public CachingChatTokenizer(Tokenizer delegate, ChatTemplate template, long maxCachedTokens) {
    this.delegate = Objects.requireNonNull(delegate, "delegate");
    this.template = Objects.requireNonNull(template, "template");
    if (maxCachedTokens < 1) {
      throw new IllegalArgumentException("maxCachedTokens must be >= 1, got " + maxCachedTokens);
    }
    this.cache = Caffeine.newBuilder().maximumWeight(maxCachedTokens)
        .weigher((String k, int[] v) -> v.length + 16).build();
  }

  @Override
  public int[] encode(String text) {
    int[] t = delegate.encode(text);
    encoded.add(t.length);
    return t;
  }

  @Override
  public int[] encodeChat(List<ChatMessage> messages) {
    int[][] parts = new int[messages.size() + 1][];
    int total = 0;
    for (int i = 0; i < messages.size(); i++) {
      String rendered = template.renderMessage(messages.get(i));
      int[] t = cache.getIfPresent(rendered);
      if (t == null) {
        t = delegate.encode(rendered);
        encoded.add(t.length);
        cache.put(rendered, t);
      } else {
        fromCache.add(t.length);
      }
      parts[i] = t;
      total += t.length;
    }
    int[] gp = generationPrompt;
    if (gp == null) {
      gp = delegate.encode(template.generationPrompt());
      generationPrompt = gp;
    }
    parts[messages.size()] = gp;
    total += gp.length;
    int[] out = new int[total];
    int at = 0;
    for (int[] p : parts) {
      System.arraycopy(p, 0, out, at, p.length);
      at += p.length;
    }
    return out;
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
