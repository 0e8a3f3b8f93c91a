package io.epp4j.kvevents;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.hubspot.jinjava.Jinjava;
import com.hubspot.jinjava.JinjavaConfig;
import com.hubspot.jinjava.LegacyOverrides;
import com.hubspot.jinjava.el.JinjavaInterpreterResolver;
import com.hubspot.jinjava.interpret.JinjavaInterpreter;
import com.hubspot.jinjava.interpret.TemplateError;
import com.hubspot.jinjava.interpret.errorcategory.BasicTemplateErrorCategory;
import com.hubspot.jinjava.lib.filter.Filter;
import com.hubspot.jinjava.lib.fn.ELFunctionDefinition;
import com.hubspot.jinjava.tree.Node;
import io.epp4j.api.ChatMessage;
import io.epp4j.api.ChatTemplateArgs;
import java.lang.reflect.Method;
import java.time.ZonedDateTime;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import jinjava.javax.el.CompositeELResolver;
import org.jspecify.annotations.Nullable;

/**
 * A Hugging Face chat template (the Jinja source of {@code chat_template}) rendered in process
 * with jinjava, set up as {@code transformers}' {@code apply_chat_template} sets up Python's
 * jinja2: {@code trim_blocks} and {@code lstrip_blocks}, loop controls, its {@code tojson}
 * (Python's {@code json.dumps} layout, non-ASCII kept), {@code raise_exception},
 * {@code strftime_now}, the special tokens as globals, and the Python string methods the
 * templates call ({@link PythonMethods}). The template is parsed once; every render gets a fresh
 * interpreter, so one instance serves any number of threads.
 *
 * <p>Package-private: {@link HuggingFaceTokenizer} is the public face, and jinjava is an optional
 * dependency that only this class and {@link PythonMethods} touch.
 */
final class JinjaChatTemplate {
  private static final ObjectMapper JSON = new ObjectMapper();
  /** How deep a macro may call itself: about where Python's recursion limit stops jinja2. */
  static final int MAX_MACRO_DEPTH = 150;

  private final Jinjava jinjava;
  private final Node root;
  private final Map<String, Object> globals;
  private final String origin;
  /** The template's text: what a refusal quotes from it is the authors' words. */
  private final String source;
  /**
   * Whether the template iterates over a message's content, so that vLLM hands it each
   * message's content as a list of parts ("openai" format) instead of one string.
   */
  private final boolean contentAsParts;

  private JinjaChatTemplate(Jinjava jinjava, Node root, Map<String, Object> globals,
      String origin, String source) {
    this.source = source;
    this.contentAsParts = iteratesOverContent(source);
    this.jinjava = jinjava;
    this.root = root;
    this.globals = globals;
    this.origin = origin;
  }

  /**
   * Parses a template and renders a probe conversation with it (system, user, assistant, user,
   * with and without tools), so that a template this engine cannot render fails here, at load
   * time, rather than on every request.
   *
   * @param source        the Jinja source
   * @param specialTokens {@code bos_token}, {@code eos_token}, ... as the template sees them
   * @param origin        where the template came from, for error messages
   * @throws IllegalArgumentException naming {@code origin} when the template does not render
   */
  static JinjaChatTemplate compile(String source, Map<String, String> specialTokens,
      String origin) {
    CompositeELResolver resolver = new CompositeELResolver();
    resolver.add(new PythonMethods());
    resolver.add(JinjavaInterpreterResolver.DEFAULT_RESOLVER_READ_WRITE);
    JinjavaConfig config = JinjavaConfig.newBuilder()
        .withTrimBlocks(true)
        .withLstripBlocks(true)
        .withElResolver(resolver)
        .withFailOnUnknownTokens(false)
        // jinja2 prints a value as it is; jinjava would render a value that contains {{ }} or
        // {% %} as a template, so a chat's text could run template code and change its tokens
        .withNestedInterpretationEnabled(false)
        // jinja2 lets a macro call itself (tool templates recurse into nested JSON schemas);
        // jinjava's default renders such a call as nothing, without an error. Python stops
        // recursion at 150 to 200 levels; past this depth the render fails
        .withEnableRecursiveMacroCalls(true)
        .withMaxMacroRecursionDepth(MAX_MACRO_DEPTH)
        .withMaxOutputSize(64L << 20)
        .withLegacyOverrides(LegacyOverrides.newBuilder()
            .withUseNaturalOperatorPrecedence(true)
            .withParseWhitespaceControlStrictly(true)
            .withUseTrimmingForNotesAndExpressions(true)
            .withKeepNullableLoopValues(true)
            .build())
        .build();
    Jinjava jinjava = new Jinjava(config);
    jinjava.getGlobalContext().registerFilter(new ToJson());
    jinjava.getGlobalContext().registerFilter(
        new TextFilter("title", PythonMethods::jinjaTitle));
    jinjava.getGlobalContext().registerFilter(
        new TextFilter("capitalize", PythonMethods::capitalize));
    try {
      // this class is not public: jinjava may call its functions only once they are accessible
      Method raise = JinjaChatTemplate.class.getDeclaredMethod("raiseException", Object.class);
      raise.setAccessible(true);
      Method now = JinjaChatTemplate.class.getDeclaredMethod("strftimeNow", String.class);
      now.setAccessible(true);
      Method range = JinjaChatTemplate.class.getDeclaredMethod("range", Object.class,
          Object[].class);
      range.setAccessible(true);
      // replaces jinjava's range, which stops at 1,000 numbers without a word
      jinjava.getGlobalContext().registerFunction(new ELFunctionDefinition("", "range", range));
      jinjava.getGlobalContext().registerFunction(
          new ELFunctionDefinition("", "raise_exception", raise));
      jinjava.getGlobalContext().registerFunction(new ELFunctionDefinition("", "strftime_now", now));
    } catch (NoSuchMethodException e) {
      throw new IllegalStateException(e);
    }
    JinjavaInterpreter parser = jinjava.newInterpreter();
    Node root;
    JinjavaInterpreter.pushCurrent(parser);
    try {
      root = parser.parse(pythonCompatible(source));
    } finally {
      JinjavaInterpreter.popCurrent();
    }
    for (TemplateError e : parser.getErrors()) {
      if (e.getSeverity() == TemplateError.ErrorType.FATAL) {
        throw new IllegalArgumentException("the chat template of " + origin
            + " does not parse: " + e.getMessage() + " (line " + e.getLineno() + ")");
      }
    }
    Map<String, Object> globals = new HashMap<>(specialTokens);
    JinjaChatTemplate t = new JinjaChatTemplate(jinjava, root, Map.copyOf(globals), origin,
        source);
    t.probe();
    return t;
  }

