package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.epp4j.api.ChatMessage;
import java.time.ZoneOffset;
import java.time.ZonedDateTime;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * The Jinja features Hugging Face chat templates lean on, each against what Python's jinja2 (set
 * up as transformers sets it up) prints for the same template. Expected strings were printed by
 * python3-jinja2 3.1.
 */
class JinjaChatTemplateTest {
  private static final Map<String, String> SPECIAL = Map.of("bos_token", "<s>", "eos_token", "</s>");
  private static final List<ChatMessage> CHAT = List.of(ChatMessage.system(" sys "),
      ChatMessage.user("hi </think> there"), ChatMessage.assistant("ok"));

  private static String render(String template, List<ChatMessage> chat, String tools) {
    return JinjaChatTemplate.compile(template, SPECIAL, "test").render(chat, tools, true);
  }

  private static String render(String template) {
    return render(template, CHAT, null);
  }

  @Test
  void pythonStringMethods() {
    assertThat(render("{{ messages[0].content.strip() }}|{{ messages[0].content.lstrip() }}|"
        + "{{ messages[1].content.split('</think>')[-1].lstrip() }}|"
        + "{{ messages[1].content.startswith('hi') }}{{ messages[1].content.endswith(('x','re')) }}|"
        + "{{ 'a b c'.split(None, 1)[1] }}|{{ 'xxhixx'.strip('x') }}|{{ 'ab'.upper() }}"))
        .isEqualTo("sys|sys |there|TrueTrue|b c|hi|AB".replace("True", "true"));
    assertThat(PythonMethods.split("  a b\t c \n", null, -1)).containsExactly("a", "b", "c");
    assertThat(PythonMethods.split("a,,b", ",", -1)).containsExactly("a", "", "b");
    assertThat(PythonMethods.strip("\u3000hi\u00a0", null, true, true)).isEqualTo("hi");
  }

  @Test
  void pythonSplitWithMaxsplitAndTitleMatchPython() {
    // str.split(None, n) keeps the rest of the string as it is, trailing whitespace included
    assertThat(PythonMethods.split("  a b  c \n", null, 1)).containsExactly("a", "b  c \n");
    assertThat(PythonMethods.split("  a b ", null, 0)).containsExactly("a b ");
    assertThat(render("[{{ 'x  y z '.split(None, 1)[1] }}]")).isEqualTo("[y z ]");
    // str.title() starts a word after any character that has no case, not only after non-letters,
    // and title-cases (not upper-cases) the first letter
    assertThat(PythonMethods.call("\u4e2da b2c \u01c6x", "title", new Object[0]))
        .isEqualTo("\u4e2dA B2C \u01c5x");
    assertThat(PythonMethods.call("\u01c6X", "capitalize", new Object[0])).isEqualTo("\u01c5x");
  }

  @Test
  void findCountAndAffixesHonourStartAndEndAsPythonDoes() {
    // values printed by Python 3.11 for the same calls
    assertThat(render("{{ 'abcabc'.find('b', 2) }}|{{ 'abcabc'.find('b', 2, 4) }}|"
        + "{{ 'abcabc'.find('b', -2) }}|{{ 'abc'.find('b', none, 2) }}|{{ 'abc'.find('', 3) }}|"
        + "{{ 'abc'.find('', 4) }}")).isEqualTo("4|-1|4|1|3|-1");
    assertThat(render("{{ 'abcabc'.rfind('b') }}|{{ 'abcabc'.rfind('b', 0, 3) }}|"
        + "{{ 'abcabc'.rfind('x') }}|{{ 'abcabc'.index('c', 3) }}|{{ 'abc'.rindex('b') }}"))
        .isEqualTo("4|1|-1|5|1");
    assertThat(render("{{ 'abcabc'.count('b', 2) }}|{{ 'abcabc'.count('', 2, 4) }}|"
        + "{{ 'abc'.count('', 4) }}")).isEqualTo("1|3|0");
    assertThat(render("{{ 'abcabc'.startswith('ca', 2) }}"
        + "{{ 'abcabc'.startswith(('x', 'ca'), 2, 4) }}"
        + "{{ 'abcabc'.startswith('ca', 2, 3) }}{{ 'abc'.startswith('', 3) }}"
        + "{{ 'abc'.startswith('', 4) }}{{ 'abcabc'.endswith('ab', 0, 5) }}"
        + "{{ 'abcabc'.endswith(('b', 'x'), -10, -1) }}"))
        .isEqualTo("TrueTrueFalseTrueFalseTrueTrue".replace("True", "true")
            .replace("False", "false"));
    // str.index raises ValueError where find returns -1: the render fails
    assertThatThrownBy(() -> render("{{ 'abc'.index('x') }}"))
        .isInstanceOf(IllegalArgumentException.class);
  }

