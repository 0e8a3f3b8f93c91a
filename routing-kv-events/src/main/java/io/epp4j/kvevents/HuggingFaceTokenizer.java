package io.epp4j.kvevents;

import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.epp4j.api.ChatMessage;
import io.epp4j.api.ChatTemplateArgs;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.jspecify.annotations.Nullable;

/**
 * An in-process {@link Tokenizer} over a Hugging Face model directory: {@code tokenizer.json}
 * through DJL's tokenizers binding (its jar carries the native library for Linux x86_64/aarch64
 * and macOS, so nothing is downloaded at run time), and the model's Jinja chat template rendered
 * in process with jinjava, as vLLM renders it: the {@code chat_template.jinja} file when there is
 * one, else {@code chat_template} of {@code tokenizer_config.json} (a string, or a list of named
 * templates of which {@code default} is used, {@code tool_use} when the request has tools). The
 * template is rendered once on a probe conversation when loading, so a template that cannot be
 * rendered fails {@link #load} instead of every request.
 *
 * <p>Both DJL ({@code ai.djl.huggingface:tokenizers}) and jinjava
 * ({@code com.hubspot.jinjava:jinjava}) are optional dependencies the application adds.
 */
public final class HuggingFaceTokenizer implements Tokenizer {
  private static final ObjectMapper JSON = new ObjectMapper();

  private final ai.djl.huggingface.tokenizers.HuggingFaceTokenizer tokenizer;
  private final @Nullable JinjaChatTemplate template;
  private final @Nullable JinjaChatTemplate toolTemplate;
  private final SpecialTokenSplitter splitter;
  private final boolean chunkingExact;
  private final String source;
  /** Why chats fail when there is no template. */
  private final String noTemplate;

  private HuggingFaceTokenizer(ai.djl.huggingface.tokenizers.HuggingFaceTokenizer tokenizer,
      @Nullable JinjaChatTemplate template, @Nullable JinjaChatTemplate toolTemplate,
      SpecialTokenSplitter splitter, String source, String noTemplate) {
    this.noTemplate = noTemplate;
    this.tokenizer = tokenizer;
    this.template = template;
    this.toolTemplate = toolTemplate;
    this.splitter = splitter;
    this.source = source;
    this.chunkingExact = template != null && provesChunkingExact();
  }

  /**
   * Loads {@code tokenizer.json} from a model directory and, when present, its chat template.
   *
   * @throws IOException when the files cannot be read or parsed, or the chat template cannot be
   *     rendered (the message names the file)
   */
  public static HuggingFaceTokenizer load(Path modelDir) throws IOException {
    Path json = modelDir.resolve("tokenizer.json");
    if (!Files.isRegularFile(json)) {
      throw new IOException("no tokenizer.json in " + modelDir);
    }
    ai.djl.huggingface.tokenizers.HuggingFaceTokenizer t;
    try {
      t = ai.djl.huggingface.tokenizers.HuggingFaceTokenizer.newInstance(json,
          // DJL truncates to 512 tokens unless told not to; a prompt has as many as it has
          Map.of("addSpecialTokens", "false", "truncation", "false", "padding", "false"));
    } catch (RuntimeException e) {
      throw new IOException("cannot load " + json + ": " + e.getMessage(), e);
    }
    try {
      SpecialTokenSplitter splitter = SpecialTokenSplitter.read(json);
      Path config = modelDir.resolve("tokenizer_config.json");
      JsonNode cfg = Files.isRegularFile(config) ? readJson(config) : null;
      Map<String, String> special = new HashMap<>();
      if (cfg != null) {
        for (String name : List.of("bos_token", "eos_token", "unk_token", "pad_token",
            "sep_token", "cls_token", "mask_token")) {
          String v = tokenText(cfg.get(name));
          if (v != null) {
            special.put(name, v);
          }
        }
      }
      JinjaChatTemplate template = null;
      JinjaChatTemplate toolTemplate = null;
      Path jinja = modelDir.resolve("chat_template.jinja");
      JsonNode chat = cfg == null ? null : cfg.get("chat_template");
      try {
        if (Files.isRegularFile(jinja)) {
          template = JinjaChatTemplate.compile(readText(jinja), special, jinja.toString());
        } else if (chat != null && chat.isTextual()) {
          template = JinjaChatTemplate.compile(chat.asText(), special, config.toString());
        } else if (chat != null && (chat.isArray() || chat.isObject())) {
          // transformers reads the list of {name, template} into an object of named templates,
          // and takes such an object as it is
          Map<String, String> named = namedTemplates(chat, config);
          if (named.containsKey("default")) {
            template = JinjaChatTemplate.compile(named.get("default"), special,
                config + " (default)");
          }
          if (named.containsKey("tool_use")) {
            toolTemplate = JinjaChatTemplate.compile(named.get("tool_use"), special,
                config + " (tool_use)");
          }
          if (template == null) {
            throw new IOException(config + ": chat_template lists no template named 'default'");
          }
        } else if (chat != null && !chat.isNull()) {
          throw new IOException(config + ": chat_template must be a template (a string), a list"
              + " of {name, template} or an object of named templates, got " + chat.getNodeType());
        }
      } catch (IllegalArgumentException e) {
        throw new IOException(e.getMessage(), e);
      } catch (NoClassDefFoundError e) {
        // text still tokenizes; chats say why they cannot
        return new HuggingFaceTokenizer(t, null, null, splitter, modelDir.toString(),
            modelDir + " has a chat template but com.hubspot.jinjava:jinjava is not on the class"
                + " path to render it; add it, or tokenize chats with a VllmTokenizer");
      }
      return new HuggingFaceTokenizer(t, template, toolTemplate, splitter, modelDir.toString(),
          modelDir + " has no chat template (tokenizer_config.json's chat_template or"
              + " chat_template.jinja); tokenize chats with a VllmTokenizer instead");
    } catch (IOException | RuntimeException e) {
      t.close();
      throw e;
    }
  }