  /**
   * Renders probe conversations, accepting a template's own refusals ({@code raise_exception},
   * e.g. "System role not supported") but not engine failures; a template that refuses every
   * probe cannot serve any chat either.
   */
  private void probe() {
    String tools = "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":\"d\","
        + "\"parameters\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"string\"}}}}}]";
    List<ChatMessage> withSystem = List.of(ChatMessage.system("s"), ChatMessage.user("u1"),
        ChatMessage.assistant("a1"), ChatMessage.user("u2"));
    List<ChatMessage> plain = withSystem.subList(1, withSystem.size());
    String refusal = null;
    int rendered = 0;
    for (Object[] probe : new Object[][] {{withSystem, null}, {plain, null}, {plain, tools}}) {
      @SuppressWarnings("unchecked")
      List<ChatMessage> chat = (List<ChatMessage>) probe[0];
      Outcome o;
      try {
        o = attempt(chat, (String) probe[1], ChatTemplateArgs.DEFAULTS, true);
      } catch (Tokenizer.TokenizationException e) {
        throw new IllegalArgumentException("the chat template of " + origin
            + " cannot render a plain conversation: " + e.getMessage(), e);
      }
      if (o.refusal() == null) {
        rendered++;
      } else {
        refusal = o.refusal();
      }
    }
    if (rendered == 0) {
      throw new IllegalArgumentException("the chat template of " + origin
          + " refuses every probe conversation: " + refusal);
    }
  }

  /** A rendering, or the template's refusal of the chat. */
  private record Outcome(String text, @Nullable String refusal) {}

  /**
   * The chat as the model sees it.
   *
   * @param toolsJson the request's {@code tools} array as JSON, or {@code null}
   * @throws Tokenizer.TokenizationException when the template fails or calls
   *     {@code raise_exception} (the message then is the template's)
   */
  String render(List<ChatMessage> messages, @Nullable String toolsJson,
      boolean addGenerationPrompt) {
    return render(messages, toolsJson,
        new ChatTemplateArgs(addGenerationPrompt, false, null));
  }

  /**
   * The chat as the model sees it, rendered as {@code transformers}' {@code apply_chat_template}
   * renders it for vLLM with the request's {@code add_generation_prompt},
   * {@code chat_template_kwargs} (variables of the template, over the special tokens; the
   * request's {@code documents} among them, as the parser merges them) and
   * {@code continue_final_message} (the rendering cut just after the last message's text).
   *
   * @throws Tokenizer.TokenizationException as {@link #render(List, String, boolean)}, for a
   *     request with its own {@code chat_template}, and where transformers refuses the
   *     arguments: {@code continue_final_message} with
   *     {@code add_generation_prompt}, a last message whose text the rendering does not hold,
   *     kwargs that are not a JSON object or that set {@code messages} (kwargs that set
   *     {@code tools} replace the request's, as in vLLM)
   */
  String render(List<ChatMessage> messages, @Nullable String toolsJson, ChatTemplateArgs args) {
    if (args.requestTemplate() != null) {
      throw new Tokenizer.TokenizationException(REQUEST_TEMPLATE);
    }
    if (args.continueFinalMessage() && args.addGenerationPrompt()) {
      // transformers refuses the pair (vLLM's default add_generation_prompt is true, so a
      // request must turn it off to continue its last message)
      throw new Tokenizer.TokenizationException("continue_final_message needs"
          + " add_generation_prompt false: the template cannot both continue the last message"
          + " and open a new one");
    }
    String out = render(messages, toolsJson, args, false);
    return args.continueFinalMessage()
        ? ChatTemplate.cutAfterFinalMessage(out, messages, contentAsParts) : out;
  }

