package io.epp4j.core;

import static io.epp4j.core.RequestBodyErrors.at;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.StreamReadConstraints;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.epp4j.api.ChatMessage;
import io.epp4j.api.ChatTemplateArgs;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RepeatedHeaders;
import io.epp4j.api.Result;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.UUID;
import org.jspecify.annotations.Nullable;

/**
 * Turns OpenAI {@code /v1/completions} and {@code /v1/chat/completions} bodies into
 * {@link InferenceRequest}s with a single streaming pass, and those of the APIs that take an
 * {@code input} ({@code /v1/embeddings}, {@code /v1/responses}, and any other path but the two
 * completions ones), as the upstream EPP does: the {@code input} is the prompt (text; token IDs;
 * a batch of strings joined with U+001E or of token lists concatenated; Responses items as
 * canonical JSON), after the {@code instructions} and U+001E when there are some, and
 * {@code max_output_tokens} the token limit. Reads {@code model}, {@code prompt}
 * (text, or token IDs; a batch of prompts, which the engine takes, as its strings joined with
 * U+001E or its token lists concatenated), {@code messages} (content as a string or an array of parts),
 * {@code tools}, {@code tool_choice} (a string kept, a named tool skipped; on a chat only),
 * the chat template's fields {@code add_generation_prompt},
 * {@code continue_final_message}, {@code chat_template_kwargs} (an object),
 * {@code documents} (an array of objects of strings) and {@code reasoning_effort} (a string),
 * the last two joining the kwargs as vLLM merges them, and {@code chat_template} (a string, the
 * request's own template; all on a chat only, where the engine reads them, and never both
 * booleans true), {@code add_special_tokens} (vLLM's default when absent: true for a
 * completion, false for a chat), {@code cache_salt}, {@code stream},
 * {@code max_tokens} /
 * {@code max_completion_tokens} (an integer, or a whole number written as a float, as vLLM reads
 * it; when both are given, a chat request counts {@code max_completion_tokens} and a completion
 * request {@code max_tokens}, as the engines do); other fields are skipped, and a top-level field
 * other than {@code model} that is {@code null} counts as absent. Errors are values naming the field
 * and, for malformed JSON or UTF-8 or a value of the wrong type, the position; nothing is thrown
 * and no byte of the body is quoted in a message (Jackson's own messages quote the offending
 * token, so they are never passed on). Header entries with a null name or value count as absent.
 */
public final class OpenAiRequestParser {

  /** Default body size limit: 16 MiB. */
  public static final int DEFAULT_MAX_BODY_BYTES = 16 << 20;
  /**
   * Default headers that carry the session key, tried in order: {@code x-session-id}, the session
   * headers coding agents send on every request of a session ({@code x-claude-code-session-id}
   * from Claude Code, {@code x-session-affinity} from OpenCode, {@code session-id} and the
   * earlier {@code session_id} from Codex, as llm-d's {@code agent-identity} lists them), then
   * {@code x-session-token} (the endpoint token {@code session-affinity-scorer} writes on answers,
   * which names an endpoint rather than one session).
   */
  public static final List<String> DEFAULT_SESSION_HEADERS = List.of("x-session-id",
      "x-claude-code-session-id", "x-session-affinity", "session-id", "session_id",
      "x-session-token");
  /** Header carrying the request priority (negative = sheddable). */
  public static final String PRIORITY_HEADER = "x-request-priority";
  /** Header carrying the request id. */
  public static final String REQUEST_ID_HEADER = "x-request-id";

  private final int maxBodyBytes;
  private final List<String> sessionHeaders;
  private final JsonFactory factory;
  private final ToolsReader tools;

  private OpenAiRequestParser(int maxBodyBytes, List<String> sessionHeaders) {
    this.maxBodyBytes = maxBodyBytes;
    this.sessionHeaders = sessionHeaders;
    this.factory = JsonFactory.builder()
        .streamReadConstraints(StreamReadConstraints.builder()
            .maxStringLength(Math.max(maxBodyBytes, StreamReadConstraints.DEFAULT_MAX_STRING_LEN))
            .maxNestingDepth(64)
            .build())
        .build();
    this.tools = new ToolsReader(factory);
  }

  /** A parser with the default size limit and session headers. */
  public static OpenAiRequestParser defaults() {
    return new OpenAiRequestParser(DEFAULT_MAX_BODY_BYTES, DEFAULT_SESSION_HEADERS);
  }

