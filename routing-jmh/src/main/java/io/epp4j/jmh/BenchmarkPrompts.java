package io.epp4j.jmh;

import io.epp4j.api.Endpoint;
import io.epp4j.api.EndpointMetrics;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.core.Router;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.Vector;
import java.util.concurrent.CopyOnWriteArrayList;

/**
 * Shared fixtures: a pool of endpoints with plausible metrics, prompts that share system-prompt
 * prefixes (like agent and RAG traffic), and a warm-up that fills the prefix index.
 */
final class BenchmarkPrompts {
  static final String MODEL = "qwen3-1.7b";
  private static final String ALPHABET = "abcdefghijklmnopqrstuvwxyz     ,.ABCDEFGHIJ0123456789";

  private BenchmarkPrompts() {}

  static List<Endpoint> endpoints(int n) {
    List<Endpoint> eps = new ArrayList<>(n);
    for (int i = 0; i < n; i++) {
      eps.add(Endpoint.of("10." + (i / 250) + "." + (i % 250) + ".1", 8000));
    }
    return eps;
  }

  static void publishMetrics(Router router, SplittableRandom rnd) {
    publishMetrics(router, rnd, SKEWED);
  }

  /** Each endpoint reports its own random queue and KV usage, fixed for the whole run. */
  static final String SKEWED = "skewed";
  /** Every endpoint reports the same queue and KV usage. */
  static final String BALANCED = "balanced";

  /**
   * Metrics for every endpoint. {@link #SKEWED}: random waiting and running requests and KV
   * usage, which never change during the run. Under the EPP default profile the endpoint with
   * the best of them wins every prompt that has no hit anywhere, and since no queue grows there
   * all such prompts pile onto it: at 100 KB their blocks outgrow its share of the prefix index,
   * so the index evicts blocks on every route (churn, the worst case).
   * {@link #BALANCED}: the same figures everywhere (3 waiting, 31 running, usage 0.5: about the
   * means of the skewed ones), as load feedback keeps a cluster in its steady state; prompts
   * then stay where they were first sent and routes hit. Both draw the same random numbers, so
   * the prompts built after are the same.
   */
  static void publishMetrics(Router router, SplittableRandom rnd, String metrics) {
    boolean balanced = switch (metrics) {
      case SKEWED -> false;
      case BALANCED -> true;
      default -> throw new IllegalArgumentException("metrics: expected skewed or balanced, got "
          + metrics);
    };
    for (var c : router.endpoints()) {
      int waiting = rnd.nextInt(8);
      int running = rnd.nextInt(64);
      double usage = 0.1 + 0.8 * rnd.nextDouble();
      router.updateMetrics(c.id(), EndpointMetrics.builder()
          .waitingRequests(balanced ? 3 : waiting)
          .runningRequests(balanced ? 31 : running)
          .kvCacheUsage(balanced ? 0.5 : usage)
          .kvCapacityBlocks(40_000)
          .blockSizeTokens(16)
          .build());
    }
  }

  static String text(SplittableRandom rnd, int chars) {
    StringBuilder sb = new StringBuilder(chars);
    for (int i = 0; i < chars; i++) {
      sb.append(ALPHABET.charAt(rnd.nextInt(ALPHABET.length())));
    }
    return sb.toString();
  }

  /**
   * {@code count} prompts of {@code bytes} ASCII characters in {@code families} groups; each
   * prompt is its family's shared prefix (75 %) followed by a unique tail.
   */
  static String[] prompts(SplittableRandom rnd, int count, int families, int bytes) {
    String[] shared = new String[families];
    int prefix = bytes * 3 / 4;
    for (int f = 0; f < families; f++) {
      shared[f] = text(rnd, prefix);
    }
    String[] out = new String[count];
    for (int i = 0; i < count; i++) {
      out[i] = shared[i % families] + text(rnd, bytes - prefix);
    }
    return out;
  }

  /** Token IDs standing for a text prompt: one token per four bytes, as tokenizers average. */
  static int[] tokens(String prompt) {
    byte[] b = prompt.getBytes(StandardCharsets.UTF_8);
    int[] t = new int[b.length / 4];
    ByteBuffer bb = ByteBuffer.wrap(b).order(ByteOrder.LITTLE_ENDIAN);
    for (int i = 0; i < t.length; i++) {
      t[i] = bb.getInt(i * 4) & 0x1FFFF; // vocabulary-sized ids
    }
    return t;
  }

  static byte[] tokenBytes(int[] tokens) {
    ByteBuffer bb = ByteBuffer.allocate(tokens.length * 4).order(ByteOrder.LITTLE_ENDIAN);
    for (int t : tokens) {
      bb.putInt(t);
    }
    return bb.array();
  }

  static InferenceRequest request(String prompt, boolean asTokens, int i) {
    InferenceRequest.Builder b = InferenceRequest.builder().model(MODEL).requestId("r" + i)
        .sessionKey("session-" + (i % 97)).maxTokens(128);
    return asTokens ? b.tokenIds(tokens(prompt)).build() : b.prompt(prompt).build();
  }

  /** Routes and completes each request once so the prefix index holds every family. */
  static void warm(Router router, InferenceRequest[] requests, int rounds) {
    likeAnApplicationJvm();
    for (int r = 0; r < rounds; r++) {
      for (InferenceRequest q : requests) {
        RoutingDecision d = router.route(q);
        d.onComplete(Usage.NONE);
      }
    }
  }

  private static boolean likeAnApplication;
  private static volatile long sink; // keeps the loop's work

  /**
   * Calls the JDK's list wrappers with several list classes, as the libraries of any application
   * do, before the router's code is compiled. A fresh benchmark JVM otherwise sees one receiver
   * class at call sites the whole JVM shares ({@code Collections.unmodifiableList}'s {@code get},
   * for one) and inlines through them, which a gateway's JVM does not: the measurement would
   * flatter code that passes through such sites. Runs once per JVM.
   */
  static synchronized void likeAnApplicationJvm() {
    if (likeAnApplication) {
      return;
    }
    likeAnApplication = true;
    List<List<Integer>> kinds = List.of(new ArrayList<>(List.of(1, 2, 3)),
        new LinkedList<>(List.of(1, 2, 3)), Arrays.asList(1, 2, 3), List.of(1, 2, 3),
        new CopyOnWriteArrayList<>(List.of(1, 2, 3)), new Vector<>(List.of(1, 2, 3)));
    long s = 1;
    for (int r = 0; r < 20_000; r++) {
      for (List<Integer> l : kinds) {
        List<Integer> u = Collections.unmodifiableList(l);
        for (int i = 0; i < u.size(); i++) {
          s += u.get(i);
        }
        for (Integer x : u) {
          s += x;
        }
      }
    }
    sink = s;
  }
}