  /**
   * Why a request with its own {@code chat_template} is not rendered: vLLM refuses it unless
   * started with {@code --trust-request-chat-template}, and then renders that template, not the
   * model's; rendering the model's would give tokens no engine holds.
   */
  static final String REQUEST_TEMPLATE = "the request brings its own chat_template, which the"
      + " engine renders in place of the model's (with --trust-request-chat-template) or"
      + " refuses; it is not rendered here, and the request is scored as uncached";

  /** {@code detailed}: the engine's message, which may quote the chat, only for the probe. */
  private String render(List<ChatMessage> messages, @Nullable String toolsJson,
      ChatTemplateArgs args, boolean detailed) {
    Outcome o = attempt(messages, toolsJson, args, detailed);
    String refusal = o.refusal();
    if (refusal != null) {
      // the template's own words, written by the model's authors, but some templates add the
      // offending value ('Unexpected role: ' + message['role']): that part is withheld
      throw new Tokenizer.TokenizationException("the chat template of " + origin
          + " refused the chat: " + withoutChatText(refusal, messages));
    }
    return o.text();
  }

  /**
   * A refusal with every role and content of the chat that it quotes, and that the template's
   * own text does not hold, replaced by the name of its field ({@code <messages[2].role>}): a
   * role is client text like the content, of any length, and may hold a prompt. So are the
   * strings of a message's other fields (a tool call's name and arguments, its reasoning), the
   * arguments' own strings included, replaced by {@code <messages[2].fields>}. Longer values
   * first, so that one inside another is not replaced in part.
   */
  String withoutChatText(String refusal, List<ChatMessage> messages) {
    List<String[]> quoted = new ArrayList<>();
    for (int i = 0; i < messages.size(); i++) {
      ChatMessage m = messages.get(i);
      List<String[]> values = new ArrayList<>();
      values.add(new String[] {m.role(), "role"});
      values.add(new String[] {m.content(), "content"});
      if (m.hasFields()) {
        List<String> strings = new ArrayList<>();
        try {
          strings(JSON.readTree(m.fields()), strings, true);
        } catch (JsonProcessingException e) {
          // not produced by the reader; nothing of it was rendered either
        }
        for (String v : strings) {
          values.add(new String[] {v, "fields"});
        }
      }
      for (String[] v : values) {
        if (!v[0].isEmpty() && refusal.contains(v[0]) && !source.contains(v[0])) {
          quoted.add(new String[] {v[0], "<messages[" + i + "]." + v[1] + ">"});
        }
      }
    }
    if (quoted.isEmpty()) {
      return refusal;
    }
    quoted.sort((a, b) -> Integer.compare(b[0].length(), a[0].length()));
    // which value covers each char of the refusal, claimed longest first
    String[] cover = new String[refusal.length()];
    boolean[] starts = new boolean[refusal.length()];
    for (String[] q : quoted) {
      for (int at = refusal.indexOf(q[0]); at >= 0; at = refusal.indexOf(q[0], at + 1)) {
        boolean free = true;
        for (int k = at; k < at + q[0].length() && free; k++) {
          free = cover[k] == null;
        }
        if (free) {
          java.util.Arrays.fill(cover, at, at + q[0].length(), q[1]);
          starts[at] = true;
        }
      }
    }
    StringBuilder out = new StringBuilder(refusal.length());
    for (int k = 0; k < refusal.length(); k++) {
      if (cover[k] == null) {
        out.append(refusal.charAt(k));
      } else if (starts[k]) {
        out.append(cover[k]);
      }
    }
    return out.toString();
  }

  /**
   * The strings of a JSON value and, with {@code parse}, of the JSON its strings hold (a tool
   * call's arguments are rendered parsed).
   */
  private static void strings(com.fasterxml.jackson.databind.JsonNode node, List<String> out,
      boolean parse) {
    if (node.isTextual()) {
      out.add(node.textValue());
      if (parse) {
        try {
          strings(JSON.readTree(node.textValue()), out, false);
        } catch (JsonProcessingException e) {
          // plain text: kept as it is
        }
      }
    } else {
      // keys and numbers are left: short, they would blot out the template's own words
      for (com.fasterxml.jackson.databind.JsonNode child : node) {
        strings(child, out, parse);
      }
    }
  }