  /**
   * A parser with a body size limit and the headers that carry the session key.
   *
   * @param maxBodyBytes   bodies above this many bytes are rejected (must be > 0)
   * @param sessionHeaders header names tried in order for the session key
   */
  public static OpenAiRequestParser of(int maxBodyBytes, List<String> sessionHeaders) {
    if (maxBodyBytes <= 0) {
      throw new IllegalArgumentException("maxBodyBytes must be > 0, got " + maxBodyBytes);
    }
    Objects.requireNonNull(sessionHeaders, "sessionHeaders");
    List<String> lower = new ArrayList<>();
    int i = 0;
    for (String h : sessionHeaders) {
      // named here, as the router's own settings name a null, not by a bare toLowerCase failure
      int at = i++;
      Objects.requireNonNull(h, () -> "sessionHeaders: the entry at index " + at + " is null");
      lower.add(h.toLowerCase(Locale.ROOT));
    }
    return new OpenAiRequestParser(maxBodyBytes, List.copyOf(lower));
  }

  public int maxBodyBytes() {
    return maxBodyBytes;
  }

  /**
   * Parses a body. {@code path} (a query string or fragment on it is ignored) selects the shape
   * ({@code ...chat/completions} is chat,
   * {@code ...completions} completions, anything else takes an {@code input} when it has no
   * {@code prompt} or {@code messages}), but a body with {@code messages} is read as chat either
   * way.
   */
  public Result<InferenceRequest> parse(String path, Map<String, String> headers, byte[] body) {
    Objects.requireNonNull(body, "body");
    String error = checkBytes(body);
    if (error != null) {
      return Result.error(error);
    }
    InferenceRequest.Builder b = InferenceRequest.builder();
    PromptFields prompt = new PromptFields();
    // the shape is the path's, not its query's: "/v1/chat/completions?api-version=1" is chat
    @Nullable String shape = withoutQuery(path);
    // the engine reads "input" (and "instructions", "max_output_tokens") on every path but the
    // two completions ones; there such fields are not the request's and are skipped unread
    prompt.takesInput = shape == null || !shape.endsWith("completions");
    error = readBody(body, b, prompt);
    if (error == null) {
      error = prompt.checkAndApply(shape, b);
    }
    if (error == null) {
      error = readHeaders(headers, b);
    }
    return error != null ? Result.error(error) : Result.ok(b.build());
  }

  /** {@code path} up to its query or fragment, if it has one. */
  private static @Nullable String withoutQuery(@Nullable String path) {
    if (path == null) {
      return null;
    }
    for (int i = 0, n = path.length(); i < n; i++) {
      char c = path.charAt(i);
      if (c == '?' || c == '#') {
        return path.substring(0, i);
      }
    }
    return path;
  }

  /**
   * Reads a request that has no body to parse ({@code GET /v1/models} and the like): no prompt
   * and no model, but its headers count as {@link #parse} counts a body's: the request id, the
   * priority ({@value #PRIORITY_HEADER}; one that is not an integer is an error naming it) and the
   * session key.
   */
  public Result<InferenceRequest> parseHeaders(Map<String, String> headers) {
    Objects.requireNonNull(headers, "headers");
    InferenceRequest.Builder b = InferenceRequest.builder().prompt("");
    String error = readHeaders(headers, b);
    return error != null ? Result.error(error) : Result.ok(b.build());
  }

  /** Size and encoding, checked before any JSON is read. */
  private @Nullable String checkBytes(byte[] body) {
    if (body.length > maxBodyBytes) {
      return "request body is " + body.length + " bytes, above the limit of " + maxBodyBytes;
    }
    if (body.length == 0) {
      return "request body is empty";
    }
    return RequestBodyErrors.encodingError(body);
  }

