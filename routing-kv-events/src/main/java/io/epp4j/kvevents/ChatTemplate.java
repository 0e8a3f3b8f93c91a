package io.epp4j.kvevents;

import io.epp4j.api.ChatMessage;
import java.util.List;
import java.util.Objects;

/**
 * A chat template made of per-message text around the content, as ChatML-style templates are:
 * each message renders independently of the others, which is what lets
 * {@link CachingChatTokenizer} tokenize a dialog one message at a time.
 *
 * @param messagePrefix    text before a message; {@code {role}} is replaced by its role
 * @param messageSuffix    text after a message's content
 * @param generationPrompt text that opens the assistant's reply
 */
public record ChatTemplate(String messagePrefix, String messageSuffix, String generationPrompt) {

  /** ChatML, used by Qwen: {@code <|im_start|>role\ncontent<|im_end|>\n}. */
  public static final ChatTemplate CHATML =
      new ChatTemplate("<|im_start|>{role}\n", "<|im_end|>\n", "<|im_start|>assistant\n");

  public ChatTemplate {
    Objects.requireNonNull(messagePrefix, "messagePrefix");
    Objects.requireNonNull(messageSuffix, "messageSuffix");
    Objects.requireNonNull(generationPrompt, "generationPrompt");
  }

  /** One message as the template renders it. */
  public String renderMessage(ChatMessage m) {
    return messagePrefix.replace("{role}", m.role()) + m.content() + messageSuffix;
  }

  /**
   * The rendering up to the end of the last message's text, as transformers cuts it for
   * {@code continue_final_message}: after the last occurrence of the text without surrounding
   * whitespace (Python's), keeping the text's trailing whitespace when the rendering has the
   * text verbatim. Plain Java, so that per-message caching works without jinjava.
   *
   * @param contentAsParts whether the template was given the messages' parts (the last text
   *     part is then the text continued)
   * @throws Tokenizer.TokenizationException when there is no message or the rendering does not
   *     hold the last one's text
   */
  static String cutAfterFinalMessage(String rendered, List<ChatMessage> messages,
      boolean contentAsParts) {
    if (messages.isEmpty()) {
      throw new Tokenizer.TokenizationException("continue_final_message needs a message");
    }
    ChatMessage finalMessage = messages.get(messages.size() - 1);
    String last = finalMessage.content();
    if (contentAsParts && finalMessage.contentAbsent() && !finalMessage.role().equals("tool")) {
      // the template was given an empty list of parts, in which transformers finds no text
      throw new Tokenizer.TokenizationException("continue_final_message is set but the last"
          + " message has no text to continue");
    }
    if (contentAsParts && !finalMessage.parts().isEmpty()) {
      // a template given the parts: transformers continues the last part that has text
      String text = null;
      for (ChatMessage.Part p : finalMessage.parts()) {
        text = p.isText() ? p.text() : text;
      }
      if (text == null) {
        throw new Tokenizer.TokenizationException("continue_final_message is set but the last"
            + " message has no text to continue");
      }
      last = text;
    }
    int from = 0;
    int to = last.length();
    while (from < to && pythonSpace(last.charAt(from))) {
      from++;
    }
    while (to > from && pythonSpace(last.charAt(to - 1))) {
      to--;
    }
    String stripped = last.substring(from, to);
    int at = rendered.lastIndexOf(stripped);
    if (at < 0) {
      throw new Tokenizer.TokenizationException("continue_final_message is set but the chat"
          + " template's rendering does not hold the last message's text");
    }
    // verbatim (no leading whitespace, trailing kept): up to the end of the whole text
    int end = rendered.startsWith(last, at) ? at + last.length() : at + stripped.length();
    return rendered.substring(0, end);
  }

  /** Python's {@code str.isspace} set, which its {@code strip()} uses. */
  static boolean pythonSpace(int c) {
    return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f) || c == 0x85
        || c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028
        || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
  }

  /** The whole chat with the generation prompt. */
  public String render(List<ChatMessage> messages) {
    StringBuilder sb = new StringBuilder();
    for (ChatMessage m : messages) {
      sb.append(renderMessage(m));
    }
    return sb.append(generationPrompt).toString();
  }
}