  /**
   * A message's content as vLLM gives it to a template that iterates over content: a list of
   * {@code {"type": "text", "text": ...}} and {@code {"type": "image"}} (audio, video) maps, a
   * string content as one text part, a {@code null} or absent one as no part at all; but a tool
   * message whose parts are all text gets them joined with newlines (none: {@code ""}), as vLLM
   * hands tool results to templates as strings.
   */
  private static Object partsOf(ChatMessage m) {
    List<ChatMessage.Part> parts = m.parts();
    if (parts.isEmpty()) {
      return m.role().equals("tool") ? m.content()
          : m.contentAbsent() ? new ArrayList<>(0)
          : List.of(Map.of("type", "text", "text", m.content()));
    }
    boolean allText = true;
    for (ChatMessage.Part p : parts) {
      allText &= p.isText();
    }
    if (allText && m.role().equals("tool")) {
      StringBuilder sb = new StringBuilder();
      for (int i = 0; i < parts.size(); i++) {
        sb.append(i == 0 ? "" : "\n").append(parts.get(i).text());
      }
      return sb.toString();
    }
    List<Map<String, Object>> out = new ArrayList<>(parts.size());
    for (ChatMessage.Part p : parts) {
      Map<String, Object> part = new LinkedHashMap<>(4);
      part.put("type", p.type());
      if (p.isText()) {
        part.put("text", p.text());
      }
      out.add(part);
    }
    return out;
  }

  /**
   * The request's tools as vLLM hands them to the template: each one read into its request
   * model and dumped back ({@code tool.model_dump()}), so a tool object's keys come in the
   * model's order, {@code type} then {@code function}, and a function's {@code name},
   * {@code description} and {@code parameters} (the latter two {@code null} when absent), each
   * followed by the object's other keys in the order given; the parameter schema keeps the
   * order given. Templates print a tool with {@code tojson}, so this order is the prompt's.
   * A tool that is not such an object is left as given (the engine refuses the request).
   */
  static List<Object> toolsAsTheEngineHandsThem(List<?> tools) {
    List<Object> out = new ArrayList<>(tools.size());
    for (Object tool : tools) {
      if (tool instanceof Map<?, ?> t && t.get("function") instanceof Map<?, ?> f
          && f.get("name") instanceof String) {
        Map<Object, Object> function = inModelOrder(f, "name", "description", "parameters");
        Map<Object, Object> dumped = new LinkedHashMap<>();
        dumped.put("type", t.containsKey("type") ? t.get("type") : "function");
        dumped.put("function", function);
        for (Map.Entry<?, ?> e : t.entrySet()) {
          if (!dumped.containsKey(e.getKey())) {
            dumped.put(e.getKey(), e.getValue());
          }
        }
        out.add(dumped);
      } else {
        out.add(tool);
      }
    }
    return out;
  }

  /** The declared fields first, in order ({@code null} when absent), then the others as given. */
  private static Map<Object, Object> inModelOrder(Map<?, ?> given, String... fields) {
    Map<Object, Object> out = new LinkedHashMap<>();
    for (String f : fields) {
      out.put(f, given.get(f));
    }
    for (Map.Entry<?, ?> e : given.entrySet()) {
      if (!out.containsKey(e.getKey())) {
        out.put(e.getKey(), e.getValue());
      }
    }
    return out;
  }

  /** Reads a tool call's arguments as Python's {@code json.loads}: one value, nothing after. */
  private static final com.fasterxml.jackson.databind.ObjectReader ARGUMENTS = JSON
      .readerFor(Object.class)
      .with(com.fasterxml.jackson.databind.DeserializationFeature.FAIL_ON_TRAILING_TOKENS);

  /**
   * A message's fields besides role and content as vLLM hands them to the template: an
   * assistant's {@code tool_calls} (dropped when empty), each call's {@code function.arguments}
   * a JSON object ({@code {}} for an absent, empty or malformed JSON string, or JSON that is not
   * an object), and its {@code reasoning} (else its {@code reasoning_content}, which vLLM's
   * request model renames to {@code reasoning}) as both {@code reasoning} and
   * {@code reasoning_content}; a tool message's {@code tool_call_id}; any message's string
   * {@code name}. vLLM reads no tool calls or reasoning of other roles.
   *
   * @throws Tokenizer.TokenizationException where vLLM refuses the chat: tool calls that are not
   *     a list of objects of type {@code function} with a {@code function} object
   */
  private static void putFields(ChatMessage m, Map<String, Object> msg) {
    Map<?, ?> fields;
    try {
      fields = JSON.readValue(m.fields(), Map.class);
    } catch (JsonProcessingException e) {
      throw new Tokenizer.TokenizationException("a message's fields are not a JSON object");
    }
    if (m.role().equals("assistant")) {
      Object calls = fields.get("tool_calls");
      if (calls != null) {
        if (!(calls instanceof List<?> list)) {
          throw new Tokenizer.TokenizationException("an assistant message's tool_calls must be"
              + " an array");
        }
        if (!list.isEmpty()) {
          msg.put("tool_calls", toolCalls(list));
        }
      }
      Object reasoning = fields.get("reasoning");
      if (reasoning == null) {
        // vLLM's request model renames the deprecated reasoning_content to reasoning when the
        // message has no reasoning (DeepSeek-style clients send it back so)
        reasoning = fields.get("reasoning_content");
      }
      if (reasoning != null) {
        msg.put("reasoning", reasoning);
        msg.put("reasoning_content", reasoning);
      }
    } else if (m.role().equals("tool") && fields.containsKey("tool_call_id")) {
      msg.put("tool_call_id", fields.get("tool_call_id"));
    }
    if (fields.get("name") instanceof String name) {
      msg.put("name", name);
    }
  }