  /**
   * The model and the prompt in its three spellings, collected during the pass and checked
   * together after it, because which ones must be present depends on all of them.
   */
  private static final class PromptFields {
    @Nullable String model;
    @Nullable String prompt;
    int @Nullable [] tokens;
    @Nullable List<ChatMessage> messages;
    // -1: absent or null. Kept apart because which one counts depends on the request's kind:
    // the engines take max_completion_tokens before max_tokens for chat, and ignore
    // max_completion_tokens on /v1/completions
    int maxTokens = -1;
    int maxCompletionTokens = -1;
    // /v1/embeddings and /v1/responses: "input" (text, token IDs, or items kept as canonical
    // JSON), "instructions" (Responses), "max_output_tokens" (Responses)
    @Nullable String input;
    int @Nullable [] inputTokens;
    @Nullable String instructions;
    int maxOutputTokens = -1;
    /** Whether the path takes an {@code input} (set before the body is read). */
    boolean takesInput;
    /** Whether field {@code prompt_embeds} holds embeddings (a completion's, vLLM). */
    boolean embeds;
    // the chat template's fields: null while absent (or null); checked only for a chat, as the
    // engine reads them only there (a completion request's are unknown fields it ignores)
    @Nullable Boolean addGenerationPrompt;
    @Nullable Boolean continueFinalMessage;
    @Nullable ObjectNode chatTemplateKwargs;
    /** Field {@code documents}, an array of objects of strings, or null while absent. */
    @Nullable JsonNode documents;
    /** Field {@code reasoning_effort}, or null while absent. */
    @Nullable String reasoningEffort;
    /** Field {@code chat_template}, the request's own template, or null while absent. */
    @Nullable String chatTemplate;
    /** Field {@code tool_choice} when a string; null while absent, null or a named tool. */
    @Nullable String toolChoice;
    /** The first of these fields with a bad value, reported if the request is a chat. */
    @Nullable String chatFieldError;

    @Nullable String checkAndApply(@Nullable String path, InferenceRequest.Builder b) {
      if (model == null || model.isEmpty()) {
        return "field 'model' is required";
      }
      boolean chatPath = path != null && path.endsWith("chat/completions");
      boolean inputPath = path != null && (path.endsWith("/embeddings") || path.endsWith("/responses"));
      int forms = (prompt != null ? 1 : 0) + (tokens != null ? 1 : 0) + (messages != null ? 1 : 0);
      if (forms == 0 && takesInput && (input != null || inputTokens != null)) {
        // an embeddings or Responses body: its input is the prompt, after the instructions the
        // engine puts in front of it
        b.model(model).tokenIds(inputTokens);
        String text = input;
        if (text != null && instructions != null) {
          text = instructions + '\u001E' + text;
        }
        b.prompt(text);
        int limit = maxOutputTokens >= 0 ? maxOutputTokens : maxTokens;
        if (limit >= 0) {
          b.maxTokens(limit);
        }
        return null;
      }
      if (forms == 0 && embeds && !chatPath && !inputPath) {
        // a completion of prompt embeddings alone (vLLM started with --enable-prompt-embeds):
        // no token a prefix plugin could hash, so it is routed as a prompt cached nowhere
        tokens = new int[0];
        forms = 1;
      }
      if (forms == 0) {
        return inputPath ? "field 'input' is required"
            : chatPath ? "field 'messages' is required" : "field 'prompt' is required";
      }
      if (forms > 1) {
        return "fields 'prompt' and 'messages' must not both be present";
      }
      if (messages != null && messages.isEmpty()) {
        return "field 'messages' must not be empty";
      }
      b.model(model).prompt(prompt).tokenIds(tokens);
      if (messages != null) {
        if (chatFieldError != null) {
          return chatFieldError;
        }
        // the engine's request model refuses the two together when the body sets both
        if (Boolean.TRUE.equals(addGenerationPrompt) && Boolean.TRUE.equals(continueFinalMessage)) {
          return "fields 'add_generation_prompt' and 'continue_final_message' must not both be"
              + " true";
        }
        b.messages(messages).toolChoice(toolChoice);
        b.chatTemplateArgs(new ChatTemplateArgs(!Boolean.FALSE.equals(addGenerationPrompt),
            Boolean.TRUE.equals(continueFinalMessage), templateKwargs(), chatTemplate));
      }
      int first = messages != null ? maxCompletionTokens : maxTokens;
      int limit = first >= 0 ? first : messages != null ? maxTokens : maxCompletionTokens;
      if (limit >= 0) {
        b.maxTokens(limit);
      }
      return null;
    }