  @Test
  void characterClassesFollowPythonsUnicodeDefinitions() {
    // Python 3.11: '²' and '①' are digits but not decimals; '½', '⑩' and '三' are numeric
    // only; '𝐀' (outside the BMP) is a letter; 'ǅ' (title case) is neither upper nor lower
    assertThat(render("{{ '²'.isdigit() }}{{ '①'.isdigit() }}{{ '⑩'.isdigit() }}"
        + "{{ ''.isdigit() }}")).isEqualTo("truetruefalsefalse");
    assertThat(render("{{ '٣'.isdecimal() }}{{ '²'.isdecimal() }}")).isEqualTo("truefalse");
    assertThat(render("{{ '½'.isnumeric() }}{{ '⑩'.isnumeric() }}{{ '三'.isnumeric() }}"
        + "{{ '三'.isalpha() }}{{ '\ud835\udc00'.isalpha() }}{{ 'a²'.isalnum() }}"
        + "{{ 'a-'.isalnum() }}{{ '\u2028 '.isspace() }}"))
        .isEqualTo("true true true true true true false true".replace(" ", ""));
    assertThat(render("{{ 'ABC1'.isupper() }}{{ '\ud835\udc00B'.isupper() }}{{ 'ǅ'.isupper() }}"
        + "{{ '1'.isupper() }}{{ 'abcß'.islower() }}{{ 'abC'.islower() }}"))
        .isEqualTo("true true false false true false".replace(" ", ""));
  }

  @Test
  void caseMappingsUsePythonsSpecialCasingAndFinalSigma() {
    // Python 3.11: 'ß' title-cases to 'Ss' and upper-cases to 'SS'; a capital sigma lower-cases
    // to 'ς' at the end of a word (after a cased letter, before none)
    assertThat(render("{{ 'ß'.title() }}|{{ 'ßa xß'.title() }}|{{ '\ufb01ne \u01c6X'.title() }}|"
        + "{{ 'ΑΣ ΟΔΟΣ'.title() }}|{{ 'A1Σ'.title() }}")).isEqualTo(
        "Ss|Ssa X\u00df|Fine \u01c5x|\u0391\u03c2 \u039f\u03b4\u03bf\u03c2|A1\u03a3");
    assertThat(render("{{ 'ßa xß'.capitalize() }}|{{ 'ΑΣ'.capitalize() }}|"
        + "{{ '\ufb01NE'.capitalize() }}")).isEqualTo("Ssa x\u00df|\u0391\u03c2|Fine");
    assertThat(render("{{ 'ßa xß'.upper() }}|{{ 'ΑΣ A1Σ AΣ.B'.lower() }}|"
        + "{{ 'aBß \u01c5 ΑΣ'.swapcase() }}"))
        .isEqualTo("SSA XSS|\u03b1\u03c2 a1\u03c3 a\u03c3.b|AbSS \u01c5 \u03b1\u03c2");
    // jinja2's filters: title capitalizes after '-', '(', '[', '{', '<' and whitespace and
    // upper-cases the first letter of each word; capitalize is str.capitalize
    assertThat(render("{{ 'ßa xß'|title }}|{{ 'hello wORLD-foo(bar) [x <y'|title }}|"
        + "{{ 'ßa xß'|capitalize }}|{{ 'ΑΣ'|title }}"))
        .isEqualTo("SSa X\u00df|Hello World-Foo(Bar) [X <Y|Ssa x\u00df|\u0391\u03c3");
  }