  /** The tool calls with each one's arguments made an object, as vLLM does before rendering. */
  private static List<Object> toolCalls(List<?> calls) {
    List<Object> out = new ArrayList<>(calls.size());
    for (Object call : calls) {
      if (!(call instanceof Map<?, ?> c)) {
        throw new Tokenizer.TokenizationException("an assistant message's tool_calls entries"
            + " must be objects");
      }
      Object type = c.containsKey("type") ? c.get("type") : "function";
      if (!"function".equals(type) || !(c.get("function") instanceof Map<?, ?> function)) {
        throw new Tokenizer.TokenizationException("only tool calls of type 'function' can be"
            + " rendered");
      }
      @SuppressWarnings("unchecked")
      Map<Object, Object> f = (Map<Object, Object>) function;
      f.put("arguments", argumentsObject(f.get("arguments")));
      out.add(call);
    }
    return out;
  }

  /** {@code arguments} as vLLM makes them: an object, else {@code {}}. */
  private static Object argumentsObject(@Nullable Object arguments) {
    Object parsed = arguments;
    if (arguments instanceof String text && !text.isEmpty()) {
      try {
        parsed = ARGUMENTS.readValue(text);
      } catch (java.io.IOException e) {
        parsed = null;
      }
    }
    return parsed instanceof Map<?, ?> ? parsed : new LinkedHashMap<>();
  }

  private static final Pattern STATEMENT = Pattern.compile("\\{%[-+]?\\s*(.*?)\\s*[-+]?%\\}",
      Pattern.DOTALL);
  private static final Pattern FOR = Pattern.compile(
      "for\\s+([A-Za-z_]\\w*)\\s+in\\s+(.+?)(?:\\s+if\\s.*|\\s+recursive)?", Pattern.DOTALL);
  private static final Pattern SET = Pattern.compile("set\\s+([A-Za-z_]\\w*)\\s*=\\s*(.+)",
      Pattern.DOTALL);

  /**
   * vLLM's detection of the "openai" content format: the template has a loop over the
   * {@code content} of a message, where a message is the target of a loop over
   * {@code messages} or over a variable set from it (through slices, filters or tests, as
   * {@code loop_messages = messages[1:]}). Read from the template's statements as vLLM reads
   * its syntax tree.
   */
  static boolean iteratesOverContent(String source) {
    List<String[]> fors = new ArrayList<>();
    List<String[]> sets = new ArrayList<>();
    Matcher st = STATEMENT.matcher(source);
    while (st.find()) {
      String body = st.group(1);
      Matcher f = FOR.matcher(body);
      Matcher set = SET.matcher(body);
      if (f.matches()) {
        fors.add(new String[] {f.group(1), f.group(2).strip()});
      } else if (set.matches()) {
        sets.add(new String[] {set.group(1), set.group(2).strip()});
      }
    }
    java.util.Set<String> messageLists = new java.util.LinkedHashSet<>(List.of("messages"));
    for (boolean grew = true; grew; ) {
      grew = false;
      for (String[] set : sets) {
        for (String v : List.copyOf(messageLists)) {
          if (accesses(set[1], v, false) && messageLists.add(set[0])) {
            grew = true;
          }
        }
      }
    }
    java.util.Set<String> messageVars = new java.util.HashSet<>();
    for (String[] f : fors) {
      for (String v : messageLists) {
        if (accesses(f[1], v, false)) {
          messageVars.add(f[0]);
        }
      }
    }
    for (String[] f : fors) {
      for (String v : messageVars) {
        if (accesses(f[1], v, true)) {
          return true;
        }
      }
    }
    return false;
  }

  /**
   * Whether {@code expr} is {@code name} (or its {@code content}), possibly sliced, filtered
   * or tested: {@code messages}, {@code messages[1:]}, {@code message['content']|list}.
   */
  private static boolean accesses(String expr, String name, boolean content) {
    String key = content
        ? "(?:\\[\\s*(['\"])content\\1\\s*\\]|\\s*\\.\\s*content\\b)" : "";
    return Pattern.compile(Pattern.quote(name) + "\\b" + key
        + "(?:\\s*\\[[^\\[\\]]*:[^\\[\\]]*\\])*\\s*(?:\\|.*|\\bis\\b.*)?", Pattern.DOTALL)
        .matcher(expr).matches();
  }