    /**
     * The template's variables as vLLM's {@code ChatCompletionRequest.build_chat_params} merges
     * them: the request's {@code chat_template_kwargs}, with {@code documents} over them when the
     * request gives it (vLLM hands both to {@code apply_chat_template} as its
     * {@code documents}), then {@code reasoning_effort}, and with it {@code enable_thinking}
     * (false for {@code "none"}, else true) unless the request's kwargs set that key, which
     * turns thinking on or off in templates that read it (Qwen3, Gemma 4); compact JSON in the
     * body's key order, a key added last.
     */
    private @Nullable String templateKwargs() {
      ObjectNode given = chatTemplateKwargs;
      if (documents == null && reasoningEffort == null) {
        return given == null ? null : given.toString();
      }
      ObjectNode kwargs = given == null ? JsonNodeFactory.instance.objectNode() : given;
      boolean userSetsThinking = kwargs.has("enable_thinking");
      JsonNode docs = documents;
      if (docs != null) {
        kwargs.set("documents", docs);
      }
      String effort = reasoningEffort;
      if (effort != null) {
        kwargs.put("reasoning_effort", effort);
        if (!userSetsThinking) {
          kwargs.put("enable_thinking", !effort.equals("none"));
        }
      }
      return kwargs.toString();
    }
  }

  /**
   * Field {@code documents} as vLLM's request model takes it ({@code list[dict[str, str]]}): an
   * array of objects whose values are strings; an error message naming the element, or null.
   */
  private static @Nullable String checkDocuments(JsonNode documents) {
    if (!documents.isArray()) {
      return "field 'documents' must be an array of objects";
    }
    for (int i = 0; i < documents.size(); i++) {
      JsonNode d = documents.get(i);
      if (!d.isObject()) {
        return "field 'documents[" + i + "]' must be an object";
      }
      for (JsonNode v : d) {
        if (!v.isTextual()) {
          // the key is client text: not quoted
          return "field 'documents[" + i + "]' must have only string values";
        }
      }
    }
    return null;
  }

  /** The single streaming pass: every top-level field into {@code b} or {@code prompt}. */
  private @Nullable String readBody(byte[] body, InferenceRequest.Builder b, PromptFields prompt) {
    try (JsonParser p = factory.createParser(body)) {
      if (p.nextToken() != JsonToken.START_OBJECT) {
        return "request body must be a JSON object";
      }
      while (p.nextToken() == JsonToken.FIELD_NAME) {
        String field = p.currentName();
        String error = readField(field, p.nextToken(), p, body, b, prompt);
        if (error != null) {
          return error;
        }
      }
      if (p.currentToken() != JsonToken.END_OBJECT) {
        return "request body is not a well-formed JSON object";
      }
      if (p.nextToken() != null) {
        return "request body has content after the JSON object";
      }
      return null;
    } catch (JsonProcessingException e) {
      return RequestBodyErrors.syntaxError(e);
    } catch (IOException e) {
      // not reachable for a byte array that passed the encoding check; never quote the message
      return "request body could not be read (" + e.getClass().getSimpleName() + ")";
    }
  }

