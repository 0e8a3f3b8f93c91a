package io.epp4j.sim;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.StreamReadConstraints;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.epp4j.api.ChatMessage;
import java.io.IOException;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.jspecify.annotations.Nullable;

/**
 * The body of an OpenAI completions, chat or {@code /tokenize} request, read with Jackson's
 * streaming parser. A prompt of token IDs goes straight into an {@code int[]} and the messages of
 * a chat into their role, text and the fields a chat template reads ({@code tool_calls}, ...): as
 * a tree, a 64 MiB body of IDs was a {@code JsonNode} per ID,
 * several hundred MB. The other fields the emulator reads are small and kept as a tree; fields it
 * does not read are skipped without building anything (vLLM ignores them too).
 */
final class RequestBody {
  /** Top-level fields kept as a tree: the ones the emulator reads, besides prompt and messages. */
  private static final Set<String> KEPT = Set.of("model", "cache_salt", "stream",
      "stream_options", "n", "max_tokens", "max_completion_tokens", "return_token_ids",
      "add_generation_prompt", "continue_final_message", "chat_template_kwargs", "tools",
      "logprobs", "top_logprobs", "prompt_logprobs", "min_tokens", "documents", "reasoning_effort",
      "chat_template", "suffix", "echo", "temperature", "top_p", "presence_penalty",
      "frequency_penalty", "repetition_penalty", "add_special_tokens", "top_k", "min_p", "seed",
      "stop", "include_stop_str_in_output", "stop_token_ids", "tool_choice", "ignore_eos",
      "response_format", "logit_bias", "return_token_strs", "priority",
      "truncate_prompt_tokens");
  /**
   * What a field the emulator does not otherwise use must be, as vLLM's completion and chat
   * request models type it; a field of another type is refused with a 400 naming it, as vLLM's
   * request validation refuses it, and the value is checked as it streams past, nothing kept.
   */
  private enum Shape {
    /** {@code str | None}. */
    STRING_OR_NULL("a string or null"),
    /** {@code str}. */
    STRING("a string"),
    /** {@code bool}, read leniently as pydantic does ({@code 1}, {@code "true"}, ...). */
    BOOLEAN("a boolean"),
    /** {@code bool | None}. */
    BOOLEAN_OR_NULL("a boolean or null"),
    /** {@code float}. */
    NUMBER("a number"),
    /** {@code list[int] | None}. */
    INTEGERS_OR_NULL("an array of integers or null"),
    /** {@code list[str]}. */
    STRINGS("an array of strings"),
    /** {@code dict[str, Any] | None}. */
    OBJECT_OR_NULL("an object or null"),
    /** A completion's {@code bytes | list[bytes] | None}. */
    EMBEDS("a string (base64) or an array of them, or null"),
    /** vLLM's {@code StructuredOutputsParams | None}. */
    STRUCTURED_OUTPUTS("an object whose json is a string or an object, regex, grammar,"
        + " whitespace_pattern and structural_tag strings, choice an array of strings, json_object"
        + " a boolean and the disable_ fields booleans, or null"),
    /** vLLM's {@code LogitsProcessors | None}. */
    LOGITS_PROCESSORS("an array of names (strings) or of objects with a string qualname, an args"
        + " array and a kwargs object, or null"),
    /** A completion's {@code dict[str, str | int | float] | None}. */
    XARGS("an object of strings and numbers, or null"),
    /** A chat's {@code dict[str, str | int | float | list[str | int | float]] | None}. */
    CHAT_XARGS("an object of strings, numbers and arrays of them, or null");

    final String what;

    Shape(String what) {
      this.what = what;
    }
  }

  /** Fields both request models type, with their types; then those only the chat's has. */
  private static final Map<String, Shape> TYPED = Map.ofEntries(
      Map.entry("user", Shape.STRING_OR_NULL),
      Map.entry("use_beam_search", Shape.BOOLEAN),
      Map.entry("length_penalty", Shape.NUMBER),
      Map.entry("skip_special_tokens", Shape.BOOLEAN),
      Map.entry("spaces_between_special_tokens", Shape.BOOLEAN),
      Map.entry("allowed_token_ids", Shape.INTEGERS_OR_NULL),
      Map.entry("structured_outputs", Shape.STRUCTURED_OUTPUTS),
      Map.entry("request_id", Shape.STRING),
      Map.entry("logits_processors", Shape.LOGITS_PROCESSORS),
      Map.entry("return_tokens_as_token_ids", Shape.BOOLEAN_OR_NULL),
      Map.entry("kv_transfer_params", Shape.OBJECT_OR_NULL),
      Map.entry("vllm_xargs", Shape.XARGS),
      Map.entry("prompt_embeds", Shape.EMBEDS));
  private static final Map<String, Shape> CHAT_TYPED = Map.of(
      "include_reasoning", Shape.BOOLEAN,
      "parallel_tool_calls", Shape.BOOLEAN_OR_NULL,
      "bad_words", Shape.STRINGS,
      "mm_processor_kwargs", Shape.OBJECT_OR_NULL,
      "vllm_xargs", Shape.CHAT_XARGS);

