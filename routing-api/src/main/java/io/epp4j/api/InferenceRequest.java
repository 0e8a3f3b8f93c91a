package io.epp4j.api;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import org.jspecify.annotations.Nullable;

/**
 * An inference request as the router sees it. Exactly one prompt form is present: completion
 * text ({@link Kind#COMPLETION}), chat messages ({@link Kind#CHAT}) or token IDs
 * ({@link Kind#TOKENS}). Header names are lower-cased. Immutable; the token array is not copied
 * on access for speed, so callers must not modify it.
 */
public final class InferenceRequest {

  /** Which prompt form the request carries. */
  public enum Kind { COMPLETION, CHAT, TOKENS }

  private final String requestId;
  private final String model;
  private final String targetModel;
  private final Kind kind;
  private final @Nullable String prompt;
  private final List<ChatMessage> messages;
  private final @Nullable String toolsJson;
  private final @Nullable String toolChoice;
  private final ChatTemplateArgs chatTemplateArgs;
  private final int @Nullable [] tokenIds;
  private final Map<String, String> headers;
  private final @Nullable String sessionKey;
  private final int priority;
  private final @Nullable String cacheSalt;
  private final @Nullable String loraAdapter;
  private final int maxTokens;
  private final int sequences;
  private final boolean stream;
  private final boolean addSpecialTokens;

  private InferenceRequest(Builder b) {
    this.requestId = b.requestId;
    this.model = b.model;
    this.targetModel = b.targetModel == null ? b.model : b.targetModel;
    this.prompt = b.prompt;
    this.messages = List.copyOf(b.messages);
    this.toolsJson = b.toolsJson;
    this.toolChoice = b.toolChoice;
    this.chatTemplateArgs = b.chatTemplateArgs;
    this.tokenIds = b.tokenIds;
    this.headers = Map.copyOf(b.headers);
    this.sessionKey = b.sessionKey;
    this.priority = b.priority;
    this.cacheSalt = b.cacheSalt;
    this.loraAdapter = b.loraAdapter;
    this.maxTokens = b.maxTokens;
    this.sequences = b.sequences;
    this.stream = b.stream;
    int forms = (prompt != null ? 1 : 0) + (!messages.isEmpty() ? 1 : 0) + (tokenIds != null ? 1 : 0);
    if (forms != 1) {
      throw new IllegalArgumentException(
          "exactly one of prompt, messages or tokenIds must be set, got " + forms);
    }
    this.kind = prompt != null ? Kind.COMPLETION : tokenIds != null ? Kind.TOKENS : Kind.CHAT;
    Boolean special = b.addSpecialTokens;
    this.addSpecialTokens = special != null ? special : kind == Kind.COMPLETION;
  }

  public static Builder builder() {
    return new Builder();
  }

  /** A completion request with the given prompt text (convenience for tests and examples). */
  public static InferenceRequest completion(String model, String prompt) {
    return builder().model(model).prompt(prompt).build();
  }

