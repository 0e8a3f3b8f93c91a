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

  /** The whole chat with the generation prompt. */
  public String render(List<ChatMessage> messages) {
    StringBuilder sb = new StringBuilder();
    for (ChatMessage m : messages) {
      sb.append(renderMessage(m));
    }
    return sb.append(generationPrompt).toString();
  }
}
