package io.epp4j.scorers;

import com.github.benmanes.caffeine.cache.Cache;
import com.github.benmanes.caffeine.cache.Caffeine;
import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.HintListener;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.PoolListener;
import io.epp4j.api.RequestListener;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Scorer;
import io.epp4j.api.Ticker;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Base64;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.jspecify.annotations.Nullable;

/**
 * {@code session-affinity-scorer}: 1.0 for the endpoint a session is bound to, 0 elsewhere.
 *
 * <p>Two sources, checked in order: (1) a header that names the endpoint itself (by default
 * {@code x-session-token}, base64 of {@code host:port}; plain {@code host:port} is accepted too;
 * llm-d writes base64 of the pod's {@code namespace/name} there, which names no endpoint), and,
 * when the header is absent or names none of the candidates, (2) a server-side binding from the
 * session key to the endpoint the last request of that session went to, kept for
 * {@code ttlSeconds} after its last use. The session key comes from {@code sessionKeyFrom}
 * (default the request's session key). Bindings to an endpoint that left
 * the pool are dropped, including one made by a route that read the pool before the removal and
 * finished after it; a route to an endpoint the pool has not announced yet binds nothing.
 */
final class SessionAffinityScorer implements Scorer, RequestListener, PoolListener,
    HintListener {
  private final HashKeySource keySource;
  private final @Nullable String endpointHeader;
  private final Cache<String, String> bindings;
  private final long maxSessions;
  /** Endpoints in the pool, as announced through {@link PoolListener}. */
  private final Set<String> members = ConcurrentHashMap.newKeySet();

  SessionAffinityScorer(HashKeySource keySource, @Nullable String endpointHeader, Duration ttl,
      long maxSessions, Ticker ticker) {
    this(keySource, endpointHeader, ttl, null, maxSessions, ticker);
  }

  /**
   * @param maxAge when set, a binding ends this long after it was made, however busy the session
   *     (a cookie's {@code Max-Age}); routing the session to the same endpoint again does not
   *     renew it, moving it does
   */
  SessionAffinityScorer(HashKeySource keySource, @Nullable String endpointHeader, Duration ttl,
      @Nullable Duration maxAge, long maxSessions, Ticker ticker) {
    this.keySource = keySource;
    this.endpointHeader = endpointHeader;
    // the bound is kept by trimToBound, least recently used first: Caffeine's maximumSize
    // (W-TinyLFU) evicted the bindings of new sessions while idle frequent ones stayed
    this.maxSessions = maxSessions;
    Caffeine<Object, Object> b = Caffeine.newBuilder()
        .expireAfterAccess(ttl)
        .ticker(ticker::nanos)
        .executor(Runnable::run);
    if (maxAge != null) {
      b.expireAfterWrite(maxAge);
    }
    this.bindings = b.build();
  }

  @Override
  public void score(InferenceRequest request, CycleState state, List<Candidate> candidates,
      double[] scores) {
    // the header counts only when it names a candidate: an opaque session token (which the
    // request parser also takes as the session key) may decode as base64 to no endpoint at all
    if (endpointHeader != null
        && mark(decodeEndpoint(request.header(endpointHeader)), candidates, scores)) {
      return;
    }
    String key = keySource.key(request);
    if (key != null) {
      mark(bindings.getIfPresent(bounded(key)), candidates, scores);
    }
  }

  /** Scores {@code target} 1.0 if it is among the candidates; whether it was. */
  private static boolean mark(@Nullable String target, List<Candidate> candidates,
      double[] scores) {
    if (target == null) {
      return false;
    }
    for (int i = 0, n = candidates.size(); i < n; i++) {
      if (candidates.get(i).id().equals(target)) {
        scores[i] = 1.0;
        return true;
      }
    }
    return false;
  }

  static @Nullable String decodeEndpoint(@Nullable String value) {
    if (value == null || value.isEmpty()) {
      return null;
    }
    if (value.indexOf(':') > 0) {
      return value;
    }
    try {
      return new String(Base64.getDecoder().decode(value), StandardCharsets.UTF_8);
    } catch (IllegalArgumentException e) {
      return null;
    }
  }

  @Override
  public void afterRouting(InferenceRequest request, CycleState state, RoutingDecision decision) {
    String raw = keySource.key(request);
    if (raw == null) {
      return;
    }
    String key = bounded(raw);
    String id = decision.primary().id();
    // written only when the session moves: a rewrite would restart maxAge
    if (!id.equals(bindings.asMap().get(key))) {
      bindings.put(key, id);
      trimToBound();
    }
    // A removal takes the id out of the members before it sweeps the bindings. If the id is
    // still a member here, that sweep starts after the put and removes it; if not, the sweep
    // may have run already, so the binding is undone here.
    if (!members.contains(id)) {
      bindings.asMap().remove(key, id);
    }
  }

  /** The gateway forwards the request to a fallback: the session is bound there if it was bound to {@code from}. */
  @Override
  public void onFallback(InferenceRequest request, Endpoint from, Endpoint to) {
    String raw = keySource.key(request);
    if (raw == null || !members.contains(to.id())) {
      return;
    }
    String key = bounded(raw);
    if (bindings.asMap().replace(key, from.id(), to.id()) && !members.contains(to.id())) {
      bindings.asMap().remove(key, to.id()); // removed meanwhile, as in afterRouting
    }
  }

  /**
   * Another router bound a session to {@code endpointId}: bound here too, when this scorer keys
   * sessions by the request's session key (another key source names keys the hint does not
   * carry) and the endpoint is in the pool.
   */
  @Override
  public void onRemoteSession(String remoteKey, String endpointId, long nowNanos) {
    if (keySource.kind != HashKeySource.Kind.SESSION || !members.contains(endpointId)) {
      return;
    }
    String sessionKey = bounded(remoteKey);
    // as in afterRouting: written only when the session moves (a peer sends this hint for every
    // request it routes, and a rewrite would restart maxAge); reading it counts as a use
    if (!endpointId.equals(bindings.asMap().get(sessionKey))) {
      bindings.put(sessionKey, endpointId);
      trimToBound();
    }
    // the same race with a removal as in afterRouting, undone the same way
    if (!members.contains(endpointId)) {
      bindings.asMap().remove(sessionKey, endpointId);
    }
  }

  /** The key a binding is held under (see {@link SessionKeys}). */
  private static String bounded(String key) {
    return SessionKeys.bounded(key);
  }

  /** Drops the least recently used bindings beyond {@code maxSessions}. */
  private void trimToBound() {
    long excess = bindings.estimatedSize() - maxSessions;
    if (excess <= 0) {
      return;
    }
    bindings.policy().expireAfterAccess().ifPresent(byAccess -> {
      for (String key : byAccess.oldest((int) Math.min(excess, 1024)).keySet()) {
        bindings.invalidate(key);
      }
    });
  }

  @Override
  public void onEndpointAdded(Endpoint endpoint) {
    members.add(endpoint.id());
  }

  @Override
  public void onEndpointRemoved(Endpoint endpoint) {
    String id = endpoint.id();
    members.remove(id);
    bindings.asMap().values().removeIf(id::equals);
  }

  /** Characters of every session key the bindings hold; for tests. */
  long storedKeyChars() {
    long n = 0;
    for (String k : bindings.asMap().keySet()) {
      n += k.length();
    }
    return n;
  }

  /** The endpoint id a session is bound to, or {@code null}; for tests. */
  @Nullable String binding(String sessionKey) {
    return bindings.getIfPresent(bounded(sessionKey));
  }

  @Override
  public String toString() {
    return "session-affinity-scorer";
  }

  /** Provides {@code session-affinity-scorer}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("session-affinity-scorer");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      HashKeySource key = HashKeySource.parse(p, "sessionKeyFrom", "session");
      String header = p.getString("endpointHeader", "x-session-token");
      long ttl = p.getLong("ttlSeconds", 300);
      if (ttl < 1) {
        p.error("ttlSeconds", "must be >= 1, got " + ttl);
        ttl = 300;
      }
      long max = p.getLong("maxSessions", 100_000);
      if (max < 1) {
        p.error("maxSessions", "must be >= 1, got " + max);
        max = 100_000;
      }
      Duration maxAge = null;
      if (p.has("maxAge")) {
        // a cookie's Max-Age is in seconds; a duration with a unit is accepted too
        maxAge = p.raw("maxAge") instanceof Number
            ? Duration.ofSeconds(p.getLong("maxAge", 0))
            : p.getDuration("maxAge", Duration.ZERO);
        if (maxAge.isZero() || maxAge.isNegative()) {
          p.error("maxAge", "must be > 0 (seconds, or a duration such as '30m'), got "
              + p.raw("maxAge"));
          maxAge = null;
        }
      }
      return new SessionAffinityScorer(key, header == null || header.isBlank() ? null
          : header.trim().toLowerCase(java.util.Locale.ROOT), Duration.ofSeconds(ttl), maxAge,
          max, c.ticker());
    }
  }
}