  public String requestId() { return requestId; }
  /** The model named by the client. */
  public String model() { return model; }
  /** The model the server will run (after any rewrite); defaults to {@link #model()}. */
  public String targetModel() { return targetModel; }
  public Kind kind() { return kind; }
  /** Completion prompt text, for {@link Kind#COMPLETION}. */
  public @Nullable String prompt() { return prompt; }
  /** Chat messages, for {@link Kind#CHAT}; empty otherwise. */
  public List<ChatMessage> messages() { return messages; }
  /**
   * The {@code tools} array as compact JSON, object keys in the order the client wrote them
   * (which the model's chat template prints), or {@code null}.
   */
  public @Nullable String toolsJson() { return toolsJson; }
  /**
   * The request's {@code tool_choice} when it is a string ({@code "none"}, {@code "auto"},
   * {@code "required"}), or {@code null} when it is absent, {@code null} or names a tool (an
   * object). vLLM started with {@code --exclude-tools-when-tool-choice-none} renders a chat whose
   * {@code tool_choice} is {@code "none"} without its tools, so a tokenizer rendering for such an
   * engine needs it.
   */
  public @Nullable String toolChoice() { return toolChoice; }
  /**
   * How a chat's template is to be rendered ({@code add_generation_prompt},
   * {@code continue_final_message}, {@code chat_template_kwargs});
   * {@link ChatTemplateArgs#DEFAULTS} unless the request sets them.
   */
  public ChatTemplateArgs chatTemplateArgs() { return chatTemplateArgs; }
  /** Token IDs, for {@link Kind#TOKENS}; do not modify the returned array. */
  public int @Nullable [] tokenIds() { return tokenIds; }
  /** Request headers with lower-case names. */
  public Map<String, String> headers() { return headers; }
  /** A header value by case-insensitive name, or {@code null}. */
  public @Nullable String header(String name) { return headers.get(name.toLowerCase(Locale.ROOT)); }
  /** The session key for sticky routing and session affinity, or {@code null}. */
  public @Nullable String sessionKey() { return sessionKey; }
  /** Priority; negative means sheddable when the pool is saturated. */
  public int priority() { return priority; }
  /** {@code cache_salt}: requests with different salts never share cache hints. */
  public @Nullable String cacheSalt() { return cacheSalt; }
  /** LoRA adapter name, or {@code null} for the base model. */
  public @Nullable String loraAdapter() { return loraAdapter; }
  /** {@code max_tokens}, or 0 when absent. */
  public int maxTokens() { return maxTokens; }
  /**
   * How many sequences the engine generates for the request (its {@code n}), each up to
   * {@link #maxTokens()} tokens; 1 unless the request asks for more.
   */
  public int sequences() { return sequences; }
  /**
   * The most output tokens the request makes the engine generate: {@link #maxTokens()} for each
   * of its {@link #sequences()}; 0 when {@code max_tokens} is absent. What in-flight and decode
   * accounting count as the request's output.
   */
  public long maxOutputTokens() { return (long) maxTokens * sequences; }
  public boolean stream() { return stream; }
  /**
   * {@code add_special_tokens}: whether the engine tokenizes the prompt text (a completion's
   * prompt, a chat's rendered template) with the special tokens its tokenizer adds to a sequence
   * (the BOS of Llama, Gemma, DeepSeek), which then start the first KV block. As vLLM defaults
   * it unless the request sets it: true for a completion, false for a chat (whose template writes
   * them itself). Token IDs are never added to.
   */
  public boolean addSpecialTokens() { return addSpecialTokens; }

  /**
   * The tokens {@link #estimatedPromptTokens()} counts for one media part of a chat (an image,
   * an audio clip, a video, embeddings), whatever its size. The engine puts the tokens its
   * encoder makes of the media in the prompt, not the part's URL or base64 data: their number
   * depends on the model and the media's resolution or duration (576 for a LLaVA-1.5 image, 256
   * for Gemma 3's, about 1,370 for a 1,024-pixel square image in Qwen2-VL, 750 for 30 s of
   * Qwen2-Audio), which the router does not decode; this is their order of magnitude.
   */
  public static final int MEDIA_PART_TOKENS = 1024;

  /**
   * A cheap estimate of the prompt length in tokens: the token count when known, else characters
   * divided by four. A chat's characters are those of its messages' content, of their other
   * fields the template renders ({@link ChatMessage#fields()}: an assistant's tool calls with
   * their arguments, a tool result's call id, reasoning) and of its tools; each media part of a
   * message's content (not text, see {@link ChatMessage.Part}) counts {@link #MEDIA_PART_TOKENS}
   * instead of the characters of its JSON, so a base64 image of a megabyte is not read as a
   * quarter of a million prompt tokens.
   */
  public int estimatedPromptTokens() {
    if (tokenIds != null) {
      return tokenIds.length;
    }
    if (prompt != null) {
      return (prompt.length() + 3) / 4;
    }
    long chars = toolsJson == null ? 0 : toolsJson.length();
    long media = 0;
    for (int i = 0; i < messages.size(); i++) {
      ChatMessage m = messages.get(i);
      long content = m.content().length();
      List<ChatMessage.Part> parts = m.parts();
      for (int j = 0; j < parts.size(); j++) {
        ChatMessage.Part part = parts.get(j);
        if (!part.isText()) {
          // the content holds the part's JSON for its identity; the engine reads the media
          content -= part.json().length();
          media++;
        }
      }
      // an agent's assistant turns are often tool calls alone (content null): their arguments
      // are rendered into the prompt like content
      chars += Math.max(0, content) + m.fields().length();
    }
    return (int) Math.min(Integer.MAX_VALUE, (chars + 3) / 4 + media * MEDIA_PART_TOKENS);
  }

  /** A builder pre-filled with this request's fields. */
  public Builder toBuilder() {
    Builder b = new Builder()
        .requestId(requestId).model(model).targetModel(targetModel)
        .toolsJson(toolsJson).toolChoice(toolChoice).chatTemplateArgs(chatTemplateArgs).headers(headers).sessionKey(sessionKey).priority(priority)
        .cacheSalt(cacheSalt).loraAdapter(loraAdapter).maxTokens(maxTokens).sequences(sequences).stream(stream)
        .addSpecialTokens(addSpecialTokens);
    b.prompt = prompt;
    b.messages = new ArrayList<>(messages);
    b.tokenIds = tokenIds;
    return b;
  }