  // a string may be as long as a body may be (Jackson's default bound, 20 million characters,
  // made a longer text prompt "not valid JSON" where vLLM reads it)
  private static final ObjectMapper JSON = new ObjectMapper(JsonFactory.builder()
      .streamReadConstraints(StreamReadConstraints.builder()
          .maxStringLength(EmulatedServer.MAX_BODY_BYTES).build())
      .build());
  private static final int CHUNK = 1 << 16;

  /** A body that is not valid JSON, or valid JSON that is not an object. */
  static final class Malformed extends Exception {
    Malformed(String message) {
      super(message, null, false, false);
    }
  }

  /** What field {@code prompt} held. */
  sealed interface Prompt permits Ids, Text, Bad {}

  /** Token IDs, each checked: non-negative and within the vocabulary. */
  record Ids(int[] ids) implements Prompt {}

  /** A text prompt, to be tokenized. */
  record Text(String text) implements Prompt {}

  /** A prompt that cannot be served, and why (never quoting the prompt). */
  record Bad(String message) implements Prompt {}

  private final ObjectNode fields;
  private @Nullable Prompt prompt;
  // field prompt given as null, as a string itself (not a batch that holds one), as the empty
  // string; field prompt_embeds given as something other than null or []
  private boolean promptNull;
  private boolean promptString;
  private boolean promptEmptyString;
  private boolean promptEmbeds;
  private @Nullable Prompt tokens;
  private boolean hasMessages;
  // a List<ChatMessage>, or a String naming what is wrong
  private @Nullable Object messages;
  // the first content part vLLM's request model takes and its part parser refuses
  private @Nullable String partRefused;

  // the fields of TYPED and CHAT_TYPED given with a value of another type, in the order given
  // (a field given twice by its last value): the name, and whether it is wrong for a completion
  // and for a chat
  private final LinkedHashMap<String, boolean[]> mistyped =
      new LinkedHashMap<>();

  // field structured_outputs given with more than one of json, regex and choice
  private boolean structuredConstraints;
  // field request_id when a string
  private @Nullable String requestId;
  // field logits_processors given as a non-empty array
  private boolean logitsProcessors;
  // field allowed_token_ids: -1 when left out or null, else how many elements it holds, and
  // (when every one is an integer) those outside the model's vocabulary, as Python writes them
  private int allowedCount = -1;
  private List<String> allowedOutOfVocab = List.of();

  private RequestBody(ObjectNode fields) {
    this.fields = fields;
  }

  /** The small fields the emulator reads ({@code model}, {@code stream}, ...). */
  JsonNode fields() {
    return fields;
  }

  /** Field {@code prompt}, or null when the body has none. */
  @Nullable Prompt prompt() {
    return prompt;
  }

  /**
   * Whether field {@code prompt_embeds} holds embeddings: given as anything but null or
   * {@code []}.
   */
  boolean promptEmbedsGiven() {
    return promptEmbeds;
  }

  /**
   * Whether vLLM's completion request model refuses the body for its prompt
   * ({@code validate_prompt_and_prompt_embeds}): a prompt left out, null or {@code ""}, and
   * prompt embeds left out, null or {@code []}. A list holding {@code ""} passes it, as in vLLM:
   * that prompt is tokenized, and refused only if it has no tokens.
   */
  boolean promptMissing() {
    boolean empty = prompt == null || promptNull || promptEmptyString;
    return empty && !promptEmbeds;
  }

  /**
   * Whether field {@code prompt} is a JSON string itself, not token IDs or a batch that holds
   * one: the only prompt vLLM's {@code /tokenize} request model takes.
   */
  boolean promptIsString() {
    return promptString;
  }

  /** Field {@code tokens} ({@code /detokenize}), never a text; null when the body has none. */
  @Nullable Prompt tokens() {
    return tokens;
  }

  /** Whether the body has a field {@code messages}, whatever its value. */
  boolean hasMessages() {
    return hasMessages;
  }

  /**
   * The chat's messages (an array part's text parts joined with newlines), or a message naming
   * what is wrong with field {@code messages}.
   */
  Object messages() {
    Object m = messages;
    return m == null ? "field 'messages' must be a non-empty array" : m;
  }

  /**
   * What is wrong with the first content part of the messages that vLLM's request model takes
   * and its chat parser refuses, once the model is found: a part without a {@code type} (or
   * whose fields fit no part type, which leaves the request model none), unless it is one of the
   * plain {@code image_url}, {@code audio_url} or {@code video_url} parts, or a part with an
   * {@code input_audio}, that need none; a part whose {@code type} is not one of
   * {@link #PART_TYPES}; and a text part without a string {@code text}. Null when there is none.
   */
  @Nullable String partRefused() {
    return partRefused;
  }