  /**
   * Variables the renderer sets itself; kwargs naming them are refused, as transformers does.
   * Not {@code documents}: vLLM merges the request's {@code documents} into the kwargs, and hands
   * a {@code documents} kwarg to {@code apply_chat_template} as its argument of that name, so it
   * reaches the template as the variable {@code documents} either way. Not {@code tools} either:
   * see {@link #kwargsTools}.
   */
  private static final java.util.Set<String> RENDER_ARGUMENTS = java.util.Set.of("messages");

  /**
   * The {@code tools} of the request's {@code chat_template_kwargs} where they replace the
   * request's own, else null. vLLM puts the request's {@code tools} among the defaults of the
   * kwargs and merges the request's kwargs over them ({@code ChatParams.with_defaults}, where a
   * value of {@code null} or {@code "auto"} leaves the default), then hands the merged
   * {@code tools} to {@code apply_chat_template} as its argument of that name: as given, without
   * the request model's reading of the {@code tools} field.
   *
   * @throws Tokenizer.TokenizationException when the kwargs are not a JSON object
   */
  static @Nullable Object kwargsTools(ChatTemplateArgs args) {
    String kwargsJson = args.kwargsJson();
    if (kwargsJson == null || !kwargsJson.contains("\"tools\"")) {
      return null;
    }
    Object tools = readKwargs(kwargsJson).get("tools");
    return tools == null || "auto".equals(tools) ? null : tools;
  }

  private static Map<?, ?> readKwargs(String kwargsJson) {
    try {
      return JSON.readValue(kwargsJson, Map.class);
    } catch (JsonProcessingException e) {
      throw new Tokenizer.TokenizationException("the request's chat_template_kwargs are not a"
          + " JSON object");
    }
  }

  private Outcome attempt(List<ChatMessage> messages, @Nullable String toolsJson,
      ChatTemplateArgs args, boolean detailed) {
    List<Map<String, Object>> msgs = new ArrayList<>(messages.size());
    for (ChatMessage m : messages) {
      Map<String, Object> msg = new LinkedHashMap<>(4);
      msg.put("role", m.role());
      msg.put("content", contentAsParts ? partsOf(m) : m.content());
      if (m.hasFields()) {
        putFields(m, msg);
      }
      msgs.add(msg);
    }
    JinjavaInterpreter interpreter = jinjava.newInterpreter();
    var context = interpreter.getContext();
    context.putAll(globals);
    String kwargsJson = args.kwargsJson();
    Object kwargsTools = null;
    if (kwargsJson != null) {
      Map<?, ?> kwargs = readKwargs(kwargsJson);
      for (Map.Entry<?, ?> kw : kwargs.entrySet()) {
        String name = String.valueOf(kw.getKey());
        if (name.equals("tools")) {
          // over the request's tools, unless null or "auto" (see kwargsTools)
          Object v = kw.getValue();
          kwargsTools = v == null || "auto".equals(v) ? null : v;
          continue;
        }
        if (RENDER_ARGUMENTS.contains(name)) {
          throw new Tokenizer.TokenizationException("the request's chat_template_kwargs set '"
              + name + "', which the chat template is given by the request itself");
        }
        // over the special tokens, as transformers merges them; add_generation_prompt is the
        // request's own field, set below
        context.put(name, kw.getValue());
      }
    }
    context.put("messages", msgs);
    context.put("add_generation_prompt", args.addGenerationPrompt());
    if (kwargsTools != null) {
      context.put("tools", kwargsTools);
    } else if (toolsJson != null) {
      try {
        context.put("tools", toolsAsTheEngineHandsThem(JSON.readValue(toolsJson, List.class)));
      } catch (JsonProcessingException | ClassCastException e) {
        throw new Tokenizer.TokenizationException("the request's tools are not a JSON array");
      }
    }
    String out;
    String raised;
    RAISED.remove();
    JinjavaInterpreter.pushCurrent(interpreter);
    try {
      out = interpreter.render(root, false);
    } finally {
      JinjavaInterpreter.popCurrent();
      raised = RAISED.get();
      RAISED.remove();
    }
    if (raised != null) {
      return new Outcome("", raised);
    }
    for (TemplateError e : interpreter.getErrors()) {
      // jinjava reports a macro past its recursion depth as a warning and renders the call as
      // nothing; jinja2 fails (RecursionError), and a rendering with a hole is wrong tokens
      boolean cycle = e.getCategory() == BasicTemplateErrorCategory.CYCLE_DETECTED;
      if (e.getSeverity() == TemplateError.ErrorType.FATAL || cycle) {
        throw new Tokenizer.TokenizationException("the chat template of " + origin
            + " failed at line " + e.getLineno() + ": "
            + (cycle ? "a macro recursed deeper than " + MAX_MACRO_DEPTH : e.getReason())
            + (detailed ? " (" + e.getMessage() + ")" : ""));
      }
    }
    return new Outcome(out, null);
  }

