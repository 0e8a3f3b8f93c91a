package io.epp4j.core;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.epp4j.api.ChatMessage;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Result;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import net.jqwik.api.Arbitraries;
import net.jqwik.api.Arbitrary;
import net.jqwik.api.Combinators;
import net.jqwik.api.ForAll;
import net.jqwik.api.From;
import net.jqwik.api.Property;
import net.jqwik.api.Provide;
import net.jqwik.api.statistics.Statistics;
import net.jqwik.api.constraints.Size;

/**
 * Properties of the request parser on arbitrary and mutated bodies: it never throws, every body
 * gives a request or one bounded message, it accepts only strict UTF-8 JSON, no message carries
 * text of the body, and a valid body parses to exactly the request it was written from.
 */
class OpenAiRequestParserPropertyTest {
  static final OpenAiRequestParser PARSER = OpenAiRequestParser.defaults();
  static final String MARK = "ZQXMARKERQZX";
  /** A valid token ID (below 2^31) whose digits a mutation can push out of range. */
  static final int MARK_TOKEN = 1739184620;
  static final JsonNodeFactory F = JsonNodeFactory.instance;
  static final ObjectMapper COMPACT = new ObjectMapper();
  static final ObjectMapper PRETTY = new ObjectMapper().enable(SerializationFeature.INDENT_OUTPUT);

  /** What a test body was written from, and the request the parser must make of it. */
  record Written(String path, byte[] body, InferenceRequest expected) {
    @Override
    public String toString() {
      return path + " " + new String(body, java.nio.charset.StandardCharsets.UTF_8);
    }
  }

  /** One edit of a body: replace, insert or delete a byte at a relative position, or truncate. */
  record Mutation(int kind, double at, byte value) {
    byte[] apply(byte[] b) {
      int i = Math.min(b.length, (int) (at * b.length));
      return switch (kind) {
        case 0 -> {
          if (b.length == 0) {
            yield b;
          }
          byte[] c = b.clone();
          c[Math.min(i, b.length - 1)] = value;
          yield c;
        }
        case 1 -> {
          byte[] c = new byte[b.length + 1];
          System.arraycopy(b, 0, c, 0, i);
          c[i] = value;
          System.arraycopy(b, i, c, i + 1, b.length - i);
          yield c;
        }
        case 2 -> {
          if (i == b.length) {
            yield b;
          }
          byte[] c = new byte[b.length - 1];
          System.arraycopy(b, 0, c, 0, i);
          System.arraycopy(b, i + 1, c, i, b.length - i - 1);
          yield c;
        }
        default -> Arrays.copyOf(b, i);
      };
    }
  }

  @Property(tries = 3000)
  void arbitraryBytesGiveARequestOrOneBoundedMessage(@ForAll @Size(max = 200) byte[] body,
      @ForAll boolean chat) {
    check(PARSER.parse(chat ? "/v1/chat/completions" : "/v1/completions", Map.of(), body), body);
  }

  @Property(tries = 3000)
  void mutatedBodiesNeverQuoteTheirText(@ForAll("written") Written w,
      @ForAll @Size(min = 1, max = 6) List<@From("mutations") Mutation> mutations) {
    byte[] body = w.body();
    for (Mutation m : mutations) {
      body = m.apply(body);
    }
    Result<InferenceRequest> r = PARSER.parse(w.path(), Map.of("x-session-id", MARK), body);
    check(r, body);
    // some mutations (inside a string, a digit for a digit) leave the body valid: both
    // outcomes must occur, else one half of check() was never exercised
    Statistics.collect(r.isOk() ? "accepted" : "rejected");
    Statistics.coverage(c -> {
      c.check("accepted").count(n -> n > 0);
      c.check("rejected").count(n -> n > 0);
    });
    if (!r.isOk()) {
      String message = r.errors().get(0);
      // halves of the markers, so that a quote of a cut or mutated token is caught as well
      for (String part : List.of(MARK.substring(0, 6), MARK.substring(6), "173918", "184620")) {
        assertThat(message).doesNotContain(part);
      }
    }
  }

  @Property(tries = 1000)
  void validBodiesParseToTheRequestTheyWereWrittenFrom(@ForAll("written") Written w) {
    Result<InferenceRequest> r = PARSER.parse(w.path(), Map.of(), w.body());
    assertThat(r.errors()).isEmpty();
    InferenceRequest actual = r.value();
    InferenceRequest expected = w.expected();
    assertThat(actual.kind()).isEqualTo(expected.kind());
    assertThat(actual.model()).isEqualTo(expected.model());
    assertThat(actual.prompt()).isEqualTo(expected.prompt());
    assertThat(actual.tokenIds()).isEqualTo(expected.tokenIds());
    assertThat(actual.messages()).isEqualTo(expected.messages());
    assertThat(actual.maxTokens()).isEqualTo(expected.maxTokens());
    assertThat(actual.stream()).isEqualTo(expected.stream());
    assertThat(actual.cacheSalt()).isEqualTo(expected.cacheSalt());
  }

  /** A value or exactly one message of bounded length; a value only for strict UTF-8 JSON. */
  static void check(Result<InferenceRequest> r, byte[] body) {
    if (r.isOk()) {
      JsonNode tree = OpenAiRequestParserTest.strictTree(body);
      assertThat(tree).as("accepted a body that is not strict UTF-8 JSON").isNotNull();
      assertThat(r.value().model()).isEqualTo(tree.get("model").textValue());
    } else {
      assertThat(r.errors()).singleElement().satisfies(m -> assertThat(m)
          .matches("(request body |field |fields ).*").hasSizeLessThan(200));
    }
  }

  @Provide
  Arbitrary<Mutation> mutations() {
    return Combinators.combine(Arbitraries.integers().between(0, 3),
        Arbitraries.doubles().between(0, 1), Arbitraries.bytes()).as(Mutation::new);
  }