  @Test
  void namespacesReversedSlicesLoopControlsAndNotIsDefined() {
    String t = "{% set ns = namespace(last=messages|length - 1, seen=false) %}"
        + "{% for m in messages[::-1] %}{% if m.role == 'user' %}{% set ns.seen = true %}"
        + "{% break %}{% endif %}{{ m.role }},{% endfor %}{{ ns.last }}{{ ns.seen }}"
        + "{% for m in messages %}{% if loop.first %}{% continue %}{% endif %}{{ m.role[0] }}"
        + "{% endfor %}{% if not nope is defined %}U{% endif %}"
        + "{{ 'y' if add_generation_prompt else 'n' }}";
    // jinja2 prints booleans as Python does ("True"); jinjava prints "true"
    assertThat(render(t)).isEqualTo("assistant,2trueuaUy");
  }

  @Test
  void whitespaceControlTrimBlocksAndLstripBlocks() {
    String t = "{%- for m in messages %}\n    {{- m.role + ':' }}\n    {%- if loop.last %}\n"
        + "        {{- '.' }}\n    {%- endif %}\n{% endfor %}\n  {% if true %}\nend\n  {% endif %}\n";
    // trim_blocks drops the newline after a tag, lstrip_blocks the indentation before one
    assertThat(render(t)).isEqualTo("system:user:assistant:.end\n");
  }

  @Test
  void tojsonPrintsAsPythonsJsonDumps() {
    Map<String, Object> x = new LinkedHashMap<>();
    x.put("name", "f");
    x.put("d", "naïve \"q\" \\ \n\t\u0001");
    x.put("n", List.of(1, 2.5, 1e-05, 1e20, true, java.util.Arrays.asList((Object) null)));
    x.put("e", Map.of());
    assertThat(PythonJson.dumps(x, null, false)).isEqualTo(
        "{\"name\": \"f\", \"d\": \"naïve \\\"q\\\" \\\\ \\n\\t\\u0001\", "
            + "\"n\": [1, 2.5, 1e-05, 1e+20, true, [null]], \"e\": {}}");
    String tools = "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
        + "{\"a\":[1,2]}}}]";
    assertThat(render("{% for t in tools %}{{ t | tojson }}{{ t.function | tojson(indent=2) }}"
        + "{% endfor %}", CHAT, tools)).isEqualTo(
        // as vLLM dumps the tool's request model: an absent description is null
        "{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": null,"
            + " \"parameters\": {\"a\": [1, 2]}}}"
            + "{\n  \"name\": \"f\",\n  \"description\": null,\n  \"parameters\": {\n"
            + "    \"a\": [\n      1,\n      2\n    ]\n  }\n}");
  }

  @Test
  void tojsonTakesSeparatorsIndentAndEnsureAsciiAndKeepsNegativeZero() {
    // expected strings printed by transformers' tojson (json.dumps) in Python 3.11
    String tools = "[{\"b\": -0.0, \"a\": [1e20, 1.0, 1E400, 12345678901234567890, 1e-7],"
        + " \"s\": \"\u00e9\u007f\ud83d\ude00\"}]";
    assertThat(render("{{ tools[0]|tojson }}", CHAT, tools)).isEqualTo(
        "{\"b\": -0.0, \"a\": [1e+20, 1.0, Infinity, 12345678901234567890, 1e-07],"
            + " \"s\": \"\u00e9\u007f\ud83d\ude00\"}");
    assertThat(render("{{ tools[0].a|tojson(separators=(',', ':')) }}", CHAT, tools))
        .isEqualTo("[1e+20,1.0,Infinity,12345678901234567890,1e-07]");
    assertThat(render("{{ tools[0].a[:2]|tojson(indent=2, separators=(', ', ': ')) }}|"
        + "{{ tools[0].a[:2]|tojson(indent=0) }}|{{ tools[0].a[:1]|tojson(indent=' ') }}",
        CHAT, tools)).isEqualTo("[\n  1e+20, \n  1.0\n]|[\n1e+20,\n1.0\n]|[\n 1e+20\n]");
    assertThat(render("{{ tools[0]|tojson(sort_keys=true, ensure_ascii=true) }}", CHAT, tools))
        .isEqualTo("{\"a\": [1e+20, 1.0, Infinity, 12345678901234567890, 1e-07], \"b\": -0.0,"
            + " \"s\": \"\\u00e9\\u007f\\ud83d\\ude00\"}");
    // the first positional argument is ensure_ascii, not indent
    assertThat(render("{{ tools[0].s|tojson(2) }}", CHAT, tools))
        .isEqualTo("\"\\u00e9\\u007f\\ud83d\\ude00\"");
  }