  private static final Pattern REVERSED =
      Pattern.compile("([A-Za-z_][\\w.]*(?:\\[[^\\[\\]]*\\])*)\\[\\s*::\\s*-1\\s*\\]");
  private static final Pattern NOT_IS = Pattern.compile(
      "\\bnot\\s+([A-Za-z_][\\w.]*(?:\\[[^\\[\\]]*\\])*\\s+is\\s+(?:not\\s+)?[A-Za-z_]\\w*)");
  private static final Pattern NAMESPACE_CALL = Pattern.compile("\\bnamespace\\s*\\(");
  private static final Pattern KWARG = Pattern.compile("^(\\s*[A-Za-z_]\\w*\\s*)=(?!=)(.*)$",
      Pattern.DOTALL);

  /**
   * Rewrites the Python forms of Hugging Face templates that jinjava parses differently:
   * {@code x[::-1]} (no step slices in jinjava) becomes {@code (x|reverse|list)};
   * {@code not x is defined} becomes {@code not (x is defined)}, as Jinja binds it; and the
   * keyword values of {@code namespace(...)} are parenthesized, since jinjava would read
   * {@code namespace(i=messages|length - 1)} as {@code (i=messages|length) - 1}.
   */
  static String pythonCompatible(String source) {
    String s = REVERSED.matcher(source).replaceAll("($1|reverse|list)");
    s = NOT_IS.matcher(s).replaceAll("not ($1)");
    StringBuilder out = new StringBuilder(s.length() + 16);
    Matcher m = NAMESPACE_CALL.matcher(s);
    int copied = 0;
    while (m.find(copied)) {
      int open = m.end();
      int close = matchingParen(s, open);
      if (close < 0) {
        break;
      }
      out.append(s, copied, open);
      List<String> args = topLevelArgs(s.substring(open, close));
      for (int i = 0; i < args.size(); i++) {
        Matcher kw = KWARG.matcher(args.get(i));
        out.append(i == 0 ? "" : ",");
        out.append(kw.matches() ? kw.group(1) + "=(" + kw.group(2) + ")" : args.get(i));
      }
      copied = close;
    }
    return out.append(s.substring(copied)).toString();
  }

  /** Index of the ')' closing the call whose arguments start at {@code from}, or -1. */
  private static int matchingParen(String s, int from) {
    int depth = 0;
    char quote = 0;
    for (int i = from; i < s.length(); i++) {
      char c = s.charAt(i);
      if (quote != 0) {
        if (c == '\\') {
          i++;
        } else if (c == quote) {
          quote = 0;
        }
      } else if (c == '\'' || c == '"') {
        quote = c;
      } else if (c == '(' || c == '[' || c == '{') {
        depth++;
      } else if (c == ')' || c == ']' || c == '}') {
        if (depth == 0) {
          return c == ')' ? i : -1;
        }
        depth--;
      }
    }
    return -1;
  }

  private static List<String> topLevelArgs(String args) {
    List<String> out = new ArrayList<>();
    int depth = 0;
    char quote = 0;
    int start = 0;
    for (int i = 0; i < args.length(); i++) {
      char c = args.charAt(i);
      if (quote != 0) {
        if (c == '\\') {
          i++;
        } else if (c == quote) {
          quote = 0;
        }
      } else if (c == '\'' || c == '"') {
        quote = c;
      } else if (c == '(' || c == '[' || c == '{') {
        depth++;
      } else if (c == ')' || c == ']' || c == '}') {
        depth--;
      } else if (c == ',' && depth == 0) {
        out.add(args.substring(start, i));
        start = i + 1;
      }
    }
    out.add(args.substring(start));
    return out;
  }

  /**
   * The message of the {@code raise_exception} call of the render running on this thread:
   * jinjava reports a failed function call without its cause, so the message goes around it.
   */
  private static final ThreadLocal<@Nullable String> RAISED = new ThreadLocal<>();

  /** {@code raise_exception(message)}: the template refuses the conversation. */
  public static Object raiseException(Object message) {
    String m = String.valueOf(message);
    if (RAISED.get() == null) {
      RAISED.set(m);
    }
    throw new TemplateRaised(m);
  }

  /**
   * Python's {@code range(stop)}, {@code range(start, stop[, step])}, computed as it is walked.
   * jinjava's own stops at 1,000 numbers without an error, so a template that walks the chat
   * with {@code range(messages|length)} (gpt-oss, Gemma) dropped every message after the
   * 1,000th.
   *
   * @throws IllegalArgumentException for arguments that are not integers, a step of 0, or more
   *     than {@link #MAX_RANGE} numbers (a render that could not end in reasonable time)
   */
  public static List<Long> range(Object first, Object... more) {
    if (more.length > 2) {
      throw new IllegalArgumentException("range expected at most 3 arguments");
    }
    long start = more.length == 0 ? 0 : integer(first);
    long stop = more.length == 0 ? integer(first) : integer(more[0]);
    long step = more.length == 2 ? integer(more[1]) : 1;
    if (step == 0) {
      throw new IllegalArgumentException("range() arg 3 must not be zero");
    }
    java.math.BigInteger span = java.math.BigInteger.valueOf(stop)
        .subtract(java.math.BigInteger.valueOf(start));
    java.math.BigInteger s = java.math.BigInteger.valueOf(step);
    // ceil(span / step) when it has the step's sign, else empty
    java.math.BigInteger[] qr = span.divideAndRemainder(s);
    java.math.BigInteger count = qr[0].add(qr[1].signum() == 0 ? java.math.BigInteger.ZERO
        : java.math.BigInteger.ONE).max(java.math.BigInteger.ZERO);
    if (count.compareTo(java.math.BigInteger.valueOf(MAX_RANGE)) > 0) {
      throw new IllegalArgumentException("range of more than " + MAX_RANGE + " numbers");
    }
    int size = count.intValue();
    return new RangeList(start, step, size);
  }