  /** One top-level field whose value starts at token {@code t}; unknown fields are skipped. */
  private @Nullable String readField(String field, JsonToken t, JsonParser p, byte[] body,
      InferenceRequest.Builder b, PromptFields prompt) throws IOException {
    switch (field) {
      case "model" -> {
        if (t != JsonToken.VALUE_STRING) {
          return "field 'model' must be a string" + at(p);
        }
        prompt.model = p.getText();
      }
      case "prompt" -> {
        // a field given twice: the last one counts, as the engine's JSON reader takes it
        prompt.prompt = null;
        prompt.tokens = null;
        if (t == JsonToken.VALUE_NULL) {
          // absent, as a null tools or max_tokens is: a client writing every field of one
          // request type for both APIs sends it with its chat messages, which the engine serves
          return null;
        }
        if (t == JsonToken.VALUE_STRING) {
          prompt.prompt = p.getText();
        } else if (t == JsonToken.START_ARRAY) {
          Object parsed = readPromptArray(p, "prompt");
          if (parsed instanceof String err) {
            return err;
          }
          if (parsed instanceof int[] ids) {
            prompt.tokens = ids;
          } else {
            prompt.prompt = (String) ((Object[]) parsed)[0];
          }
        } else {
          return "field 'prompt' must be a string, an array of strings or of token IDs" + at(p);
        }
      }
      case "prompt_embeds" -> {
        // base64 tensors, read by the engine only: skipped, not copied
        prompt.embeds = false;
        if (t == JsonToken.VALUE_NULL) {
          return null;
        }
        if (t == JsonToken.START_ARRAY) {
          p.skipChildren();
        } else if (t != JsonToken.VALUE_STRING) {
          return "field 'prompt_embeds' must be a string or an array of strings" + at(p);
        }
        prompt.embeds = true;
      }
      case "messages" -> {
        if (t == JsonToken.VALUE_NULL) {
          prompt.messages = null; // absent, as a null prompt is
          return null;
        }
        if (t != JsonToken.START_ARRAY) {
          return "field 'messages' must be an array" + at(p);
        }
        prompt.messages = new ArrayList<>();
        return ChatMessagesReader.readMessages(p, prompt.messages);
      }
      case "tools" -> {
        if (t == JsonToken.VALUE_NULL) {
          return null;
        }
        if (t != JsonToken.START_ARRAY) {
          return "field 'tools' must be an array" + at(p);
        }
        b.toolsJson(tools.toolsJson(p, body));
      }
      case "tool_choice" -> {
        // "none", "auto", "required" or a named tool ({"type": "function", ...}); on a chat only,
        // where vLLM's --exclude-tools-when-tool-choice-none makes "none" render without tools
        prompt.toolChoice = null;
        if (t == JsonToken.VALUE_STRING) {
          prompt.toolChoice = p.getText();
        } else if (t == JsonToken.START_OBJECT) {
          p.skipChildren();
        } else if (t != JsonToken.VALUE_NULL) {
          String where = at(p);
          p.skipChildren();
          if (prompt.chatFieldError == null) {
            prompt.chatFieldError = "field 'tool_choice' must be a string or an object" + where;
          }
        }
      }
      case "cache_salt" -> {
        if (t == JsonToken.VALUE_NULL) {
          return null;
        }
        if (t != JsonToken.VALUE_STRING) {
          return "field 'cache_salt' must be a string" + at(p);
        }
        b.cacheSalt(p.getText());
      }
      case "add_special_tokens" -> {
        // vLLM tokenizes the prompt text (a chat's rendered template too) with the special
        // tokens of the tokenizer when true; its default is true for a completion, false for a
        // chat
        Boolean special = laxBoolean(p, t);
        if (special == null && t != JsonToken.VALUE_NULL) {
          return "field 'add_special_tokens' must be true or false" + at(p);
        }
        b.addSpecialTokens(special);
      }
      case "stream" -> {
        Boolean stream = laxBoolean(p, t);
        if (stream == null && t != JsonToken.VALUE_NULL) {
          return "field 'stream' must be true or false" + at(p);
        }
        b.stream(Boolean.TRUE.equals(stream));
      }
      case "n" -> {
        // the sequences the engine generates, each up to max_tokens: counted in the request's
        // output tokens. Read as max_tokens is; a value the engine refuses (below 1, not an
        // integer) is left for it to refuse, and counts as 1 here
        int n = t == JsonToken.VALUE_NULL ? -1 : tokenLimit(p, t);
        if (n < 0) {
          p.skipChildren();
        }
        b.sequences(Math.max(1, n));
      }
      case "max_tokens", "max_completion_tokens", "max_output_tokens" -> {
        if (!prompt.takesInput && field.equals("max_output_tokens")) {
          p.skipChildren();
          return null;
        }
        int limit = t == JsonToken.VALUE_NULL ? -1 : tokenLimit(p, t);
        if (limit < 0 && t != JsonToken.VALUE_NULL) {
          return "field '" + field + "' must be a non-negative integer" + at(p);
        }
        if (field.equals("max_tokens")) {
          prompt.maxTokens = limit;
        } else if (field.equals("max_completion_tokens")) {
          prompt.maxCompletionTokens = limit;
        } else {
          prompt.maxOutputTokens = limit;
        }
      }
      case "add_generation_prompt", "continue_final_message" -> {
        Boolean v = laxBoolean(p, t);
        if (v == null && t != JsonToken.VALUE_NULL) {
          String where = at(p);
          p.skipChildren();
          if (prompt.chatFieldError == null) {
            prompt.chatFieldError = "field '" + field + "' must be true or false" + where;
          }
          return null;
        }
        if (field.equals("add_generation_prompt")) {
          prompt.addGenerationPrompt = v;
        } else {
          prompt.continueFinalMessage = v;
        }
      }
      case "chat_template_kwargs" -> {
        prompt.chatTemplateKwargs = null;
        if (t == JsonToken.VALUE_NULL) {
          return null;
        }
        if (t != JsonToken.START_OBJECT) {
          String where = at(p);
          p.skipChildren();
          if (prompt.chatFieldError == null) {
            prompt.chatFieldError = "field 'chat_template_kwargs' must be an object" + where;
          }
          return null;
        }
        JsonNode kwargs = CanonicalJson.readTree(p);
        for (String reserved : new String[] {"chat_template", "tokenize"}) {
          // vLLM refuses these: the template is the model's, and the answer is not tokens
          if (kwargs.has(reserved) && prompt.chatFieldError == null) {
            prompt.chatFieldError = "field 'chat_template_kwargs' must not set '" + reserved
                + "'";
          }
        }
        // in the body's key order, which a template that walks the dict sees
        prompt.chatTemplateKwargs = (ObjectNode) kwargs;
      }
      case "chat_template" -> {
        // the request's own template, which vLLM renders only when trusted: kept, so that a
        // tokenizer does not render the model's template in its place; on a chat only
        prompt.chatTemplate = chatString(p, t, "chat_template", prompt);
      }
      case "reasoning_effort" -> {
        // on a chat only; vLLM's set of values grows with its versions, so any string is taken
        prompt.reasoningEffort = chatString(p, t, "reasoning_effort", prompt);
      }
      case "documents" -> {
        // documents for retrieval-augmented templates (Granite, Command-R); on a chat only
        prompt.documents = null;
        if (t == JsonToken.VALUE_NULL) {
          return null;
        }
        String where = at(p);
        JsonNode documents = CanonicalJson.readTree(p);
        String err = checkDocuments(documents);
        if (err != null) {
          if (prompt.chatFieldError == null) {
            prompt.chatFieldError = err + where;
          }
          return null;
        }
        prompt.documents = documents;
      }
      case "input" -> {
        if (!prompt.takesInput) {
          p.skipChildren();
          return null;
        }
        prompt.input = null;
        prompt.inputTokens = null;
        if (t == JsonToken.VALUE_STRING) {
          prompt.input = p.getText();
        } else if (t == JsonToken.START_ARRAY) {
          String err = readInputArray(p, prompt);
          if (err != null) {
            return err;
          }
        } else if (t != JsonToken.VALUE_NULL) {
          return "field 'input' must be a string or an array" + at(p);
        }
      }
      case "instructions" -> {
        if (!prompt.takesInput) {
          p.skipChildren();
          return null;
        }
        if (t == JsonToken.VALUE_NULL) {
          prompt.instructions = null;
          return null;
        }
        if (t != JsonToken.VALUE_STRING) {
          return "field 'instructions' must be a string" + at(p);
        }
        prompt.instructions = p.getText();
      }
      default -> p.skipChildren();
    }
    return null;
  }