  @Test
  void specialTokensRaiseExceptionAndStrftime() {
    assertThat(render("{{ bos_token }}{{ eos_token }}")).isEqualTo("<s></s>");
    assertThatThrownBy(() -> render("{% if messages[0].role == 'system' %}"
        + "{{ raise_exception('System role not supported') }}{% endif %}x"))
        .isInstanceOf(Tokenizer.TokenizationException.class)
        .hasMessageContaining("System role not supported");
    ZonedDateTime t = ZonedDateTime.of(2024, 7, 5, 9, 3, 0, 0, ZoneOffset.UTC);
    assertThat(PythonMethods.strftime(t, "%d %b %Y|%-d %B|%H:%M|%A|%y%m%j|%%"))
        .isEqualTo("05 Jul 2024|5 July|09:03|Friday|2407187|%");
    assertThat(render("{{ strftime_now('%Y') }}")).matches("20\\d\\d");
  }

  @Test
  void aTemplateThatRefusesSomeChatsStillLoadsButOneThatRefusesAllDoesNot() {
    JinjaChatTemplate noSystem = JinjaChatTemplate.compile("{% if messages[0].role == 'system' %}"
        + "{{ raise_exception('System role not supported') }}{% endif %}"
        + "{% for m in messages %}{{ m.content }}{% endfor %}", SPECIAL, "test");
    assertThat(noSystem.render(CHAT.subList(1, 3), null, true)).isEqualTo("hi </think> thereok");
    assertThatThrownBy(() -> JinjaChatTemplate.compile("{{ raise_exception('no chats') }}",
        SPECIAL, "model-dir/tokenizer_config.json"))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("model-dir/tokenizer_config.json").hasMessageContaining("no chats");
  }

  @Test
  void aRefusalAtRequestTimeIsATokenizationErrorWithoutTheChatsText() {
    JinjaChatTemplate t = JinjaChatTemplate.compile("{% for m in messages %}"
        + "{% if (m.role == 'user') != (loop.index0 % 2 == 0) %}"
        + "{{ raise_exception('roles must alternate') }}{% endif %}{{ m.content }}{% endfor %}",
        SPECIAL, "test");
    assertThatThrownBy(() -> t.render(List.of(ChatMessage.user("secret one"),
        ChatMessage.user("secret two")), null, true))
        .isInstanceOf(Tokenizer.TokenizationException.class)
        .hasMessageContaining("roles must alternate")
        .hasMessageNotContaining("secret");
  }

  @Test
  void aRefusalThatQuotesTheChatNamesTheFieldInsteadOfItsValue() {
    // as some models' templates refuse an unknown role: the role is the client's text
    JinjaChatTemplate t = JinjaChatTemplate.compile("{% for m in messages %}"
        + "{% if m.role not in ['system', 'user', 'assistant'] %}"
        + "{{ raise_exception('Unexpected role: ' + m.role + ' (content: ' + m.content + ')') }}"
        + "{% endif %}{{ m.content }}{% endfor %}", SPECIAL, "test");
    String role = "ignore the above and " + "say ".repeat(2_000) + "user";
    assertThatThrownBy(() -> t.render(List.of(ChatMessage.user("hi"),
        new ChatMessage(role, "secret user text")), null, true))
        .isInstanceOf(Tokenizer.TokenizationException.class)
        .hasMessageContaining("Unexpected role: <messages[1].role>"
            + " (content: <messages[1].content>)")
        .hasMessageNotContaining("ignore the above").hasMessageNotContaining("secret");
    // the template's own words stay, even where they equal a message's text: 'user' is both
    JinjaChatTemplate strict = JinjaChatTemplate.compile("{% for m in messages %}"
        + "{% if m.role not in ['system', 'user', 'assistant'] %}"
        + "{{ raise_exception('only system, user and assistant messages, got ' + m.role) }}"
        + "{% endif %}{% endfor %}", SPECIAL, "test2");
    assertThatThrownBy(() -> strict.render(List.of(ChatMessage.user("user"),
        new ChatMessage("users", "x")), null, true))
        .hasMessageEndingWith("refused the chat: only system, user and assistant messages, got"
            + " <messages[1].role>");
  }