  /**
   * The first field the emulator does not use whose value vLLM's request model (a chat's with
   * {@code chat}, else a completion's) refuses for its type, as {message, field}; null when
   * there is none. A field only the other model has is not looked at, as vLLM ignores it.
   */
  String @Nullable [] mistypedField(boolean chat) {
    for (var e : mistyped.entrySet()) {
      if (e.getValue()[chat ? 1 : 0]) {
        String name = e.getKey();
        Shape shape = chat ? CHAT_TYPED.getOrDefault(name, TYPED.get(name)) : TYPED.get(name);
        String what = shape == null ? "of another type" : shape.what;
        return new String[] {"field '" + name + "' must be " + what, name};
      }
    }
    return null;
  }

  /**
   * Whether field {@code structured_outputs} gives more than one kind of constraint
   * ({@code json}, {@code regex}, {@code choice}), which vLLM's request validators refuse.
   */
  boolean severalStructuredConstraints() {
    return structuredConstraints;
  }

  /** Field {@code request_id}, null when it is left out or not a string. */
  @Nullable String requestId() {
    return requestId;
  }

  /** Whether field {@code logits_processors} is a non-empty array. */
  boolean logitsProcessorsGiven() {
    return logitsProcessors;
  }

  /**
   * How many elements field {@code allowed_token_ids} holds; -1 when it is left out or null (or
   * of another type, which {@link #mistypedField} names).
   */
  int allowedTokenIdsCount() {
    return allowedCount;
  }

  /**
   * The IDs of field {@code allowed_token_ids} below 0 or at or above the model's vocabulary, in
   * the order given (at most {@value #MAX_NAMED_IDS}).
   */
  List<String> allowedTokenIdsOutOfVocab() {
    return allowedOutOfVocab;
  }

  /** Out-of-vocabulary IDs of {@code allowed_token_ids} kept to name: memory stays bounded. */
  static final int MAX_NAMED_IDS = 1_000;

  /**
   * Reads a body.
   *
   * @param vocab token IDs at or above it are out of vocabulary
   * @throws Malformed when the body is not valid JSON or not a JSON object
   */
  static RequestBody read(byte[] body, int vocab) throws Malformed {
    return read(body, vocab, vocab);
  }

  /**
   * Reads a body.
   *
   * @param vocab token IDs of a prompt at or above it are out of vocabulary
   * @param modelVocab the model's vocabulary, which bounds {@code allowed_token_ids}
   * @throws Malformed when the body is not valid JSON or not a JSON object
   */
  static RequestBody read(byte[] body, int vocab, int modelVocab) throws Malformed {
    try (JsonParser p = JSON.getFactory().createParser(body)) {
      JsonToken first = p.nextToken();
      if (first != JsonToken.START_OBJECT) {
        if (first != null) {
          p.skipChildren();
          if (p.nextToken() != null) {
            throw new Malformed("the request body is not valid JSON");
          }
        }
        throw new Malformed("the request body must be a JSON object");
      }
      RequestBody r = new RequestBody(JSON.createObjectNode());
      for (JsonToken t = p.nextToken(); t != JsonToken.END_OBJECT; t = p.nextToken()) {
        String name = p.currentName();
        p.nextToken();
        // as in a tree, a field given twice is its last value
        switch (name) {
          case "prompt" -> {
            r.promptNull = p.currentToken() == JsonToken.VALUE_NULL;
            r.promptString = p.currentToken() == JsonToken.VALUE_STRING;
            r.promptEmptyString = p.currentToken() == JsonToken.VALUE_STRING
                && p.getTextLength() == 0;
            r.prompt = readPrompt(p, vocab);
          }
          case "prompt_embeds" -> {
            // only whether it is given, and of vLLM's type (bytes | list[bytes] | None: base64
            // strings): the replica does not take embeddings
            JsonToken t0 = p.currentToken();
            boolean typed = t0 == JsonToken.VALUE_NULL || t0 == JsonToken.VALUE_STRING;
            if (t0 == JsonToken.START_ARRAY) {
              // the array's elements, each skipped whole, up to its end
              boolean any = false;
              typed = true;
              for (JsonToken e = p.nextToken(); e != JsonToken.END_ARRAY; e = p.nextToken()) {
                any = true;
                typed &= e == JsonToken.VALUE_STRING;
                p.skipChildren();
              }
              r.promptEmbeds = any;
            } else {
              r.promptEmbeds = t0 != JsonToken.VALUE_NULL;
              p.skipChildren();
            }
            // a completion's field only: a chat's request model has none, and ignores it
            r.mistyped.remove(name);
            if (!typed) {
              r.mistyped.put(name, new boolean[] {true, false});
            }
          }
          case "tokens" -> r.tokens = readTokens(p, vocab);
          case "messages" -> {
            r.hasMessages = true;
            r.partRefused = null;
            r.messages = r.readMessages(p);
          }
          default -> {
            Shape forCompletion = TYPED.get(name);
            Shape forChat = CHAT_TYPED.getOrDefault(name, forCompletion);
            if (name.equals("allowed_token_ids") || name.equals("logits_processors")
                || name.equals("structured_outputs")) {
              // typed as the others, and kept: how many, and the IDs out of vocabulary
              int n = name.equals("allowed_token_ids") ? r.readAllowed(p, modelVocab)
                  : name.equals("logits_processors") ? processorsCount(p)
                  : structuredOutputs(p);
              if (name.equals("logits_processors")) {
                r.logitsProcessors = n > 0;
              }
              if (name.equals("structured_outputs")) {
                r.structuredConstraints = n == CONSTRAINTS_AND_WRONG || n > 1;
              }
              r.mistyped.remove(name);
              if (n == WRONG || n == CONSTRAINTS_AND_WRONG) {
                r.mistyped.put(name, new boolean[] {true, true});
              }
            } else if (forChat != null) {
              if (name.equals("request_id")) {
                r.requestId = p.currentToken() == JsonToken.VALUE_STRING ? p.getText() : null;
              }
              boolean[] wrong = checkShapes(p, forCompletion, forChat);
              r.mistyped.remove(name);
              if (wrong[0] || wrong[1]) {
                r.mistyped.put(name, wrong);
              }
            } else if (KEPT.contains(name)) {
              r.fields.set(name, p.<JsonNode>readValueAsTree());
            } else {
              p.skipChildren();
            }
          }
        }
      }
      // content after the object is an error, as vLLM's JSON reader makes it
      if (p.nextToken() != null) {
        throw new Malformed("the request body is not valid JSON");
      }
      return r;
    } catch (IOException e) {
      throw new Malformed("the request body is not valid JSON");
    }
  }