  /**
   * The text of a model file, read as UTF-8. The charset decoder does not say which file it was
   * reading, and the operator sees only the message; so it names the file.
   */
  private static String readText(Path file) throws IOException {
    try {
      return Files.readString(file);
    } catch (java.nio.charset.CharacterCodingException e) {
      throw new IOException("cannot read " + file + ": it is not UTF-8 text", e);
    } catch (IOException e) {
      throw new IOException("cannot read " + file + ": " + e.getMessage(), e);
    }
  }

  /**
   * The named templates of a {@code chat_template} list ({@code [{name, template}]}) or object
   * ({@code {name: template}}). An entry whose name or template is not a string is refused: it
   * was read as an empty name or an empty template, which renders every chat as nothing.
   */
  private static Map<String, String> namedTemplates(JsonNode chat, Path config)
      throws IOException {
    Map<String, String> out = new HashMap<>();
    if (chat.isObject()) {
      for (Map.Entry<String, JsonNode> e : (Iterable<Map.Entry<String, JsonNode>>) chat::fields) {
        if (!e.getValue().isTextual()) {
          throw new IOException(config + ": chat_template's template '" + e.getKey()
              + "' must be a string, got " + e.getValue().getNodeType());
        }
        out.put(e.getKey(), e.getValue().asText());
      }
      return out;
    }
    int i = 0;
    for (JsonNode entry : chat) {
      JsonNode name = entry.get("name");
      JsonNode src = entry.get("template");
      if (name == null || !name.isTextual() || src == null || !src.isTextual()) {
        throw new IOException(config + ": chat_template[" + i + "] must be {\"name\": string,"
            + " \"template\": string}");
      }
      out.put(name.asText(), src.asText());
      i++;
    }
    return out;
  }

  /** A model file's JSON; as {@link #readText}, an error names the file (Jackson's does not). */
  private static JsonNode readJson(Path file) throws IOException {
    String text = readText(file);
    try {
      return JSON.readTree(text);
    } catch (com.fasterxml.jackson.core.JsonProcessingException e) {
      throw new IOException("cannot read " + file + ": it is not JSON: " + e.getOriginalMessage(),
          e);
    }
  }

  /** tokenizer_config.json gives special tokens as strings or as AddedToken objects. */
  private static @Nullable String tokenText(@Nullable JsonNode v) {
    if (v == null || v.isNull()) {
      return null;
    }
    if (v.isObject()) {
      JsonNode c = v.get("content");
      return c == null || !c.isTextual() ? null : c.asText();
    }
    return v.isTextual() ? v.asText() : null;
  }

  @Override
  public int[] encode(String text) {
    return encode(text, false);
  }

  /** With the post-processor's special tokens (BOS), as vLLM's completions endpoint adds them. */
  @Override
  public int[] encodePrompt(String prompt) {
    return encode(prompt, true);
  }

