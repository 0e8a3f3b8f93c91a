package io.epp4j.sim;

import io.epp4j.api.Endpoint;
import io.epp4j.kvevents.KvEventSubscriber;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ThreadLocalRandom;

/**
 * Emulated vLLM replicas on loopback, for programs and tests that start them in process: what the
 * {@code serve} command starts, behind a small API. Replica {@code i} serves HTTP on
 * {@code httpPort + i} and publishes KV events on {@code kvEventsPort + 2i} (replay on the port
 * after it), with the profile {@code qwen3-1.7b-h100-mps6}. They run as {@code serve} does with
 * {@code --enable-prompt-tokens-details}: usage names the prompt tokens found in the prefix cache
 * ({@code prompt_tokens_details.cached_tokens}), which {@code load}'s hit rate is read from.
 */
public final class EmulatedReplicas implements AutoCloseable {
  private final Serve serve;

  private EmulatedReplicas(Serve serve) {
    this.serve = serve;
  }

  /**
   * Starts {@code replicas} replicas on the given base ports.
   *
   * @param mapEncoding KV events in msgspec's map encoding instead of vLLM's default array one
   * @param speed       emulated seconds per wall second, from 0.001 to 10000
   * @param seed        seed of the filler output tokens
   * @throws IllegalStateException naming a port that is taken (nothing is left running)
   * @throws IllegalArgumentException before anything is started, when {@code replicas} is below
   *     1 or {@code speed} is out of its range, or when the HTTP
   *     ports ({@code httpPort} and the next {@code replicas − 1}) and the KV-event ports (two per
   *     replica from {@code kvEventsPort}) overlap or pass 65535
   */
  public static EmulatedReplicas start(int replicas, int httpPort, int kvEventsPort,
      boolean mapEncoding, double speed, long seed) {
    return start(replicas, httpPort, kvEventsPort, mapEncoding, speed, seed, true);
  }

  /**
   * As above; {@code promptTokensDetails} is {@code serve}'s (and vLLM's)
   * {@code --enable-prompt-tokens-details}, on for the replicas the public methods start.
   */
  static EmulatedReplicas start(int replicas, int httpPort, int kvEventsPort,
      boolean mapEncoding, double speed, long seed, boolean promptTokensDetails) {
    Serve.checkPorts(replicas, httpPort, kvEventsPort, "httpPort", "kvEventsPort");
    return new EmulatedReplicas(new Serve(new Serve.Options(replicas, httpPort, kvEventsPort,
        mapEncoding, speed, HardwareProfile.qwen3H100Mps6(), seed, List.of(), null,
        Serve.DEFAULT_KEEP_ALIVE_SECONDS, Serve.DEFAULT_MAX_LORAS,
        KvEventPublisher.DEFAULT_REPLAY_BUFFER_BYTES, BodyBudget.DEFAULT_BYTES, null, false,
        promptTokensDetails, false)));
  }

  /**
   * Starts replicas on base ports picked at random below Linux's ephemeral range (HTTP in
   * 20000–24999, KV events in 25000–32767, where client sockets do not take them by chance),
   * trying again when one is taken.
   */
  public static EmulatedReplicas startOnFreePorts(int replicas, boolean mapEncoding, double speed,
      long seed) {
    return startOnFreePorts(replicas, mapEncoding, speed, seed, true);
  }

  /** As above, with {@code --enable-prompt-tokens-details} as given. */
  static EmulatedReplicas startOnFreePorts(int replicas, boolean mapEncoding, double speed,
      long seed, boolean promptTokensDetails) {
    IllegalStateException last = null;
    for (int attempt = 0; attempt < 30; attempt++) {
      int http = ThreadLocalRandom.current().nextInt(20_000, 25_000 - replicas);
      int kv = ThreadLocalRandom.current().nextInt(25_000, 32_768 - 2 * replicas);
      try {
        return start(replicas, http, kv, mapEncoding, speed, seed, promptTokensDetails);
      } catch (IllegalStateException e) {
        last = e;
      }
    }
    throw new IllegalStateException("no free ports found for " + replicas + " replicas", last);
  }

  public int size() {
    return serve.options().replicas();
  }

  /** The model name the replicas serve. */
  public String model() {
    return serve.options().profile().model();
  }

  public int httpPort(int i) {
    return serve.options().port() + i;
  }

  public int kvEventsPort(int i) {
    return serve.options().kvEventsPort() + 2 * i;
  }

  /**
   * The replicas as router endpoints, labelled with their KV-event and replay ports
   * ({@link KvEventSubscriber#PORT_LABEL}, {@link KvEventSubscriber#REPLAY_PORT_LABEL}), so that
   * precise mode subscribes to each one's own publisher.
   */
  public List<Endpoint> endpoints() {
    List<Endpoint> out = new ArrayList<>();
    for (int i = 0; i < size(); i++) {
      out.add(Endpoint.of("127.0.0.1", httpPort(i), Map.of(
          KvEventSubscriber.PORT_LABEL, String.valueOf(kvEventsPort(i)),
          KvEventSubscriber.REPLAY_PORT_LABEL, String.valueOf(kvEventsPort(i) + 1))));
    }
    return out;
  }

  /** One line per replica naming its addresses, as {@code serve} prints them. */
  public List<String> describe() {
    return serve.describe();
  }

  /** Whether replica {@code i} has nothing queued or running. */
  public boolean idle(int i) {
    return serve.cluster().idle(i);
  }

  /** Blocks in replica {@code i}'s prefix cache. */
  public int cachedBlocks(int i) {
    return serve.cluster().cachedBlocks(i);
  }

  /**
   * Stops replica {@code i}'s HTTP server as a crash would: its port refuses connections and its
   * requests in flight break off.
   */
  public void kill(int i) {
    serve.kill(i);
  }

  /** New requests get 503, requests in flight end with an error, then every port is freed. */
  @Override
  public void close() {
    serve.close();
  }
}
