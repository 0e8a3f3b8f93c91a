package io.epp4j.kvevents;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.epp4j.api.ChatMessage;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.List;
import java.util.Objects;
import org.jspecify.annotations.Nullable;

/**
 * A {@link Tokenizer} that asks a vLLM server: {@code POST <baseUrl>/tokenize} with
 * {@code {"model", "prompt", "add_special_tokens": false}} for text ({@code true} for a
 * completion request's prompt, as {@code /v1/completions} tokenizes it), and with
 * {@code "messages"}
 * (and {@code "tools"}) and {@code "add_generation_prompt": true} for chats (the server renders its own template). The
 * answer's {@code "tokens"} array is the result; an answer whose array holds anything but
 * non-negative integers that fit an {@code int} is malformed, and fails the call as an answer
 * that is not JSON does. Blocking; give it a short timeout.
 */
public final class VllmTokenizer implements Tokenizer {
  private static final ObjectMapper JSON = new ObjectMapper();

  private final HttpClient client;
  private final URI uri;
  private final String model;
  private final Duration timeout;

  /**
   * @param baseUrl e.g. {@code http://10.0.0.1:8000}
   * @param model   the served model name
   * @param timeout per-call timeout
   */
  public VllmTokenizer(String baseUrl, String model, Duration timeout) {
    String base = baseUrl.endsWith("/") ? baseUrl.substring(0, baseUrl.length() - 1) : baseUrl;
    this.uri = URI.create(base + "/tokenize");
    this.model = Objects.requireNonNull(model, "model");
    this.timeout = Objects.requireNonNull(timeout, "timeout");
    this.client = HttpClient.newBuilder().connectTimeout(timeout).build();
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
    return call(body);
  }

  @Override
  public int[] encodeChat(List<ChatMessage> messages) {
    return encodeChat(messages, null);
  }

  @Override
  public int[] encodeChat(List<ChatMessage> messages, @Nullable String toolsJson) {
    ObjectNode body = JSON.createObjectNode();
    body.put("model", model);
    ArrayNode arr = body.putArray("messages");
    for (ChatMessage m : messages) {
      arr.addObject().put("role", m.role()).put("content", m.content());
    }
    if (toolsJson != null) {
      try {
        body.set("tools", JSON.readTree(toolsJson));
      } catch (IOException e) {
        throw new TokenizationException("the request's tools are not JSON", e);
      }
    }
    body.put("add_generation_prompt", true);
    body.put("add_special_tokens", false);
    return call(body);
  }

  private int[] call(ObjectNode body) {
    HttpResponse<byte[]> resp;
    try {
      HttpRequest req = HttpRequest.newBuilder(uri).timeout(timeout)
          .header("content-type", "application/json")
          .POST(HttpRequest.BodyPublishers.ofByteArray(JSON.writeValueAsBytes(body))).build();
      resp = client.send(req, HttpResponse.BodyHandlers.ofByteArray());
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
}