  /**
   * Headers: the request id, the priority and the session key, and the headers themselves, all
   * read from one map with lower-case names, in which names that differ only in case are one
   * header with their values joined ({@link RepeatedHeaders#lowerCased}); before, the session
   * key came from the first of them and the request's headers kept another.
   */
  private @Nullable String readHeaders(Map<String, String> headers, InferenceRequest.Builder b) {
    Map<String, String> lower = RepeatedHeaders.lowerCased(headers);
    b.headers(lower);
    String priority = lower.get(PRIORITY_HEADER);
    if (priority != null) {
      String v = priority.trim();
      // ASCII digits after an optional sign, as an HTTP header and Go's strconv.Atoi take them:
      // Integer.parseInt alone also reads other scripts' digits (Arabic-Indic, full-width)
      int from = v.startsWith("+") || v.startsWith("-") ? 1 : 0;
      if (v.length() == from || !v.chars().skip(from).allMatch(c -> c >= '0' && c <= '9')) {
        return "header '" + PRIORITY_HEADER + "' must be an integer";
      }
      try {
        b.priority(Integer.parseInt(v));
      } catch (NumberFormatException e) {
        return "header '" + PRIORITY_HEADER + "' must be an integer";
      }
    }
    String requestId = lower.get(REQUEST_ID_HEADER);
    b.requestId(requestId != null ? requestId : UUID.randomUUID().toString());
    b.sessionKey(sessionKey(lower));
    return null;
  }

