package io.epp4j.core;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;

/**
 * {@code openai-parser}: names, for a configuration's {@code parser: {pluginRef: ...}} section,
 * the request parser the router always uses: {@link OpenAiRequestParser} (completions, chat
 * completions and token-ID prompts, and the {@code input} of embeddings, Responses and other
 * APIs that take one). It
 * does nothing itself; it exists so upstream files that name their parser load unchanged, and so
 * that naming any other parser is refused rather than silently replaced.
 */
final class OpenAiParserPlugin implements Plugin {
  @Override
  public String toString() {
    return "openai-parser";
  }

  /** Provides {@code openai-parser}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("openai-parser");
    }

    @Override
    protected Plugin build(PluginContext context, Parameters p) {
      return new OpenAiParserPlugin();
    }
  }
}
