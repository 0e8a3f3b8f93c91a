package io.epp4j.kvevents;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.epp4j.api.ChatMessage;
import io.epp4j.api.ChatTemplateArgs;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Flow;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.jspecify.annotations.Nullable;

/**
 * A {@link Tokenizer} that asks a vLLM server: {@code POST <baseUrl>/tokenize} with
 * {@code {"model", "prompt", "add_special_tokens": false}} for text ({@code true} for a
 * completion request's prompt, as {@code /v1/completions} tokenizes it), and with
 * {@code "messages"} (and {@code "tools"}) and the request's {@code "add_generation_prompt"}
 * (true unless the request turned it off), {@code "continue_final_message"} and
 * {@code "chat_template_kwargs"} for chats (the server renders its own template, or the
 * request's {@code "chat_template"}, which is sent along when it has one). Each message
 * goes as the client sent it: a string content as that string (a {@code null} one left out), an
 * array content as its parts,
 * media included (the server reads them and renders the model's placeholder tokens), and its
 * tool calls, tool result id, name and reasoning as fields. The answer's {@code "tokens"} array is the result; an
 * answer whose array holds anything but non-negative integers that fit an {@code int} is
 * malformed, and fails the call as an answer that is not JSON does. Blocking; give it a short
 * timeout.
 *
 * <p>An answer is read up to {@link #ANSWER_BASE_BYTES} plus
 * {@link #ANSWER_BYTES_PER_REQUEST_BYTE} bytes per byte of the request sent; a longer one fails
 * the call (the rest is not read), so a misbehaving server cannot make the router hold more
 * memory than the prompt warrants.
 */
public final class VllmTokenizer implements Tokenizer {
  private static final ObjectMapper JSON = new ObjectMapper();

  /**
   * Bytes of an answer allowed per byte of the request: a tokenizer gives at most about one
   * token per byte of text (byte-level BPE and byte fallback spell any byte as one token, merges
   * only lower the count), and a token ID takes at most 11 bytes of compact JSON
   * ({@code 2147483647,}); 16 leaves room for whitespace and for a template's tokens per message.
   */
  public static final int ANSWER_BYTES_PER_REQUEST_BYTE = 16;

  /**
   * Bytes of an answer allowed whatever the request (1 MiB): the answer's other fields, and
   * the tokens the server's chat template adds of its own (a default system prompt, tool
   * instructions), some 90,000 of them at 11 bytes each.
   */
  public static final int ANSWER_BASE_BYTES = 1 << 20;

  private final HttpClient client;
  private final URI uri;
  private final String model;
  private final Duration timeout;
  private final Duration partsTimeout;

  /**
   * @param baseUrl e.g. {@code http://10.0.0.1:8000}
   * @throws IllegalArgumentException when {@code baseUrl} is not an http(s) URL with a host
   * @param model   the served model name
   * @param timeout per-call timeout: the whole call, from connecting to the answer's last byte
   */
  public VllmTokenizer(String baseUrl, String model, Duration timeout) {
    this(baseUrl, model, timeout, timeout);
  }