  /**
   * The text of token IDs, special tokens included, as a Hugging Face tokenizer's
   * {@code decode(ids)} gives it (vLLM's {@code /detokenize}, and the prompt it echoes back for a
   * completion sent as token IDs).
   *
   * @throws TokenizationException when an ID is not in the vocabulary or cannot be decoded
   */
  public String decode(int[] ids) {
    long[] longs = new long[ids.length];
    for (int i = 0; i < ids.length; i++) {
      longs[i] = ids[i];
    }
    try {
      return tokenizer.decode(longs, false);
    } catch (RuntimeException e) {
      // the native library's message names the failure, never text of the request
      throw new TokenizationException(source + " cannot decode these token IDs: "
          + e.getClass().getSimpleName(), e);
    }
  }

  private int[] encode(String text, boolean addSpecialTokens) {
    long[] ids = tokenizer.encode(text, addSpecialTokens, false).getIds();
    int[] out = new int[ids.length];
    for (int i = 0; i < ids.length; i++) {
      out[i] = (int) ids[i];
    }
    return out;
  }

  @Override
  public int[] encodeChat(List<ChatMessage> messages) {
    return encode(renderChat(messages, null, true));
  }

  @Override
  public int[] encodeChat(List<ChatMessage> messages, @Nullable String toolsJson) {
    return encode(renderChat(messages, toolsJson, true));
  }

  /** Renders the request's template fields as vLLM does ({@link JinjaChatTemplate}). */
  @Override
  public int[] encodeChat(List<ChatMessage> messages, @Nullable String toolsJson,
      ChatTemplateArgs args) {
    return encode(renderChat(messages, toolsJson, args));
  }

  /** With the post-processor's special tokens when {@code addSpecialTokens}, as vLLM adds them. */
  @Override
  public int[] encodeChat(List<ChatMessage> messages, @Nullable String toolsJson,
      ChatTemplateArgs args, boolean addSpecialTokens) {
    return encode(renderChat(messages, toolsJson, args), addSpecialTokens);
  }

  /**
   * The chat as the model's template renders it with a request's template fields.
   *
   * @throws TokenizationException when the model has no chat template, the template refuses
   *     the chat, or the fields cannot be rendered ({@code continue_final_message} with
   *     {@code add_generation_prompt}, as transformers refuses it)
   */
  public String renderChat(List<ChatMessage> messages, @Nullable String toolsJson,
      ChatTemplateArgs args) {
    // the tools the template gets (the kwargs' over the request's) pick the tool-use template
    boolean tools = toolsJson != null || JinjaChatTemplate.kwargsTools(args) != null;
    return template(tools).render(messages, toolsJson, args);
  }

  private JinjaChatTemplate template(boolean tools) {
    JinjaChatTemplate t = tools && toolTemplate != null ? toolTemplate : template;
    if (t == null) {
      throw new TokenizationException(noTemplate);
    }
    return t;
  }

  /**
   * The chat as the model's template renders it.
   *
   * @throws TokenizationException when the model has no chat template, or the template refuses
   *     the chat ({@code raise_exception}, e.g. roles that do not alternate)
   */
  public String renderChat(List<ChatMessage> messages, @Nullable String toolsJson,
      boolean addGenerationPrompt) {
    return template(toolsJson != null).render(messages, toolsJson, addGenerationPrompt);
  }

  /** Whether the model has a chat template, so that {@link #encodeChat} can work. */
  public boolean hasChatTemplate() {
    return template != null;
  }

  /**
   * Whether this model's chats may be tokenized piece by piece, each piece starting at a special
   * token, with the same result as tokenizing the whole rendering, and whether that puts every
   * message in a piece of its own. Decided when loading on a rendered probe conversation (see
   * {@link CachingChatTokenizer}).
   */
  public boolean chunkingExact() {
    return chunkingExact;
  }

  /** Splits rendered text before the added tokens the tokenizer never merges across. */
  List<String> chunks(String rendered) {
    return splitter.split(rendered);
  }