  /**
   * Whether the value under the parser is of another type than {@code completion} (null: a
   * field the completion's model does not have) and than {@code chat}; the parser ends on the
   * value's last token. Scalars are read one at a time, so nothing the size of the value is kept.
   */
  private static boolean[] checkShapes(JsonParser p, @Nullable Shape completion, Shape chat)
      throws IOException {
    if (completion == Shape.XARGS && chat == Shape.CHAT_XARGS) {
      // the one field typed differently: {} of scalars suits both, arrays among them only a chat
      if (p.currentToken() == JsonToken.VALUE_NULL) {
        return new boolean[] {false, false};
      }
      if (p.currentToken() != JsonToken.START_OBJECT) {
        p.skipChildren();
        return new boolean[] {true, true};
      }
      boolean anyArray = false;
      boolean bad = false;
      while (p.nextToken() != JsonToken.END_OBJECT) {
        JsonToken v = p.nextToken();
        if (v == JsonToken.START_ARRAY) {
          anyArray = true;
          while (p.nextToken() != JsonToken.END_ARRAY) {
            bad |= !xargScalar(p);
          }
        } else {
          bad |= !xargScalar(p);
        }
      }
      return new boolean[] {bad || anyArray, bad};
    }
    boolean wrong = !fits(p, chat);
    return new boolean[] {completion != null && wrong, wrong};
  }

  /** Whether the value under the parser is a string or a number (a boolean being one). */
  private static boolean xargScalar(JsonParser p) throws IOException {
    JsonToken t = p.currentToken();
    if (t.isStructStart()) {
      p.skipChildren();
      return false;
    }
    return t == JsonToken.VALUE_STRING || t.isNumeric() || t.isBoolean();
  }

  /** Whether the value under the parser is of {@code shape}; the parser ends on its end. */
  private static boolean fits(JsonParser p, Shape shape) throws IOException {
    JsonToken t = p.currentToken();
    boolean isNull = t == JsonToken.VALUE_NULL;
    switch (shape) {
      case STRING_OR_NULL, STRING -> {
        p.skipChildren();
        return t == JsonToken.VALUE_STRING || isNull && shape == Shape.STRING_OR_NULL;
      }
      case BOOLEAN, BOOLEAN_OR_NULL -> {
        if (isNull) {
          return shape == Shape.BOOLEAN_OR_NULL;
        }
        JsonNode n = scalar(p);
        return n != null && EmulatedServer.laxBool(n) != null;
      }
      case NUMBER -> {
        JsonNode n = scalar(p);
        return !isNull && n != null && EmulatedServer.laxFloat(n) != null;
      }
      case INTEGERS_OR_NULL, STRINGS -> {
        if (isNull) {
          return shape == Shape.INTEGERS_OR_NULL;
        }
        if (t != JsonToken.START_ARRAY) {
          p.skipChildren();
          return false;
        }
        boolean ok = true;
        while (p.nextToken() != JsonToken.END_ARRAY) {
          if (shape == Shape.STRINGS) {
            ok &= p.currentToken() == JsonToken.VALUE_STRING;
            p.skipChildren();
          } else {
            JsonNode n = scalar(p);
            ok &= n != null && EmulatedServer.isInt64(n);
          }
        }
        return ok;
      }
      case OBJECT_OR_NULL -> {
        p.skipChildren();
        return isNull || t == JsonToken.START_OBJECT;
      }
      case STRUCTURED_OUTPUTS -> {
        return structuredOutputs(p) != WRONG;
      }
      case LOGITS_PROCESSORS -> {
        return processorsCount(p) != WRONG;
      }
      default -> throw new IllegalStateException(shape.name()); // EMBEDS: read by its case
    }
  }