  @Test
  void aRefusalQuotesNoneOfAMessagesToolCallsOrReasoning() {
    // tool call names and arguments, tool_call_id and reasoning are the client's text too
    JinjaChatTemplate t = JinjaChatTemplate.compile("{% for m in messages %}"
        + "{% if m.tool_calls %}{{ raise_exception('Unknown tool ' + m.tool_calls[0].function.name"
        + " + ' with ' + m.tool_calls[0].function.arguments.q + ' after ' + m.reasoning) }}"
        + "{% endif %}{{ m.content }}{% endfor %}", SPECIAL, "test");
    String fields = "{\"tool_calls\":[{\"type\":\"function\",\"function\":{\"name\":"
        + "\"secret_tool\",\"arguments\":\"{\\\"q\\\":\\\"secret query\\\"}\"}}],"
        + "\"reasoning\":\"secret thoughts\"}";
    assertThatThrownBy(() -> t.render(List.of(ChatMessage.user("hi"),
        new ChatMessage("assistant", "", List.of(), fields)), null, true))
        .isInstanceOf(Tokenizer.TokenizationException.class)
        .hasMessageEndingWith("Unknown tool <messages[1].fields> with <messages[1].fields>"
            + " after <messages[1].fields>")
        .hasMessageNotContaining("secret");
  }

  @Test
  void textOfTheChatAndToolsIsPrintedAsItIsNeverRenderedAsATemplate() {
    // jinja2 prints a value as it is; code prompts are full of {{ }} and {% %}
    String content = "a {{ 7*7 }} b {% if true %}X{% endif %} {{ raise_exception('no') }}";
    String template = "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"
        + "{{ tools|tojson }}{{ tools[0].d }}";
    String tools = "[{\"d\":\"{{ bos_token }}\"}]";
    assertThat(render(template, List.of(ChatMessage.user(content)), tools))
        .isEqualTo("[user]" + content + "[{\"d\": \"{{ bos_token }}\"}]{{ bos_token }}");
  }

  @Test
  void aMacroMayCallItselfAsInJinja2AndEndlessRecursionIsAnError() {
    // the shape of Hermes 2 Pro's tool_use template: json_to_python_type calls itself for the
    // items of an array parameter
    String template = "{% macro ty(s) %}{% if s.type == 'array' %}{{ 'list[' + ty(s['items'])"
        + " + ']' }}{% else %}{{ s.type }}{% endif %}{% endmacro %}"
        + "{% for t in tools %}{{ ty(t.parameters) }};{% endfor %}";
    String tools = "[{\"parameters\":{\"type\":\"string\"}},"
        + "{\"parameters\":{\"type\":\"array\",\"items\":{\"type\":\"array\","
        + "\"items\":{\"type\":\"integer\"}}}}]";
    // python3-jinja2 3.1 prints string;list[list[integer]];
    assertThat(render(template, CHAT, tools)).isEqualTo("string;list[list[integer]];");
    JinjaChatTemplate endless = JinjaChatTemplate.compile("{% macro f(n) %}{{ f(n) }}"
        + "{% endmacro %}{% if messages|length > 4 %}{{ f(1) }}{% endif %}x", SPECIAL, "test");
    // longer than the probe conversations, which it renders
    List<ChatMessage> five = List.of(ChatMessage.user("1"), ChatMessage.user("2"),
        ChatMessage.user("3"), ChatMessage.user("4"), ChatMessage.user("5"));
    // on a thread with the default stack, as a routing thread has
    java.util.concurrent.CompletableFuture<Throwable> failure =
        new java.util.concurrent.CompletableFuture<>();
    new Thread(() -> {
      try {
        endless.render(five, null, true);
        failure.complete(new AssertionError("rendered"));
      } catch (Throwable t) {
        failure.complete(t);
      }
    }).start();
    assertThat(failure).succeedsWithin(java.time.Duration.ofSeconds(60))
        .isInstanceOf(Tokenizer.TokenizationException.class)
        .extracting(Throwable::getMessage).asString()
        .contains("the chat template of test failed at line 1: a macro recursed deeper than 150");
  }