  /** The first non-empty value among the session headers, in their order; null if none. */
  private @Nullable String sessionKey(Map<String, String> lowerCaseHeaders) {
    for (String sh : sessionHeaders) {
      String v = lowerCaseHeaders.get(sh);
      if (v != null && !v.isEmpty()) {
        return v;
      }
    }
    return null;
  }

  /**
   * True for an integer in [0, 2^31). Asks for the number type first: reading a value beyond
   * long as a long throws, and Jackson's message for that quotes the number.
   */
  static boolean isIntInRange(JsonParser p, JsonToken t) throws IOException {
    if (t != JsonToken.VALUE_NUMBER_INT) {
      return false;
    }
    JsonParser.NumberType type = p.getNumberType();
    if (type == JsonParser.NumberType.INT) {
      return p.getIntValue() >= 0;
    }
    return type == JsonParser.NumberType.LONG && p.getLongValue() >= 0 && p.getLongValue() <= Integer.MAX_VALUE;
  }

  /**
   * A token limit in [0, 2^31), or -1. A whole number written as a float ({@code 100.0},
   * {@code 1e3}) counts as that integer, as the engine's request model (pydantic, lax mode) reads
   * it: clients whose JSON writer prints numbers as doubles are served by vLLM, so a 400 here
   * would refuse requests the replica takes. A fraction stays an error there and here.
   */
  /**
   * A boolean as the engines' request models (pydantic, lax mode) read one: {@code true} and
   * {@code false}, the numbers 0 and 1, and the strings 0, 1, f, t, n, y, no, yes, off, on, false
   * and true in any case; {@code null} for anything else.
   */
  static @Nullable Boolean laxBoolean(JsonParser p, JsonToken t) throws IOException {
    switch (t) {
      case VALUE_TRUE:
        return Boolean.TRUE;
      case VALUE_FALSE:
        return Boolean.FALSE;
      case VALUE_NUMBER_INT:
      case VALUE_NUMBER_FLOAT: {
        double d = p.getDoubleValue();
        return d == 0 ? Boolean.FALSE : d == 1 ? Boolean.TRUE : null;
      }
      case VALUE_STRING: {
        String v = p.getText();
        if (v.length() > 5) {
          return null;
        }
        switch (v.toLowerCase(Locale.ROOT)) {
          case "0", "f", "n", "no", "off", "false":
            return Boolean.FALSE;
          case "1", "t", "y", "yes", "on", "true":
            return Boolean.TRUE;
          default:
            return null;
        }
      }
      default:
        return null;
    }
  }

  /**
   * A chat-only string field at {@code t}: its text, or null for {@code null}; any other value is
   * skipped and noted as the chat's field error (reported only if the request is a chat).
   */
  private static @Nullable String chatString(JsonParser p, JsonToken t, String field,
      PromptFields prompt) throws IOException {
    if (t == JsonToken.VALUE_STRING) {
      return p.getText();
    }
    if (t != JsonToken.VALUE_NULL) {
      String where = at(p);
      p.skipChildren();
      if (prompt.chatFieldError == null) {
        prompt.chatFieldError = "field '" + field + "' must be a string" + where;
      }
    }
    return null;
  }

  private static int tokenLimit(JsonParser p, JsonToken t) throws IOException {
    if (t == JsonToken.VALUE_STRING) {
      // pydantic's lax mode reads a string of digits (surrounding whitespace and a fraction of
      // zeros allowed) as the integer it spells
      String v = p.getText().strip();
      int dot = v.indexOf('.');
      String whole = dot < 0 ? v : v.substring(0, dot);
      if (whole.isEmpty() || whole.length() > 10 || !whole.chars().allMatch(c -> c >= '0' && c <= '9')
          || dot >= 0 && !v.substring(dot + 1).chars().allMatch(c -> c == '0')) {
        return -1;
      }
      long n = Long.parseLong(whole);
      return n <= Integer.MAX_VALUE ? (int) n : -1;
    }
    if (t == JsonToken.VALUE_NUMBER_FLOAT) {
      double d = p.getDoubleValue();
      return d >= 0 && d <= Integer.MAX_VALUE && d == Math.rint(d) ? (int) d : -1;
    }
    return isIntInRange(p, t) ? p.getIntValue() : -1;
  }