  /** What {@link #processorsCount} and {@link #readAllowed} answer for another type. */
  private static final int WRONG = -2;

  /**
   * Field {@code structured_outputs}, the parser on its value: how many of the kinds of
   * constraint {@code json}, {@code regex} and {@code choice} it gives (not null; -1 for a null
   * field), as vLLM's validator counts them before any type is checked, or {@link #WRONG} when it
   * is not vLLM's {@code StructuredOutputsParams}: {@code json} a string or an object,
   * {@code regex}, {@code grammar}, {@code whitespace_pattern} and {@code structural_tag} strings,
   * {@code choice} an array of strings, {@code json_object} and the {@code disable_} fields
   * booleans (those not null), other fields ignored.
   */
  private static int structuredOutputs(JsonParser p) throws IOException {
    JsonToken t = p.currentToken();
    if (t == JsonToken.VALUE_NULL) {
      return -1;
    }
    if (t != JsonToken.START_OBJECT) {
      p.skipChildren();
      return WRONG;
    }
    boolean ok = true;
    // json, regex, choice given not null, by their last value
    boolean[] kinds = new boolean[3];
    while (p.nextToken() != JsonToken.END_OBJECT) {
      String name = p.currentName();
      JsonToken v = p.nextToken();
      boolean nul = v == JsonToken.VALUE_NULL;
      switch (name) {
        case "json" -> {
          kinds[0] = !nul;
          ok &= nul || v == JsonToken.VALUE_STRING || v == JsonToken.START_OBJECT;
          p.skipChildren();
        }
        case "regex" -> {
          kinds[1] = !nul;
          ok &= fits(p, Shape.STRING_OR_NULL);
        }
        case "grammar", "whitespace_pattern", "structural_tag" ->
            ok &= fits(p, Shape.STRING_OR_NULL);
        case "choice" -> {
          kinds[2] = !nul;
          ok &= nul || fits(p, Shape.STRINGS);
        }
        case "json_object" -> ok &= fits(p, Shape.BOOLEAN_OR_NULL);
        case "disable_fallback", "disable_any_whitespace",
            "disable_additional_properties" -> ok &= fits(p, Shape.BOOLEAN);
        default -> p.skipChildren();
      }
    }
    if (!ok) {
      // the count is vLLM's first refusal, whatever the types
      return kinds[0] && kinds[1] || kinds[0] && kinds[2] || kinds[1] && kinds[2]
          ? CONSTRAINTS_AND_WRONG : WRONG;
    }
    return (kinds[0] ? 1 : 0) + (kinds[1] ? 1 : 0) + (kinds[2] ? 1 : 0);
  }

  /** What {@link #structuredOutputs} answers for several constraints of which some mistyped. */
  private static final int CONSTRAINTS_AND_WRONG = -3;

  /**
   * Field {@code logits_processors}, the parser on its value: how many processors it names (-1
   * for null), or {@link #WRONG} when it is not an array of names or of objects with a string
   * {@code qualname}, an {@code args} array and a {@code kwargs} object (each optional but the
   * name).
   */
  private static int processorsCount(JsonParser p) throws IOException {
    JsonToken t = p.currentToken();
    if (t == JsonToken.VALUE_NULL) {
      return -1;
    }
    if (t != JsonToken.START_ARRAY) {
      p.skipChildren();
      return WRONG;
    }
    boolean ok = true;
    int n = 0;
    while (p.nextToken() != JsonToken.END_ARRAY) {
      n++;
      JsonToken e = p.currentToken();
      if (e == JsonToken.VALUE_STRING) {
        continue;
      }
      if (e != JsonToken.START_OBJECT) {
        p.skipChildren();
        ok = false;
        continue;
      }
      boolean named = false;
      while (p.nextToken() != JsonToken.END_OBJECT) {
        String name = p.currentName();
        JsonToken v = p.nextToken();
        switch (name) {
          case "qualname" -> {
            named = v == JsonToken.VALUE_STRING;
            p.skipChildren();
          }
          case "args" -> {
            ok &= v == JsonToken.VALUE_NULL || v == JsonToken.START_ARRAY;
            p.skipChildren();
          }
          case "kwargs" -> ok &= fits(p, Shape.OBJECT_OR_NULL);
          default -> p.skipChildren();
        }
      }
      ok &= named;
    }
    return ok ? n : WRONG;
  }