  /**
   * Proof on the rendered text: a probe dialog with whitespace at the edges of its messages,
   * non-ASCII text and text that looks like markup. Its chunks must tokenize to exactly the
   * tokens of the whole rendering, and every message must sit in a chunk of its own (so cached
   * chunks are per message, whatever the template adds around them).
   */
  private boolean provesChunkingExact() {
    String[] markers = {"qzsysalpha", "qzuserbravo", "qzasstcharlie", "qzuserdelta"};
    List<ChatMessage> probe = List.of(
        ChatMessage.system(" " + markers[0] + " be brief.\n"),
        ChatMessage.user(markers[1] + "  naïve café 東京 <b>x</b> \n\n"),
        ChatMessage.assistant("\n " + markers[2] + " ok"),
        ChatMessage.user(markers[3] + " again?  "));
    String text;
    try {
      text = renderChat(probe, null, true);
    } catch (TokenizationException e) {
      return false; // e.g. a template without system messages; chats still render whole
    }
    List<String> chunks = splitter.split(text);
    int last = -1;
    for (String marker : markers) {
      int at = -1;
      for (int i = 0; i < chunks.size(); i++) {
        if (chunks.get(i).contains(marker)) {
          at = i;
          break;
        }
      }
      if (at < 0 ? text.contains(marker) : at <= last) {
        return false; // two messages share a chunk
      }
      last = Math.max(last, at);
    }
    int[] whole = encode(text);
    List<Integer> pieces = new ArrayList<>();
    for (String c : chunks) {
      for (int id : encode(c)) {
        pieces.add(id);
      }
    }
    return Arrays.equals(whole, pieces.stream().mapToInt(Integer::intValue).toArray());
  }

  @Override
  public void close() {
    tokenizer.close();
  }

  /**
   * The added tokens of {@code tokenizer.json} at which a chat may be cut: the tokenizer
   * extracts added tokens before anything else and never merges across them, so text cut just
   * before one tokenizes piece by piece to the same IDs. Only tokens matched on the raw text
   * qualify: not {@code lstrip} (it would take the whitespace before it from the previous
   * piece), not {@code single_word}, and {@code normalized} ones only when the normalizer is the
   * identity.
   */
  static final class SpecialTokenSplitter {
    private final Trie trie = new Trie();

    static SpecialTokenSplitter read(Path tokenizerJson) throws IOException {
      List<JsonNode> added = new ArrayList<>();
      boolean identityNormalizer = true;
      try (JsonParser p = JSON.getFactory().createParser(tokenizerJson.toFile())) {
        if (p.nextToken() != JsonToken.START_OBJECT) {
          throw new IOException(tokenizerJson + " is not a JSON object");
        }
        while (p.nextToken() == JsonToken.FIELD_NAME) {
          String field = p.currentName();
          p.nextToken();
          if (field.equals("added_tokens")) {
            JsonNode arr = JSON.readTree(p);
            arr.forEach(added::add);
          } else if (field.equals("normalizer")) {
            JsonNode n = JSON.readTree(p);
            identityNormalizer = n == null || n.isNull()
                || (n.path("type").asText().equals("Sequence")
                    && n.path("normalizers").isArray() && n.path("normalizers").isEmpty());
          } else {
            p.skipChildren();
          }
        }
      }
      SpecialTokenSplitter s = new SpecialTokenSplitter();
      for (JsonNode t : added) {
        String content = t.path("content").asText("");
        if (content.isEmpty() || t.path("lstrip").asBoolean(false)
            || t.path("single_word").asBoolean(false)
            || (t.path("normalized").asBoolean(false) && !identityNormalizer)) {
          continue;
        }
        s.trie.add(content);
      }
      return s;
    }

    /** Pieces of {@code text}, each but possibly the first starting with an added token. */
    List<String> split(String text) {
      List<String> out = new ArrayList<>();
      int start = 0;
      int i = 0;
      int n = text.length();
      while (i < n) {
        int len = trie.longestMatch(text, i);
        if (len > 0) {
          if (i > start) {
            out.add(text.substring(start, i));
          }
          start = i;
          i += len;
        } else {
          i++;
        }
      }
      if (start < n) {
        out.add(text.substring(start));
      }
      return out;
    }
  }

  /** Longest-match lookup of the added tokens, as the tokenizer's own matcher finds them. */
  private static final class Trie {
    private final Map<Character, Trie> next = new HashMap<>();
    private boolean terminal;

    void add(String s) {
      Trie t = this;
      for (int i = 0; i < s.length(); i++) {
        t = t.next.computeIfAbsent(s.charAt(i), c -> new Trie());
      }
      t.terminal = true;
    }

    int longestMatch(String s, int from) {
      Trie t = this;
      int best = 0;
      for (int i = from; i < s.length(); i++) {
        t = t.next.get(s.charAt(i));
        if (t == null) {
          break;
        }
        if (t.terminal) {
          best = i - from + 1;
        }
      }
      return best;
    }
  }
}