  /** Text without lone surrogates (a JSON writer cannot encode those), with the marker inside. */
  static Arbitrary<String> text() {
    Arbitrary<String> any = Arbitraries.strings().withCharRange('\u0000', '\uD7FF')
        .withCharRange('\uE000', '\uFFFF').ofMaxLength(20);
    Arbitrary<String> emoji = Arbitraries.of("\uD83D\uDE00", "\uD834\uDD1E", "");
    return Combinators.combine(any, emoji, any).as((a, e, b) -> a + e + MARK + b);
  }

  @Provide
  Arbitrary<Written> written() {
    Arbitrary<String> model = Arbitraries.strings().alpha().numeric().withChars("-./:")
        .ofMinLength(1).ofMaxLength(12);
    Arbitrary<Integer> form = Arbitraries.integers().between(0, 2);
    Arbitrary<String> prompt = text();
    Arbitrary<List<Integer>> tokens = Arbitraries.integers().between(0, Integer.MAX_VALUE)
        .list().ofMaxSize(8);
    Arbitrary<List<ChatMessage>> messages = Combinators.combine(
        Arbitraries.of("system", "user", "assistant", "tool"), text())
        .as(ChatMessage::new).list().ofMinSize(1).ofMaxSize(4);
    Arbitrary<Integer> maxTokens = Arbitraries.integers().between(-1, Integer.MAX_VALUE);
    Arbitrary<Integer> flags = Arbitraries.integers().between(0, 15);
    Arbitrary<Long> seed = Arbitraries.longs();
    return Combinators.combine(model, form, prompt, tokens, messages, maxTokens, flags, seed)
        .as(OpenAiRequestParserPropertyTest::write);
  }

  /**
   * Writes a body in one of three forms (text prompt, token IDs, chat) with optional fields, an
   * unknown field, chat content sometimes split into text parts, in a shuffled field order, and
   * compact or indented; returns it with the request it stands for.
   */
  static Written write(String model, int form, String prompt, List<Integer> tokenList,
      List<ChatMessage> messages, int maxTokens, int flags, long seed) {
    java.util.Random rnd = new java.util.Random(seed);
    InferenceRequest.Builder b = InferenceRequest.builder().model(model);
    List<Map.Entry<String, JsonNode>> fields = new ArrayList<>();
    fields.add(Map.entry("model", F.textNode(model)));
    String path;
    if (form == 0) {
      path = "/v1/completions";
      b.prompt(prompt);
      fields.add(Map.entry("prompt", rnd.nextBoolean() ? F.textNode(prompt) : F.arrayNode().add(prompt)));
    } else if (form == 1) {
      path = "/v1/completions";
      int[] ids = new int[tokenList.size() + 1];
      ArrayNode arr = F.arrayNode();
      for (int i = 0; i < tokenList.size(); i++) {
        ids[i] = tokenList.get(i);
        arr.add(ids[i]);
      }
      ids[ids.length - 1] = MARK_TOKEN;
      arr.add(MARK_TOKEN);
      b.tokenIds(ids);
      fields.add(Map.entry("prompt", arr));
    } else {
      path = "/v1/chat/completions";
      List<ChatMessage> expected = new ArrayList<>();
      ArrayNode arr = F.arrayNode();
      for (ChatMessage m : messages) {
        ObjectNode o = F.objectNode().put("role", m.role());
        if (rnd.nextBoolean() && !m.content().isEmpty()) {
          // the text as two parts: the parser joins text parts with a newline, as vLLM does
          int cut = rnd.nextInt(m.content().length());
          if (Character.isLowSurrogate(m.content().charAt(cut))) {
            cut--;
          }
          String head = m.content().substring(0, Math.max(cut, 0));
          String tail = m.content().substring(Math.max(cut, 0));
          ArrayNode parts = o.putArray("content");
          parts.addObject().put("type", "text").put("text", head);
          parts.addObject().put("text", tail).put("type", "text");
          // (an empty head adds no newline: vLLM joins the texts that are not empty), and keeps
          // them one by one, for templates that iterate over a message's parts
          expected.add(new ChatMessage(m.role(), head.isEmpty() ? tail : head + "\n" + tail,
              List.of(ChatMessage.Part.text(head), ChatMessage.Part.text(tail))));
        } else {
          o.put("content", m.content());
          expected.add(m);
        }
        arr.add(o);
      }
      b.messages(expected);
      fields.add(Map.entry("messages", arr));
    }
    if (maxTokens >= 0) {
      b.maxTokens(maxTokens);
      fields.add(Map.entry((flags & 1) == 0 ? "max_tokens" : "max_completion_tokens", F.numberNode(maxTokens)));
    }
    if ((flags & 2) != 0) {
      b.stream(true);
      fields.add(Map.entry("stream", F.booleanNode(true)));
    }
    if ((flags & 4) != 0) {
      b.cacheSalt("salt-" + MARK);
      fields.add(Map.entry("cache_salt", F.textNode("salt-" + MARK)));
    }
    if ((flags & 8) != 0) {
      fields.add(Map.entry("logit_bias", F.objectNode().put(MARK, 1.5).set("n", F.arrayNode().add(MARK))));
    }
    Collections.shuffle(fields, rnd);
    ObjectNode root = F.objectNode();
    fields.forEach(e -> root.set(e.getKey(), e.getValue()));
    byte[] body;
    try {
      body = (rnd.nextBoolean() ? PRETTY : COMPACT).writeValueAsBytes(root);
    } catch (com.fasterxml.jackson.core.JsonProcessingException e) {
      throw new IllegalStateException(e);
    }
    return new Written(path, body, b.requestId("r").build());
  }
}