  /**
   * A tokenizer that waits {@code partsTimeout} for a chat with a message whose content is an
   * array of parts, which may hold media the server fetches and reads before it answers (llm-d's
   * {@code vllm.mmTimeout}, 30 s there by default, chosen for the same chats), and
   * {@code timeout} for every other call.
   *
   * @throws IllegalArgumentException when {@code baseUrl} is not an http(s) URL with a host, or
   *     a timeout is not positive
   */
  public VllmTokenizer(String baseUrl, String model, Duration timeout, Duration partsTimeout) {
    this.uri = tokenizeUri(baseUrl);
    this.model = Objects.requireNonNull(model, "model");
    this.timeout = positive(timeout, "timeout");
    this.partsTimeout = positive(partsTimeout, "partsTimeout");
    // HTTP/1.1: the JDK's default (HTTP/2) asks a plain-http server to upgrade with h2c on
    // every new connection, which some engine servers refuse. Connecting is bounded by the
    // longer timeout here, and each call as a whole by its own
    this.client = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1)
        .connectTimeout(timeout.compareTo(partsTimeout) >= 0 ? timeout : partsTimeout).build();
  }

  private static Duration positive(Duration d, String name) {
    Objects.requireNonNull(d, name);
    if (d.isZero() || d.isNegative()) {
      throw new IllegalArgumentException(name + " must be positive, got " + d);
    }
    return d;
  }

  /** The per-call timeout. */
  Duration timeout() {
    return timeout;
  }

  /** The timeout of a chat with a message whose content is an array of parts. */
  Duration partsTimeout() {
    return partsTimeout;
  }

  /**
   * {@code <baseUrl>/tokenize}, checked as the HTTP client will take it: a base URL without a
   * scheme ({@code vllm:8000} reads as scheme {@code vllm}), with another scheme or without a
   * host would otherwise be accepted here and fail every call before anything is sent.
   *
   * @throws IllegalArgumentException naming {@code baseUrl} when it is not such a URL
   */
  static URI tokenizeUri(String baseUrl) {
    String base = baseUrl.endsWith("/") ? baseUrl.substring(0, baseUrl.length() - 1) : baseUrl;
    URI u;
    try {
      u = URI.create(base); // checked without the path added: "http://" must not gain a host
    } catch (IllegalArgumentException e) {
      throw new IllegalArgumentException("'" + baseUrl + "' is not a valid URL ("
          + (e.getCause() instanceof java.net.URISyntaxException x ? x.getReason() : e.getMessage())
          + ")", e);
    }
    String scheme = u.getScheme();
    if (scheme == null || !(scheme.equalsIgnoreCase("http") || scheme.equalsIgnoreCase("https"))
        || u.getHost() == null) {
      throw new IllegalArgumentException("'" + baseUrl + "' is not an http:// or https:// URL"
          + " with a host (e.g. http://10.0.0.1:8000)");
    }
    return URI.create(base + "/tokenize");
  }

  @Override
  public int[] encode(String text) {
    return encode(text, false);
  }

  @Override
  public int[] encodePrompt(String prompt) {
    return encode(prompt, true);
  }

  private int[] encode(String text, boolean addSpecialTokens) {
    ObjectNode body = JSON.createObjectNode();
    body.put("model", model);
    body.put("prompt", text);
    body.put("add_special_tokens", addSpecialTokens);
    return call(body, timeout);
  }

  @Override
  public int[] encodeChat(List<ChatMessage> messages) {
    return encodeChat(messages, null);
  }

  @Override
  public int[] encodeChat(List<ChatMessage> messages, @Nullable String toolsJson) {
    return encodeChat(messages, toolsJson, ChatTemplateArgs.DEFAULTS);
  }

  /** Sends the template fields along, so that the server renders them as for the request. */
  @Override
  public int[] encodeChat(List<ChatMessage> messages, @Nullable String toolsJson,
      ChatTemplateArgs args) {
    return encodeChat(messages, toolsJson, args, false);
  }

  /** Asks with the request's {@code add_special_tokens}, for the server to tokenize alike. */
  @Override
  public int[] encodeChat(List<ChatMessage> messages, @Nullable String toolsJson,
      ChatTemplateArgs args, boolean addSpecialTokens) {
    ObjectNode body = JSON.createObjectNode();
    body.put("model", model);
    ArrayNode arr = body.putArray("messages");
    boolean withParts = false;
    for (ChatMessage m : messages) {
      ObjectNode msg = arr.addObject().put("role", m.role());
      if (!m.parts().isEmpty()) {
        withParts = true;
        // as the client sent them: the server joins text parts or hands them to its template
        // one by one, and reads media parts itself (their placeholder tokens are the model's)
        ArrayNode parts = msg.putArray("content");
        for (ChatMessage.Part p : m.parts()) {
          if (p.isText()) {
            parts.addObject().put("type", "text").put("text", p.text());
          } else if (!p.json().isEmpty()) {
            try {
              parts.add(JSON.readTree(p.json()));
            } catch (IOException e) {
              throw new TokenizationException("a message's content part is not JSON", e);
            }
          } else {
            // a part built without its JSON: the request cannot be sent as the client sent it
            throw new TokenizationException("a message's " + p.type() + " part has no JSON to"
                + " send");
          }
        }
      } else if (!m.contentAbsent()) {
        msg.put("content", m.content());
      }
      // a content the client gave as null, or left out, is left out: the server reads the two
      // alike, and takes a message without content for every role
      if (m.hasFields()) {
        // tool calls, tool_call_id, name, reasoning: as the client sent them, for the server to
        // hand its template as it does for the request
        try {
          JsonNode fields = JSON.readTree(m.fields());
          if (!(fields instanceof ObjectNode o)) {
            throw new TokenizationException("a message's fields are not a JSON object");
          }
          msg.setAll(o);
        } catch (IOException e) {
          throw new TokenizationException("a message's fields are not JSON", e);
        }
      }
    }
    if (toolsJson != null) {
      try {
        body.set("tools", JSON.readTree(toolsJson));
      } catch (IOException e) {
        throw new TokenizationException("the request's tools are not JSON", e);
      }
    }
    body.put("add_generation_prompt", args.addGenerationPrompt());
    if (args.continueFinalMessage()) {
      body.put("continue_final_message", true);
    }
    String kwargs = args.kwargsJson();
    if (kwargs != null) {
      try {
        body.set("chat_template_kwargs", JSON.readTree(kwargs));
      } catch (IOException e) {
        throw new TokenizationException("the request's chat_template_kwargs are not JSON", e);
      }
    }
    String own = args.requestTemplate();
    if (own != null) {
      // the server renders it as for the request when it trusts request templates, and refuses
      // it (the request then scored as uncached) as it refuses the request otherwise
      body.put("chat_template", own);
    }
    body.put("add_special_tokens", addSpecialTokens);
    // as llm-d chooses: a content array may hold media, which the server fetches first
    return call(body, withParts ? partsTimeout : timeout);
  }

  /** The longest answer {@link #call} reads for a request of {@code requestBytes} bytes. */
  static long answerLimit(long requestBytes) {
    return Math.min(Integer.MAX_VALUE - 8L,
        ANSWER_BASE_BYTES + ANSWER_BYTES_PER_REQUEST_BYTE * requestBytes);
  }

  private int[] call(ObjectNode body, Duration callTimeout) {
    HttpResponse<byte[]> resp;
    try {
      byte[] sent = JSON.writeValueAsBytes(body);
      long limit = answerLimit(sent.length);
      HttpRequest req = HttpRequest.newBuilder(uri).timeout(callTimeout)
          .header("content-type", "application/json")
          .POST(HttpRequest.BodyPublishers.ofByteArray(sent)).build();
      // the request's timeout ends with the answer's headers; the body could then trickle in
      // for ever, so the whole call waits at most the timeout, and is cancelled (its connection
      // closed) when that passes
      CompletableFuture<HttpResponse<byte[]>> call = client.sendAsync(req,
          info -> new BoundedBody(limit, sent.length,
              info.headers().firstValueAsLong("content-length").orElse(-1)));
      try {
        resp = call.get(callTimeout.toNanos(), TimeUnit.NANOSECONDS);
      } catch (TimeoutException e) {
        call.cancel(true);
        throw new TokenizationException("tokenize call to " + uri + " took longer than its"
            + " timeout of " + callTimeout.toMillis() + " ms", e);
      } catch (InterruptedException e) {
        call.cancel(true);
        throw e;
      }
    } catch (ExecutionException e) {
      Throwable cause = e.getCause() == null ? e : e.getCause();
      throw new TokenizationException("tokenize call to " + uri + " failed: "
          + (cause.getMessage() != null ? cause.getMessage() : cause.getClass().getSimpleName()),
          cause);
    } catch (IOException e) {
      throw new TokenizationException("tokenize call to " + uri + " failed: " + e.getMessage(), e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new TokenizationException("interrupted while calling " + uri, e);
    }
    if (resp.statusCode() != 200) {
      throw new TokenizationException("tokenize call to " + uri + " answered " + resp.statusCode());
    }
    try {
      JsonNode tokens = JSON.readTree(resp.body()).get("tokens");
      if (tokens == null || !tokens.isArray()) {
        throw new TokenizationException("tokenize answer from " + uri + " has no 'tokens' array");
      }
      int[] out = new int[tokens.size()];
      for (int i = 0; i < out.length; i++) {
        JsonNode t = tokens.get(i);
        // canConvertToInt alone takes 1.5 (as 1) and -1: neither is any model's token ID
        if (!t.isIntegralNumber() || !t.canConvertToInt() || t.intValue() < 0) {
          throw new TokenizationException("tokenize answer from " + uri + " has token "
              + (t.isNumber() ? t.toString() : "of type " + t.getNodeType()) + " at index " + i
              + ", not a token ID (an integer in [0, 2147483647])");
        }
        out[i] = t.intValue();
      }
      return out;
    } catch (IOException e) {
      throw new TokenizationException("tokenize answer from " + uri + " is not JSON", e);
    }
  }

  /**
   * Collects an answer of at most {@code limit} bytes. A longer one (by its declared length, or
   * as its bytes arrive) cancels the subscription, which drops the connection, and fails the call
   * with an {@link IOException} that says the limit.
   */
  private static final class BoundedBody implements HttpResponse.BodySubscriber<byte[]> {
    private final long limit;
    private final long requestBytes;
    private final long declared;
    private final CompletableFuture<byte[]> result = new CompletableFuture<>();
    private final ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    private Flow.@Nullable Subscription subscription;

    BoundedBody(long limit, long requestBytes, long declared) {
      this.limit = limit;
      this.requestBytes = requestBytes;
      this.declared = declared;
    }

    @Override
    public CompletionStage<byte[]> getBody() {
      return result;
    }

    @Override
    public void onSubscribe(Flow.Subscription s) {
      subscription = s;
      if (declared > limit) {
        tooLong("a declared length of " + declared + " bytes");
      } else {
        s.request(1);
      }
    }

    @Override
    public void onNext(List<ByteBuffer> buffers) {
      if (result.isDone()) {
        return;
      }
      long n = bytes.size();
      for (ByteBuffer b : buffers) {
        n += b.remaining();
      }
      if (n > limit) {
        tooLong("more than " + limit + " bytes");
        return;
      }
      for (ByteBuffer b : buffers) {
        byte[] chunk = new byte[b.remaining()];
        b.get(chunk);
        bytes.write(chunk, 0, chunk.length);
      }
      Objects.requireNonNull(subscription).request(1);
    }

    private void tooLong(String what) {
      Objects.requireNonNull(subscription).cancel();
      result.completeExceptionally(new IOException("the answer has " + what
          + ", above the limit of " + limit + " bytes for a request of " + requestBytes
          + " bytes (" + ANSWER_BASE_BYTES + " + " + ANSWER_BYTES_PER_REQUEST_BYTE
          + " per request byte)"));
    }

    @Override
    public void onError(Throwable t) {
      result.completeExceptionally(t);
    }

    @Override
    public void onComplete() {
      result.complete(bytes.toByteArray());
    }
  }
}