  /**
   * Field {@code allowed_token_ids}, the parser on its value: how many IDs it holds (-1 for
   * null), or {@link #WRONG} when it is not an array of integers; the IDs outside
   * {@code [0, modelVocab)} are kept to be named, the first {@link #MAX_NAMED_IDS} of them.
   */
  private int readAllowed(JsonParser p, int modelVocab) throws IOException {
    allowedCount = -1;
    allowedOutOfVocab = List.of();
    JsonToken t = p.currentToken();
    if (t == JsonToken.VALUE_NULL) {
      return -1;
    }
    if (t != JsonToken.START_ARRAY) {
      p.skipChildren();
      return WRONG;
    }
    boolean ok = true;
    int n = 0;
    List<String> outside = new ArrayList<>();
    while (p.nextToken() != JsonToken.END_ARRAY) {
      n++;
      JsonNode v = scalar(p);
      if (v == null || !EmulatedServer.isInt64(v)) {
        ok = false;
        continue;
      }
      long id = EmulatedServer.int64(v);
      if ((id < 0 || id >= modelVocab) && outside.size() < MAX_NAMED_IDS) {
        outside.add(Long.toString(id));
      }
    }
    if (!ok) {
      return WRONG;
    }
    allowedCount = n;
    allowedOutOfVocab = outside;
    return n;
  }

  /** The scalar under the parser as a node; null, the value skipped, for an array or object. */
  private static @Nullable JsonNode scalar(JsonParser p) throws IOException {
    if (p.currentToken().isStructStart()) {
      p.skipChildren();
      return null;
    }
    return p.readValueAsTree();
  }

  /** Field {@code prompt}, the parser on its value. */
  private static Prompt readPrompt(JsonParser p, int vocab) throws IOException {
    JsonToken t = p.currentToken();
    if (t == JsonToken.VALUE_STRING) {
      return new Text(p.getText());
    }
    if (t != JsonToken.START_ARRAY) {
      p.skipChildren();
      return new Bad("field 'prompt' must be a string or a non-empty array of token IDs");
    }
    JsonToken first = p.nextToken();
    if (first == JsonToken.END_ARRAY) {
      // a valid list of token IDs to vLLM's request model: its engine refuses it as empty
      return new Ids(new int[0]);
    }
    if (first == JsonToken.VALUE_STRING || first == JsonToken.START_ARRAY) {
      // a batch: of one prompt (served as that prompt), or of several
      Prompt one;
      if (first == JsonToken.VALUE_STRING) {
        one = new Text(p.getText());
      } else {
        p.nextToken();
        one = p.currentToken() == JsonToken.END_ARRAY
            ? new Ids(new int[0]) // a batch of one empty prompt, refused as the prompt is
            : readIds(p, vocab, "prompt");
      }
      int size = 1;
      while (p.nextToken() != JsonToken.END_ARRAY) {
        p.skipChildren();
        size++;
      }
      if (size > 1) {
        // vLLM answers a batch with one choice per prompt; like n > 1, not modelled
        return new Bad("field 'prompt' is a batch of " + size + " prompts: the emulated replica"
            + " serves one prompt per request");
      }
      return one;
    }
    return readIds(p, vocab, "prompt");
  }

  /**
   * Field {@code tokens} of a {@code /detokenize} body, the parser on its value: token IDs (an
   * empty array too, as vLLM takes it), or what is wrong.
   */
  private static Prompt readTokens(JsonParser p, int vocab) throws IOException {
    if (p.currentToken() != JsonToken.START_ARRAY) {
      p.skipChildren();
      return new Bad("field 'tokens' must be an array of token IDs");
    }
    if (p.nextToken() == JsonToken.END_ARRAY) {
      return new Ids(new int[0]);
    }
    return readIds(p, vocab, "tokens");
  }

  /**
   * Token IDs, the parser on the first element of their array; it ends on the array's end. The
   * first element that is not a valid ID decides the answer, as when they are checked in order.
   */
  private static Prompt readIds(JsonParser p, int vocab, String field) throws IOException {
    // filled in chunks, then copied once: no array twice the final size while it grows
    List<int[]> full = new ArrayList<>();
    int[] chunk = new int[CHUNK];
    int inChunk = 0;
    @Nullable String bad = null;
    for (JsonToken t = p.currentToken(); t != JsonToken.END_ARRAY; t = p.nextToken()) {
      if (bad != null) {
        p.skipChildren();
        continue;
      }
      if (t != JsonToken.VALUE_NUMBER_INT || p.getNumberType() != JsonParser.NumberType.INT
          || p.getIntValue() < 0) {
        p.skipChildren();
        bad = field.equals("prompt")
            ? "field 'prompt' must be a string or an array of token IDs (non-negative integers)"
            : "field '" + field + "' must be an array of token IDs (non-negative integers)";
        continue;
      }
      int id = p.getIntValue();
      if (id >= vocab) {
        // vLLM refuses an ID beyond its vocabulary before the engine sees it ("Token id N is
        // out of vocabulary"); the ID is not quoted, as no part of a prompt is
        bad = "field '" + field + "' holds a token ID out of vocabulary (token IDs are 0 to "
            + (vocab - 1) + ")";
        continue;
      }
      if (inChunk == CHUNK) {
        full.add(chunk);
        chunk = new int[CHUNK];
        inChunk = 0;
      }
      chunk[inChunk++] = id;
    }
    if (bad != null) {
      return new Bad(bad);
    }
    int[] ids = new int[full.size() * CHUNK + inChunk];
    int at = 0;
    for (int[] c : full) {
      System.arraycopy(c, 0, ids, at, CHUNK);
      at += CHUNK;
    }
    System.arraycopy(chunk, 0, ids, at, inChunk);
    return new Ids(ids);
  }

