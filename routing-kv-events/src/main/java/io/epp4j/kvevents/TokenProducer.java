package io.epp4j.kvevents;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import java.time.Duration;
import org.jspecify.annotations.Nullable;

/**
 * {@code token-producer} (llm-d; formerly {@code tokenizer}): tokenizes prompts for the plugins
 * that need token IDs. In epp4j it provides a {@link Tokenizer} to the precise and hybrid scorers
 * of the same file, defined before or after it, as llm-d's tokenizes for every scorer whatever the
 * order (unless the router was given a {@code Tokenizer} service or the scorer names its own
 * {@code tokenizer}): {@code vllm.http} becomes a {@link VllmTokenizer}
 * that asks {@code <http>/tokenize} for model {@code modelName}, chats sent whole so that the
 * server renders them with the model's own template; {@code vllm.timeout} bounds each call, and
 * {@code vllm.mmTimeout} a chat with a content array, whose media the server fetches. The
 * upstream UDS tokenizer sidecar speaks a protocol epp4j does not, so {@code udsTokenizerConfig}
 * is refused.
 */
final class TokenProducer implements Plugin {
  /** Null for llm-d's {@code estimate} backend: no tokenizer is lent. */
  private final @Nullable Tokenizer tokenizer;

  TokenProducer(@Nullable Tokenizer tokenizer) {
    this.tokenizer = tokenizer;
  }

  @Nullable Tokenizer tokenizer() {
    return tokenizer;
  }

  @Override
  public void close() {
    Tokenizer t = tokenizer;
    if (t != null) {
      t.close();
    }
  }

  @Override
  public String toString() {
    return tokenizer == null ? "token-producer(estimate)" : "token-producer";
  }

  /** Provides {@code token-producer}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("token-producer", "tokenizer");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      if (!p.has("vllm") && !p.has("modelName") && !p.has("udsTokenizerConfig")) {
        // llm-d's default backend, "estimate": token boundaries guessed from the bytes
        if (p.has("estimate")) {
          p.raw("estimate");
          p.notice("estimate", "has no effect: its settings size images and video, and epp4j"
              + " routes text and token prompts");
        }
        p.notice("estimate", "(the backend without vllm or modelName) lends no tokenizer:"
            + " epp4j's approximate prefix plugins read the prompt's text themselves, and the"
            + " precise ones need the engine's own token IDs (give vllm.url and modelName)");
        return new TokenProducer(null);
      }
      String model = p.getString("modelName", null);
      if (model == null || model.isBlank()) {
        p.error("modelName", "is required: the model whose tokenizer the server applies");
      }
      if (p.has("udsTokenizerConfig")) {
        p.raw("udsTokenizerConfig");
        p.error("udsTokenizerConfig", "is not supported: epp4j cannot speak to the UDS tokenizer"
            + " sidecar; use vllm.url with a vLLM server's base URL");
      }
      Parameters v = p.getNested("vllm");
      // llm-d names the server's base URL vllm.url now, vllm.http before
      String urlField = v.has("url") || !v.has("http") ? "url" : "http";
      String url = v.getString(urlField, "http://localhost:8000");
      if (v.has("url") && v.has("http")
          && !java.util.Objects.equals(url, v.getString("http", null))) {
        v.error("http", "and url name different servers; give one of them");
      }
      if (url != null) {
        try {
          VllmTokenizer.tokenizeUri(url);
        } catch (IllegalArgumentException e) {
          v.error(urlField, String.valueOf(e.getMessage()));
        }
      }
      Duration timeout = positiveDuration(v, "timeout", Duration.ofSeconds(5));
      // llm-d waits this long for a chat with a content array, which may hold media that the
      // server fetches before it answers; epp4j sends such parts on as given, media included
      Duration mmTimeout = positiveDuration(v, "mmTimeout", Duration.ofSeconds(30));
      for (String e : v.errors()) {
        p.error("vllm", e);
      }
      for (String u : v.unreadNames()) {
        p.error("vllm", "has unknown field '" + u + "'; expected url (or http), timeout,"
            + " mmTimeout");
      }
      if (!p.errors().isEmpty()) {
        throw new IllegalArgumentException("token-producer not created");
      }
      // the duration as given, as llm-d takes it: neither rounded to milliseconds nor capped
      Tokenizer lent = new VllmTokenizer(java.util.Objects.requireNonNull(url),
          java.util.Objects.requireNonNull(model), timeout, mmTimeout);
      // llm-d's token-producer tokenizes for every scorer, wherever the file lists it: a precise
      // or hybrid scorer listed before this one, without a tokenizer of its own, gets it too
      // (those listed after it find it among their earlier plugins)
      for (Plugin earlier : c.earlierPlugins()) {
        if (earlier instanceof PrecisePrefixCacheScorer precise) {
          precise.lendTokenizer(lent);
        } else if (earlier instanceof HybridPrefixCacheScorer hybrid) {
          hybrid.lendTokenizer(lent);
        }
      }
      return new TokenProducer(lent);
    }

    /**
     * A duration field of {@code vllm} that must be positive. llm-d reads it with Go's
     * {@code time.ParseDuration}, which also takes {@code 0} and negative durations, but each call
     * then starts with its deadline already passed and every tokenization fails: such a value is
     * refused here, naming the field. Any positive duration is taken as it is, and the empty
     * string is the default, as llm-d reads it.
     */
    private static Duration positiveDuration(Parameters v, String field, Duration defaultValue) {
      Object raw = v.raw(field);
      if ("".equals(raw)) {
        return defaultValue;
      }
      if (raw instanceof String s && s.trim().startsWith("-")) {
        v.error(field, "must be a positive duration such as '5s', got '" + s + "'");
        return defaultValue;
      }
      int before = v.errors().size();
      Duration d = v.getDuration(field, defaultValue);
      if (v.errors().size() == before && d.isZero()) {
        v.error(field, "must be a positive duration such as '5s', got '" + raw + "': every call"
            + " would time out before it is sent");
        return defaultValue;
      }
      return d;
    }
  }
}
