package io.epp4j.kvevents;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.epp4j.api.ChatTemplateArgs;
import java.util.Iterator;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import org.jspecify.annotations.Nullable;

/**
 * A server's default {@code chat_template_kwargs}, vLLM's {@code --default-chat-template-kwargs}
 * (e.g. {@code {"enable_thinking": false}} for a Qwen3 deployment that answers without
 * thinking). The engine renders every chat with these variables unless the request's own
 * {@code chat_template_kwargs} sets them, so a tokenizer that renders the template for routing
 * needs them too: without them, a deployment that sets any gets other tokens than the engine,
 * and no block key of its chats ever matches.
 *
 * <p>Merged as vLLM merges them: the defaults, then each of the request's kwargs over them,
 * except one whose value is {@code null} or {@code "auto"}, which leaves the default in force;
 * a key keeps the place it has in the defaults, and the request's other keys follow in its
 * order. The request's {@code add_generation_prompt} and {@code continue_final_message} fields
 * stay over both, as in vLLM. A default {@code tools} or {@code documents} serves a request that
 * gives none of its own: vLLM merges the request's {@code tools} over the defaults before the
 * request's kwargs, and the request's {@code documents} with its kwargs. Immutable.
 */
public final class DefaultChatTemplateKwargs {
  private static final ObjectMapper JSON = new ObjectMapper();

  /**
   * Keys a default cannot set: the request's own fields always win over them, and the rest are
   * what the renderer passes itself (or refuses as kwargs). Not {@code tools} and
   * {@code documents}: vLLM renders a request that gives none with the defaults' (see
   * {@link #applyTo(ChatTemplateArgs, String)}).
   */
  private static final Set<String> NOT_DEFAULTS = Set.of("add_generation_prompt",
      "continue_final_message", "messages", "chat_template", "tokenize");

  private final ObjectNode defaults;
  private final String json;

  private DefaultChatTemplateKwargs(ObjectNode defaults) {
    this.defaults = defaults;
    this.json = defaults.toString();
  }

  /**
   * The defaults of a JSON object, as vLLM's flag takes them.
   *
   * @throws IllegalArgumentException when {@code json} is not a JSON object, or sets a key that
   *     cannot be a default ({@code add_generation_prompt}, {@code continue_final_message},
   *     {@code messages}, {@code chat_template}, {@code tokenize}); the message names the key,
   *     never a value
   */
  public static DefaultChatTemplateKwargs parse(String json) {
    Objects.requireNonNull(json, "json");
    JsonNode node;
    try {
      node = JSON.readTree(json);
    } catch (JsonProcessingException e) {
      throw new IllegalArgumentException("is not valid JSON (at line " + e.getLocation().getLineNr()
          + ", column " + e.getLocation().getColumnNr() + ")");
    }
    return fromTree(node);
  }

  /**
   * The defaults of a map, as a YAML or JSON configuration gives them.
   *
   * @throws IllegalArgumentException as {@link #parse}
   */
  public static DefaultChatTemplateKwargs of(Map<?, ?> values) {
    return fromTree(JSON.valueToTree(values));
  }

  private static DefaultChatTemplateKwargs fromTree(JsonNode node) {
    if (!(node instanceof ObjectNode o)) {
      throw new IllegalArgumentException("must be a JSON object, got "
          + (node == null ? "nothing" : node.getNodeType().toString().toLowerCase(java.util.Locale.ROOT)));
    }
    for (Iterator<String> it = o.fieldNames(); it.hasNext(); ) {
      String key = it.next();
      if (NOT_DEFAULTS.contains(key)) {
        throw new IllegalArgumentException("must not set '" + key + "': "
            + (key.equals("add_generation_prompt") || key.equals("continue_final_message")
                ? "the request's own field always wins over a default of that name"
                : "the renderer sets it itself"));
      }
    }
    return new DefaultChatTemplateKwargs(o);
  }

  /** Whether there are no defaults (an empty object): the request's kwargs are used as given. */
  public boolean isEmpty() {
    return defaults.isEmpty();
  }

  /** The defaults as compact JSON. */
  public String json() {
    return json;
  }

  /**
   * The template fields of a request without {@code tools} with these defaults under its
   * {@code chat_template_kwargs}: {@link #applyTo(ChatTemplateArgs, String)} with no tools.
   *
   * @throws Tokenizer.TokenizationException when the request's kwargs are not a JSON object
   */
  public ChatTemplateArgs applyTo(ChatTemplateArgs args) {
    return applyTo(args, null);
  }

  /**
   * The request's template fields with these defaults under its {@code chat_template_kwargs}.
   * A request that gives {@code tools} ({@code toolsJson} not null) is rendered with its own
   * rather than a default's: vLLM merges the request's tools over the defaults
   * ({@code merge_kwargs(default_chat_template_kwargs, {tools: tool_dicts})}, where no tools
   * leave the default) and then the request's kwargs over both, whose {@code tools} key, if any,
   * wins over either.
   *
   * @param toolsJson the request's {@code tools} array as JSON, or {@code null} when it has none
   * @throws Tokenizer.TokenizationException when the request's kwargs are not a JSON object
   */
  public ChatTemplateArgs applyTo(ChatTemplateArgs args, @Nullable String toolsJson) {
    if (defaults.isEmpty()) {
      // vLLM leaves the request's kwargs untouched (null values included) without defaults
      return args;
    }
    ObjectNode base = defaults;
    String baseJson = json;
    if (toolsJson != null && defaults.has("tools")) {
      base = defaults.deepCopy();
      base.remove("tools");
      baseJson = base.toString();
    }
    String given = args.kwargsJson();
    if (given == null) {
      return args.withKwargs(baseJson);
    }
    JsonNode request;
    try {
      request = JSON.readTree(given);
    } catch (JsonProcessingException e) {
      throw new Tokenizer.TokenizationException("the request's chat_template_kwargs are not JSON");
    }
    if (!(request instanceof ObjectNode r)) {
      throw new Tokenizer.TokenizationException("the request's chat_template_kwargs are not a"
          + " JSON object");
    }
    ObjectNode merged = base.deepCopy();
    for (Iterator<Map.Entry<String, JsonNode>> it = r.fields(); it.hasNext(); ) {
      Map.Entry<String, JsonNode> e = it.next();
      JsonNode v = e.getValue();
      if (v.isNull() || v.isTextual() && v.textValue().equals("auto")) {
        continue;
      }
      merged.set(e.getKey(), v);
    }
    return args.withKwargs(merged.toString());
  }

  @Override
  public String toString() {
    // operator configuration, not client text; the keys are enough to tell two apart
    java.util.List<String> keys = new java.util.ArrayList<>();
    defaults.fieldNames().forEachRemaining(keys::add);
    return "DefaultChatTemplateKwargs" + keys;
  }

  @Override
  public boolean equals(Object o) {
    return o instanceof DefaultChatTemplateKwargs d && d.json.equals(json);
  }

  @Override
  public int hashCode() {
    return json.hashCode();
  }
}