  /** Field {@code messages}, the parser on its value: a list of messages or what is wrong. */
  private Object readMessages(JsonParser p) throws IOException {
    if (p.currentToken() != JsonToken.START_ARRAY) {
      p.skipChildren();
      return "field 'messages' must be a non-empty array";
    }
    List<ChatMessage> list = new ArrayList<>();
    @Nullable String bad = null;
    int index = -1;
    for (JsonToken t = p.nextToken(); t != JsonToken.END_ARRAY; t = p.nextToken()) {
      index++;
      if (bad != null) {
        p.skipChildren();
        continue;
      }
      @Nullable String role = null;
      // the text of field content; null while it is not a string, an array or null
      @Nullable String content = "";
      // whether content is given and not null: vLLM renders a message without one apart from ""
      boolean contentGiven = false;
      List<ChatMessage.Part> parts = new ArrayList<>();
      // the fields of FIELDS the message gives with a non-null value, as compact JSON
      @Nullable String[] extra = new String[FIELDS.size()];
      if (t == JsonToken.START_OBJECT) {
        for (JsonToken f = p.nextToken(); f != JsonToken.END_OBJECT; f = p.nextToken()) {
          String name = p.currentName();
          JsonToken v = p.nextToken();
          if (name.equals("role")) {
            role = v == JsonToken.VALUE_STRING ? p.getText() : null;
            p.skipChildren();
          } else if (name.equals("content")) {
            parts = new ArrayList<>();
            contentGiven = v != JsonToken.VALUE_NULL;
            content = readContent(p, parts, index);
          } else if (FIELDS.contains(name)) {
            // vLLM hands these to the template as fields of the message, which renders them
            // itself (Qwen3's <tool_call> blocks); null is as if absent, the last one counts
            extra[FIELDS.indexOf(name)] = v == JsonToken.VALUE_NULL ? null
                : JSON.writeValueAsString(JSON.readTree(p));
          } else {
            p.skipChildren();
          }
        }
      } else {
        p.skipChildren();
      }
      if (role == null) {
        bad = "field 'messages[].role' must be a string";
      } else if (content == null) {
        bad = "field 'messages[].content' must be a string or an array of parts";
      } else if (!contentGiven) {
        list.add(ChatMessage.withoutContent(role, fields(extra)));
      } else {
        list.add(new ChatMessage(role, content, parts, fields(extra)));
      }
    }
    if (bad != null) {
      return bad;
    }
    return list.isEmpty() ? "field 'messages' must be a non-empty array" : list;
  }

  /**
   * Media fields vLLM reads from a part without a type, as a plain URL or null (and
   * {@code input_audio}, not null, read apart).
   */
  private static final Set<String> MEDIA_FIELDS = Set.of("image_url", "audio_url", "video_url");

  /**
   * The content part types vLLM's chat parser takes (its {@code MM_PARSER_MAP}, with
   * {@code text} and {@code refusal}); a part of any other type is refused once the model is
   * found, whatever fields it carries.
   */
  static final Set<String> PART_TYPES = Set.of("audio_embeds", "audio_url", "image_embeds",
      "image_pil", "image_url", "input_audio", "input_image", "input_text", "output_text",
      "prompt_embeds", "refusal", "text", "thinking", "tool_reference", "video_url");

  /** {@link #PART_TYPES} in name order, as a refusal lists them. */
  private static final String PART_TYPE_LIST = String.join(", ",
      new java.util.TreeSet<>(PART_TYPES));

  /**
   * The fields besides role and content that vLLM hands a chat template, in the order the router
   * keeps them in {@link ChatMessage#fields()}.
   */
  private static final List<String> FIELDS =
      List.of("name", "tool_calls", "tool_call_id", "reasoning", "reasoning_content");

  /** {@code {"name":...,...}} of the given values, or empty when there is none. */
  private static String fields(@Nullable String[] values) throws IOException {
    StringBuilder sb = null;
    for (int i = 0; i < values.length; i++) {
      if (values[i] != null) {
        sb = sb == null ? new StringBuilder("{") : sb.append(',');
        sb.append(JSON.writeValueAsString(FIELDS.get(i))).append(':').append(values[i]);
      }
    }
    return sb == null ? "" : sb.append('}').toString();
  }