  /**
   * An {@code input} array: token IDs and strings as a {@code prompt} array is read (streamed,
   * so a long list of IDs is not held as a tree), items (Responses) as canonical JSON text, so
   * that key order and whitespace do not change it and a conversation that grows by items keeps
   * the text of its earlier items in front. An error message or null.
   */
  private static @Nullable String readInputArray(JsonParser p, PromptFields prompt)
      throws IOException {
    JsonToken t = p.nextToken();
    if (t != JsonToken.START_OBJECT) {
      Object parsed = readPromptArrayFrom(p, t, "input");
      if (parsed instanceof String err) {
        return err;
      }
      if (parsed instanceof int[] ids) {
        prompt.inputTokens = ids;
      } else {
        prompt.input = (String) ((Object[]) parsed)[0];
      }
      return null;
    }
    ArrayNode items = JsonNodeFactory.instance.arrayNode();
    for (; t != JsonToken.END_ARRAY; t = p.nextToken()) {
      items.add(CanonicalJson.readTree(p));
    }
    prompt.input = CanonicalJson.canonical(items);
    return null;
  }

  /**
   * A {@code prompt} or {@code input} array, read from the stream: int[] for token IDs (a batch
   * of token lists concatenated), Object[]{String} for text (a batch of strings joined), or a
   * String error. The array's START_ARRAY is the current token.
   */
  private static Object readPromptArray(JsonParser p, String field) throws IOException {
    return readPromptArrayFrom(p, p.nextToken(), field);
  }

  /** {@link #readPromptArray} with the array's first token {@code t} already read. */
  private static Object readPromptArrayFrom(JsonParser p, JsonToken t, String field)
      throws IOException {
    if (t == JsonToken.END_ARRAY) {
      return "field '" + field + "' must not be an empty array" + at(p);
    }
    if (t == JsonToken.VALUE_NUMBER_INT) {
      int[] ids = new int[256];
      int n = 0;
      while (t == JsonToken.VALUE_NUMBER_INT) {
        if (!isIntInRange(p, t)) {
          return "field '" + field + "[" + n + "]' holds a token ID outside [0, 2^31)" + at(p);
        }
        if (n == ids.length) {
          ids = Arrays.copyOf(ids, n * 2);
        }
        ids[n++] = p.getIntValue();
        t = p.nextToken();
      }
      if (t != JsonToken.END_ARRAY) {
        return "field '" + field + "[" + n + "]' mixes token IDs with other values" + at(p);
      }
      return Arrays.copyOf(ids, n);
    }
    if (t == JsonToken.VALUE_STRING) {
      // a batch of prompts, which the engine serves in one request: joined with U+001E, so the
      // first prompt's blocks hash as that prompt alone and the length counts them all
      String first = p.getText();
      t = p.nextToken();
      if (t == JsonToken.END_ARRAY) {
        return new Object[] {first};
      }
      StringBuilder sb = new StringBuilder(first);
      for (int i = 1; t != JsonToken.END_ARRAY; t = p.nextToken(), i++) {
        if (t != JsonToken.VALUE_STRING) {
          return "field '" + field + "[" + i + "]' mixes strings with other values" + at(p);
        }
        sb.append('\u001E').append(p.getText());
      }
      return new Object[] {sb.toString()};
    }
    if (t == JsonToken.START_ARRAY) {
      // a batch of token lists: concatenated, as a batch of strings is joined
      int[] ids = new int[256];
      int n = 0;
      for (int i = 0; t != JsonToken.END_ARRAY; t = p.nextToken(), i++) {
        if (t != JsonToken.START_ARRAY) {
          return "field '" + field + "[" + i + "]' mixes token arrays with other values" + at(p);
        }
        int j = 0;
        for (t = p.nextToken(); t != JsonToken.END_ARRAY; t = p.nextToken(), j++) {
          if (!isIntInRange(p, t)) {
            return "field '" + field + "[" + i + "][" + j + "]' must be a token ID in [0, 2^31)" + at(p);
          }
          if (n == ids.length) {
            ids = Arrays.copyOf(ids, n * 2);
          }
          ids[n++] = p.getIntValue();
        }
        if (j == 0) {
          return "field '" + field + "[" + i + "]' must not be an empty array" + at(p);
        }
      }
      return Arrays.copyOf(ids, n);
    }
    return "field '" + field + "[0]' must be a string or a token ID" + at(p);
  }
}
