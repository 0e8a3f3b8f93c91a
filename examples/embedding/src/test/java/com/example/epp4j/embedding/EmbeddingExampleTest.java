package com.example.epp4j.embedding;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.core.Router;
import org.junit.jupiter.api.Test;

class EmbeddingExampleTest {
  static final String SYSTEM = "You are a support agent for ACME. ".repeat(40);

  static String body(String question) {
    return "{\"model\":\"qwen3\",\"messages\":[{\"role\":\"system\",\"content\":\"" + SYSTEM
        + "\"},{\"role\":\"user\",\"content\":\"" + question + "\"}]}";
  }

  @Test
  void requestsSharingASystemPromptFollowEachOther() {
    try (Router router = EmbeddingExample.newRouter()) {
      String first = EmbeddingExample.routeOnce(router, body("Where is my order?"));
      assertThat(first).isIn("10.0.0.1:8000", "10.0.0.2:8000");
      for (int i = 0; i < 10; i++) {
        assertThat(EmbeddingExample.routeOnce(router, body("Question " + i)))
            .as("the prefix-cache scorer sends a shared system prompt back to where it was cached")
            .isEqualTo(first);
      }
    }
  }

  @Test
  void malformedBodyBecomesA400() {
    try (Router router = EmbeddingExample.newRouter()) {
      assertThat(EmbeddingExample.routeOnce(router, "{\"model\":")).startsWith("400 ");
    }
  }

  @Test
  void mainPrintsBothRoutesAndTheRejection() {
    java.io.PrintStream old = System.out;
    java.io.ByteArrayOutputStream buf = new java.io.ByteArrayOutputStream();
    System.setOut(new java.io.PrintStream(buf, true, java.nio.charset.StandardCharsets.UTF_8));
    try {
      EmbeddingExample.main(new String[0]);
    } finally {
      System.setOut(old);
    }
    String out = buf.toString(java.nio.charset.StandardCharsets.UTF_8);
    assertThat(out).contains("first request  -> 10.0.0.").contains("bad body       -> 400 ");
  }
}