  @Override
  public String toString() {
    // never prints prompt content
    return "InferenceRequest{id=" + requestId + ", model=" + model + ", kind=" + kind
        + ", promptTokens~" + estimatedPromptTokens() + "}";
  }

  /** Builds an {@link InferenceRequest}. */
  public static final class Builder {
    private String requestId = "";
    private String model = "";
    private @Nullable String targetModel;
    private @Nullable String prompt;
    private List<ChatMessage> messages = new ArrayList<>();
    private @Nullable String toolsJson;
    private @Nullable String toolChoice;
    private ChatTemplateArgs chatTemplateArgs = ChatTemplateArgs.DEFAULTS;
    private int @Nullable [] tokenIds;
    private Map<String, String> headers = Map.of();
    private @Nullable String sessionKey;
    private int priority;
    private @Nullable String cacheSalt;
    private @Nullable String loraAdapter;
    private int maxTokens;
    private int sequences = 1;
    private boolean stream;
    private @Nullable Boolean addSpecialTokens;

    private Builder() {}

    public Builder requestId(String v) {
      this.requestId = Objects.requireNonNull(v, "requestId");
      return this;
    }
    public Builder model(String v) { this.model = Objects.requireNonNull(v, "model"); return this; }
    public Builder targetModel(@Nullable String v) { this.targetModel = v; return this; }
    public Builder prompt(@Nullable String v) { this.prompt = v; return this; }
    public Builder messages(List<ChatMessage> v) {
      Objects.requireNonNull(v, "messages");
      for (int i = 0; i < v.size(); i++) {
        int at = i;
        Objects.requireNonNull(v.get(i), () -> "messages: the entry at index " + at + " is null");
      }
      this.messages = new ArrayList<>(v);
      return this;
    }
    public Builder addMessage(ChatMessage m) {
      this.messages.add(Objects.requireNonNull(m, "message"));
      return this;
    }
    public Builder toolsJson(@Nullable String v) { this.toolsJson = v; return this; }
    /** The request's {@code tool_choice} when a string, else {@code null} (the default). */
    public Builder toolChoice(@Nullable String v) { this.toolChoice = v; return this; }
    /** How a chat's template is rendered; {@link ChatTemplateArgs#DEFAULTS} unless set. */
    public Builder chatTemplateArgs(ChatTemplateArgs v) {
      this.chatTemplateArgs = Objects.requireNonNull(v, "chatTemplateArgs");
      return this;
    }
    /** Token IDs; the array is kept, not copied. */
    public Builder tokenIds(int @Nullable [] v) { this.tokenIds = v; return this; }
    /**
     * Headers; names are lower-cased. Two names that differ only in case are one header given
     * twice: their values are joined in the map's order ({@link RepeatedHeaders#lowerCased}),
     * not one of them kept. A null name or value is refused.
     */
    public Builder headers(Map<String, String> v) {
      Objects.requireNonNull(v, "headers");
      v.forEach((k, val) -> {
        Objects.requireNonNull(k, "headers: a name is null");
        Objects.requireNonNull(val, () -> "headers: the value of '" + k + "' is null");
      });
      // v itself when its names are in lower case: copied once by build(), and an immutable
      // map is not copied at all
      this.headers = RepeatedHeaders.lowerCased(v);
      return this;
    }
    public Builder sessionKey(@Nullable String v) { this.sessionKey = v; return this; }
    public Builder priority(int v) { this.priority = v; return this; }
    public Builder cacheSalt(@Nullable String v) { this.cacheSalt = v; return this; }
    public Builder loraAdapter(@Nullable String v) { this.loraAdapter = v; return this; }
    public Builder maxTokens(int v) {
      if (v < 0) {
        throw new IllegalArgumentException("maxTokens must be >= 0, got " + v);
      }
      this.maxTokens = v;
      return this;
    }
    /** The request's {@code n}: how many sequences the engine generates; at least 1. */
    public Builder sequences(int v) {
      if (v < 1) {
        throw new IllegalArgumentException("sequences must be >= 1, got " + v);
      }
      this.sequences = v;
      return this;
    }
    public Builder stream(boolean v) { this.stream = v; return this; }
    /**
     * The request's {@code add_special_tokens}, or {@code null} (the default) for the engine's
     * default of the request's kind: true for a completion, false for a chat.
     */
    public Builder addSpecialTokens(@Nullable Boolean v) { this.addSpecialTokens = v; return this; }

    /** @throws IllegalArgumentException unless exactly one prompt form is set */
    public InferenceRequest build() {
      return new InferenceRequest(this);
    }
  }
}