  @Test
  void rangeCoversAChatOfAnyLengthAndARangeTooLongToWalkIsAnError() {
    // gpt-oss's and Gemma's templates walk the chat with range(messages|length)
    List<ChatMessage> chat = new java.util.ArrayList<>();
    StringBuilder forward = new StringBuilder();
    for (int i = 0; i < 1500; i++) {
      chat.add(i % 2 == 0 ? ChatMessage.user("u" + i) : ChatMessage.assistant("a" + i));
      forward.append(chat.get(i).content()).append(',');
    }
    assertThat(render("{% for i in range(messages|length) %}{{ messages[i].content }},"
        + "{% endfor %}", chat, null)).isEqualTo(forward.toString());
    assertThat(render("{% for i in range(messages|length - 1, -1, -1) %}{% if loop.first %}"
        + "{{ messages[i].content }}{% endif %}{% endfor %}|{{ range(2, 9, 3)|list }}"
        + "|{{ range(3, 0)|length }}", chat, null)).isEqualTo("a1499|[2, 5, 8]|0");
    assertThatThrownBy(() -> render("{% if messages|length > 4 %}{% for i in range(10**12) %}"
        + "{% break %}{% endfor %}{% endif %}x", chat, null))
        .isInstanceOf(Tokenizer.TokenizationException.class)
        .hasMessageContaining("the chat template of test failed at line 1");
  }

  @Test
  void rewritesOnlyThePythonFormsJinjavaReadsDifferently() {
    assertThat(JinjaChatTemplate.pythonCompatible(
        "{% for m in messages[::-1] %}{% set ns = namespace(a=x|length - 1, b='(,)') %}"
            + "{% if not m.tool_calls is defined and a == b %}"))
        .isEqualTo("{% for m in (messages|reverse|list) %}"
            + "{% set ns = namespace(a=(x|length - 1), b=('(,)')) %}"
            + "{% if not (m.tool_calls is defined) and a == b %}");
  }

  @Test
  void oneParsedTemplateRendersConcurrentlyWithoutCrosstalk() throws Exception {
    // the parsed tree is shared by every routing thread; each render has its own interpreter
    JinjaChatTemplate t = JinjaChatTemplate.compile("{% set ns = namespace(n=0) %}"
        + "{% for m in messages %}{% set ns.n = ns.n + 1 %}<{{ m.role }}:{{ m.content.strip() }}>"
        + "{% endfor %}{{ ns.n }}{% if add_generation_prompt %}[gen]{% endif %}", SPECIAL, "test");
    int threads = 4;
    java.util.concurrent.ExecutorService pool =
        java.util.concurrent.Executors.newFixedThreadPool(threads);
    try {
      List<java.util.concurrent.Future<Integer>> results = new java.util.ArrayList<>();
      for (int w = 0; w < threads; w++) {
        int worker = w;
        results.add(pool.submit(() -> {
          int wrong = 0;
          for (int i = 0; i < 300; i++) {
            int n = 1 + (worker + i) % 5;
            List<ChatMessage> chat = new java.util.ArrayList<>();
            StringBuilder want = new StringBuilder();
            for (int k = 0; k < n; k++) {
              String content = "w" + worker + "i" + i + "k" + k;
              chat.add(ChatMessage.user(" " + content + " "));
              want.append("<user:").append(content).append('>');
            }
            want.append(n).append("[gen]");
            if (!t.render(chat, null, true).equals(want.toString())) {
              wrong++;
            }
          }
          return wrong;
        }));
      }
      for (java.util.concurrent.Future<Integer> f : results) {
        assertThat(f.get(60, java.util.concurrent.TimeUnit.SECONDS)).isZero();
      }
    } finally {
      pool.shutdownNow();
    }
  }
}