  /**
   * A message's content: a string, or an array of parts whose text parts vLLM hands a template
   * that takes string content joined with newlines, an empty one left out as vLLM leaves it out
   * (a plain string part is a text part, as in vLLM); "" for null (the caller marks the message as without content); null for anything
   * else, and for an array holding a part that is neither an object nor a string. The first part
   * vLLM's chat parser refuses is kept in {@link #partRefused()}.
   */
  private @Nullable String readContent(JsonParser p, List<ChatMessage.Part> parts, int message)
      throws IOException {
    JsonToken v = p.currentToken();
    if (v == JsonToken.VALUE_STRING) {
      return p.getText();
    }
    if (v == JsonToken.VALUE_NULL) {
      return "";
    }
    if (v != JsonToken.START_ARRAY) {
      p.skipChildren();
      return null;
    }
    StringBuilder text = new StringBuilder();
    boolean first = true;
    boolean refused = false;
    int index = -1;
    for (JsonToken part = p.nextToken(); part != JsonToken.END_ARRAY; part = p.nextToken()) {
      index++;
      if (refused) {
        p.skipChildren();
        continue;
      }
      @Nullable String partText = null;
      @Nullable String type = null;
      // the modality of a plain media field (image_url, audio_url or video_url, a string or
      // null), which vLLM reads from a part without a type
      @Nullable String plainMedia = null;
      // the string fields a refusal part and a thinking part hold their text in
      @Nullable String refusalText = null;
      @Nullable String thinkingText = null;
      if (part == JsonToken.VALUE_STRING) {
        // a plain string part: vLLM's request model takes one (its part type includes str) and
        // reads it as a text part
        partText = p.getText();
      } else if (part != JsonToken.START_OBJECT) {
        // a number, a boolean, null or an array: no part type of vLLM's request model takes it,
        // and vLLM refuses the request; read to the array's end, so the body is still checked
        // as JSON whole
        p.skipChildren();
        refused = true;
        continue;
      }
      for (JsonToken f = part == JsonToken.START_OBJECT ? p.nextToken() : JsonToken.END_OBJECT;
          f != JsonToken.END_OBJECT; f = p.nextToken()) {
        String name = p.currentName();
        JsonToken pv = p.nextToken();
        if (name.equals("text")) {
          partText = pv == JsonToken.VALUE_STRING ? p.getText() : null;
        } else if (name.equals("type")) {
          type = pv == JsonToken.VALUE_STRING ? p.getText() : null;
        } else if (name.equals("refusal")) {
          refusalText = pv == JsonToken.VALUE_STRING ? p.getText() : null;
        } else if (name.equals("thinking")) {
          thinkingText = pv == JsonToken.VALUE_STRING ? p.getText() : null;
        } else if (plainMedia == null && MEDIA_FIELDS.contains(name)
            && (pv == JsonToken.VALUE_STRING || pv == JsonToken.VALUE_NULL)) {
          plainMedia = name.substring(0, name.indexOf('_'));
        } else if (plainMedia == null && name.equals("input_audio")
            && pv != JsonToken.VALUE_NULL) {
          // vLLM's parser also reads a part without a type as audio when it has an input_audio
          // that is not null (its data and format)
          plainMedia = "audio";
        }
        p.skipChildren();
      }
      if (part == JsonToken.START_OBJECT) {
        // a type vLLM's chat parser does not know is refused, whatever else the part holds (a
        // text or a media field): vLLM names the supported types
        if (type != null && !PART_TYPES.contains(type)) {
          if (partRefused == null) {
            partRefused = "field 'messages[" + message + "].content[" + index + "].type' must be"
                + " one of the content part types " + PART_TYPE_LIST;
          }
          continue;
        }
        if ("refusal".equals(type) || "thinking".equals(type)) {
          // vLLM's parser reads these parts' text from the field named after their type (not
          // from text) and hands it on as a text part; one without it is left out, as vLLM
          // skips a part whose content it cannot read
          partText = "refusal".equals(type) ? refusalText : thinkingText;
          if (partText == null) {
            continue;
          }
        }
        // vLLM's request model keeps the fields of the part type they fit: a text part needs a
        // string text; a part that fits no type is kept as one of its media parts whose fields
        // are all optional, without its type, and vLLM's chat parser then refuses it for the
        // missing type (a plain media field read as such is the exception)
        boolean textPart = "text".equals(type) && partText != null;
        if (!textPart && plainMedia != null) {
          parts.add(new ChatMessage.Part(plainMedia, ""));
          continue;
        }
        @Nullable String why = "text".equals(type) && !textPart
            ? ".text' must be a string"
            : type == null ? ".type' is required" : null;
        if (why != null) {
          if (partRefused == null) {
            partRefused = "field 'messages[" + message + "].content[" + index + "]" + why;
          }
          continue;
        }
      }
      // each part as vLLM hands it to a template that iterates over content
      if (partText != null) {
        parts.add(ChatMessage.Part.text(partText));
      } else if (type != null && !type.equals("text")) {
        parts.add(new ChatMessage.Part(type.startsWith("image") || type.equals("input_image")
            ? "image" : type.contains("audio") ? "audio" : type.startsWith("video") ? "video"
            : type, ""));
      }
      // joined for a template that takes string content: vLLM's parser keeps only the parts
      // whose parsed content is truthy, so an empty text (of a text, refusal or thinking part,
      // or a plain string part) adds no separator there, where a template that iterates over
      // content still gets it as an empty text part
      if (partText != null && !partText.isEmpty()) {
        if (!first) {
          text.append('\n');
        }
        text.append(partText);
        first = false;
      }
    }
    return refused ? null : text.toString();
  }
}