  /** How many numbers a template's {@code range} may give. */
  static final int MAX_RANGE = 1_000_000;

  private static long integer(@Nullable Object o) {
    if (o instanceof Number n && n.doubleValue() == Math.rint(n.doubleValue())
        && !(o instanceof Double d && d.isInfinite())) {
      return n.longValue();
    }
    throw new IllegalArgumentException("range() arguments must be integers");
  }

  /** The numbers of a range, computed when read. */
  private static final class RangeList extends java.util.AbstractList<Long>
      implements java.util.RandomAccess {
    private final long start;
    private final long step;
    private final int size;

    RangeList(long start, long step, int size) {
      this.start = start;
      this.step = step;
      this.size = size;
    }

    @Override
    public Long get(int index) {
      Objects.checkIndex(index, size);
      return start + step * index;
    }

    @Override
    public int size() {
      return size;
    }
  }

  /** {@code strftime_now(format)}: the current local time in a Python strftime format. */
  public static String strftimeNow(String format) {
    return PythonMethods.strftime(ZonedDateTime.now(), format);
  }

  /** The message of {@code raise_exception}, carried through jinjava's error list. */
  static final class TemplateRaised extends RuntimeException {
    private static final long serialVersionUID = 1L;

    TemplateRaised(String message) {
      super(message, null, false, false);
    }
  }

  /**
   * A jinja2 string filter jinjava implements differently ({@code title} starts words after
   * {@code -} and brackets too; both use Python's full case mappings, {@code 'ß'} to
   * {@code 'Ss'}).
   */
  private record TextFilter(String name, java.util.function.UnaryOperator<String> f)
      implements Filter {
    @Override
    public String getName() {
      return name;
    }

    @Override
    public Object filter(Object var, JinjavaInterpreter interpreter, String... args) {
      return f.apply(var == null ? "" : var.toString());
    }
  }

  /**
   * {@code tojson} as transformers defines it: {@code json.dumps(x, ensure_ascii=False,
   * indent=indent, separators=separators, sort_keys=sort_keys)}, not jinja2's HTML-safe one.
   */
  static final class ToJson implements Filter {
    @Override
    public String getName() {
      return "tojson";
    }

    @Override
    public Object filter(Object var, JinjavaInterpreter interpreter, String... args) {
      return PythonJson.dumps(var, null, false);
    }

    @Override
    public Object filter(Object var, JinjavaInterpreter interpreter, Object[] args,
        Map<String, Object> kwargs) {
      // Python's order: tojson(x, ensure_ascii=False, indent=None, separators=None,
      // sort_keys=False), each also by keyword
      Object ensureAscii = argument(args, kwargs, 0, "ensure_ascii");
      Object indent = argument(args, kwargs, 1, "indent");
      Object separators = argument(args, kwargs, 2, "separators");
      Object sortKeys = argument(args, kwargs, 3, "sort_keys");
      String itemSeparator = null;
      String keySeparator = null;
      if (separators instanceof List<?> pair && pair.size() == 2) {
        itemSeparator = String.valueOf(pair.get(0));
        keySeparator = String.valueOf(pair.get(1));
      } else if (separators != null) {
        throw new IllegalArgumentException("tojson: separators must be a pair of strings");
      }
      String indentText = indent == null ? null
          : indent instanceof Number n ? " ".repeat(Math.max(0, n.intValue()))
          : indent.toString();
      return PythonJson.dumps(var, indentText, itemSeparator, keySeparator,
          truthy(sortKeys), truthy(ensureAscii));
    }

    /** Python's truth of an argument: {@code tojson(2)} sets ensure_ascii, not indent. */
    private static boolean truthy(@Nullable Object o) {
      return o instanceof Boolean b ? b
          : o instanceof Number n ? n.doubleValue() != 0
          : o instanceof String str ? !str.isEmpty()
          : o != null;
    }

    private static @Nullable Object argument(Object[] args, Map<String, Object> kwargs,
        int position, String name) {
      return kwargs.containsKey(name) ? kwargs.get(name)
          : args.length > position ? args[position] : null;
    }
  }
}
