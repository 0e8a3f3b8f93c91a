package io.epp4j.scorers;

import com.github.benmanes.caffeine.cache.Cache;
import com.github.benmanes.caffeine.cache.Caffeine;
import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.AttributeKey;
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
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.jspecify.annotations.Nullable;

/**
 * {@code session-affinity-scorer}: 1.0 for the endpoint a session is bound to, 0 elsewhere; the
 * hard form, {@code session-affinity-filter}, is {@link SessionAffinityFilter}.
 *
 * <p>Two sources, checked in order: (1) a header that names the endpoint itself (by default
 * {@code x-session-token}, base64 of {@code host:port}; plain {@code host:port} is accepted too;
 * llm-d writes base64 of the pod's {@code namespace/name} there, which names no endpoint), which
 * the scorer also writes on the answer to the client ({@link RoutingDecision#setResponseHeader})
 * so that a client that sends it back comes back to the same endpoint, and, when the header is
 * absent or names none of the candidates, (2) a server-side binding from the session key to the
 * endpoint the last request of that session went to, kept for {@code ttlSeconds} after its last
 * use. The session key comes from {@code sessionKeyFrom} (default the request's session key).
 * Bindings to an endpoint that left the pool are kept until they expire: they bind nothing while
 * it is away and hold again if it comes back at the same address (see
 * {@link #onEndpointRemoved}); a route to an endpoint that is not in the pool (not announced yet,
 * or gone since the route read the pool) binds nothing.
 *
 * <p>llm-d's parameters select one of its two strategies instead ({@link Mode}): the header
 * alone ({@code encoded_endpoint_header}), or a binding from a session identifier read from
 * headers or request attributes that moves only when its endpoint is no longer a candidate
 * ({@code session_id}).
 */
final class SessionAffinityScorer implements Scorer, RequestListener, PoolListener,
    HintListener {
  /** How sessions are recognised and bound. */
  enum Mode {
    /** epp4j's own: the endpoint header, then a binding that follows the session. */
    EPP4J,
    /** llm-d's {@code encoded_endpoint_header}: the endpoint header only, no binding. */
    ENCODED_ENDPOINT_HEADER,
    /**
     * llm-d's {@code session_id}: a binding from an identifier the client supplies; it moves only
     * when the bound endpoint was not among the candidates, and no header is written.
     */
    SESSION_ID
  }

  /** One place llm-d's {@code session_id} strategy reads the session identifier from. */
  record IdSource(@Nullable String header, @Nullable String attribute) {
    @Nullable String read(InferenceRequest request, @Nullable CycleState state) {
      String v;
      if (header != null) {
        v = request.header(header);
      } else {
        v = state == null || attribute == null ? null : state.requestAttribute(attribute);
      }
      if (v == null) {
        return null;
      }
      v = v.trim();
      return v.isEmpty() ? null : v;
    }
  }

  private final Mode mode;
  private final HashKeySource keySource;
  private final List<IdSource> idSources;
  private final @Nullable String endpointHeader;
  private final @Nullable String profileName;
  private final Cache<String, String> bindings;
  private final long maxSessions;
  /** Endpoints in the pool, as announced through {@link PoolListener}. */
  private final Set<String> members = ConcurrentHashMap.newKeySet();
  /** The cycle-state key under which this instance records whether its bound endpoint showed. */
  private final AttributeKey<Boolean> boundPresent =
      AttributeKey.of("session-affinity bound endpoint among the candidates", Boolean.class);

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
    this(Mode.EPP4J, keySource, List.of(), endpointHeader, null, ttl, maxAge, maxSessions,
        ticker);
  }

  SessionAffinityScorer(Mode mode, HashKeySource keySource, List<IdSource> idSources,
      @Nullable String endpointHeader, @Nullable String profileName, Duration ttl,
      @Nullable Duration maxAge, long maxSessions, Ticker ticker) {
    this.mode = mode;
    this.keySource = keySource;
    this.idSources = List.copyOf(idSources);
    this.endpointHeader = mode == Mode.SESSION_ID ? null : endpointHeader;
    this.profileName = profileName;
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

  /**
   * The id of the candidate the request's session is pinned to, or null when it has none among
   * {@code candidates}; for the filter and the scorer alike.
   */
  @Nullable String target(InferenceRequest request, CycleState state,
      List<Candidate> candidates) {
    // the header counts only when it names a candidate: an opaque session token (which the
    // request parser also takes as the session key) may decode as base64 to no endpoint at all
    if (endpointHeader != null) {
      String named = decodeEndpoint(request.header(endpointHeader));
      if (indexOf(named, candidates) >= 0) {
        return named;
      }
    }
    switch (mode) {
      case ENCODED_ENDPOINT_HEADER:
        return null;
      case SESSION_ID: {
        String id = sessionId(request, state);
        if (id == null) {
          return null;
        }
        // read without counting as a use: llm-d renews a binding only when a request is routed
        // to its endpoint (afterRouting)
        String bound = bindings.policy().getIfPresentQuietly(bounded(id));
        if (bound == null) {
          return null;
        }
        boolean present = indexOf(bound, candidates) >= 0;
        state.put(boundPresent, present);
        return present ? bound : null;
      }
      default: {
        String key = sessionKey(request);
        if (key == null) {
          return null;
        }
        String bound = bindings.getIfPresent(bounded(key));
        return indexOf(bound, candidates) >= 0 ? bound : null;
      }
    }
  }

  private @Nullable String sessionId(InferenceRequest request, @Nullable CycleState state) {
    for (int i = 0, n = idSources.size(); i < n; i++) {
      String v = idSources.get(i).read(request, state);
      if (v != null) {
        return v;
      }
    }
    return null;
  }

  @Override
  public void score(InferenceRequest request, CycleState state, List<Candidate> candidates,
      double[] scores) {
    int i = indexOf(target(request, state, candidates), candidates);
    if (i >= 0) {
      scores[i] = 1.0;
    }
  }

  /** The position of candidate {@code id} among {@code candidates}, or -1. */
  static int indexOf(@Nullable String id, List<Candidate> candidates) {
    if (id == null) {
      return -1;
    }
    for (int i = 0, n = candidates.size(); i < n; i++) {
      if (candidates.get(i).id().equals(id)) {
        return i;
      }
    }
    return -1;
  }

  static @Nullable String decodeEndpoint(@Nullable String value) {
    if (value == null || value.isEmpty()) {
      return null;
    }
    if (value.indexOf(':') > 0) {
      return value;
    }
    if (!mayBeEndpointToken(value)) {
      return null; // an opaque token (a UUID, llm-d's long ones): no decoding, no exception
    }
    try {
      return new String(Base64.getDecoder().decode(value), StandardCharsets.UTF_8);
    } catch (IllegalArgumentException e) {
      return null;
    }
  }

  @Override
  public void afterRouting(InferenceRequest request, CycleState state, RoutingDecision decision) {
    if (endpointHeader != null) {
      // the token names the endpoint that serves the request (after a fallback, the fallback)
      // or the pick of the profile this instance pins; nothing when that profile did not run
      String profile = profileName;
      decision.setResponseHeader(endpointHeader, profile == null
          ? d -> encodeEndpoint(d.servedBy().id())
          : d -> {
            String id = profilePick(d, profile);
            return id == null ? null : encodeEndpoint(id);
          });
    }
    switch (mode) {
      case ENCODED_ENDPOINT_HEADER:
        return;
      case SESSION_ID:
        bindSessionId(request, state, decision);
        return;
      default:
        break;
    }
    String raw = sessionKey(request);
    if (raw == null) {
      return;
    }
    String key = bounded(raw);
    String id = decision.primary().id();
    if (!members.contains(id)) {
      // not announced yet, or gone since the route read the pool: the session keeps the
      // binding it had, which may still name this endpoint if it is only briefly away
      return;
    }
    // written only when the session moves: a rewrite would restart maxAge
    if (!id.equals(bindings.asMap().get(key))) {
      bindings.put(key, id);
      trimToBound();
    }
  }

  /**
   * llm-d's {@code session_id} binding: a new session is bound where it was routed, a bound one
   * is renewed when routed to its endpoint again, and moves only when its endpoint was not among
   * the candidates this request was scored against (another scorer outweighing it moves
   * nothing).
   */
  private void bindSessionId(InferenceRequest request, CycleState state,
      RoutingDecision decision) {
    String id = sessionId(request, state);
    String picked = pickedId(decision);
    if (id == null || picked == null || !members.contains(picked)) {
      return;
    }
    String key = bounded(id);
    Map<String, String> map = bindings.asMap();
    // read without counting as a use: only a request routed to the bound endpoint renews the
    // binding (putIfAbsent on a bound session would renew it whichever way the request went)
    String bound = bindings.policy().getIfPresentQuietly(key);
    if (bound == null) {
      bound = map.putIfAbsent(key, picked);
    }
    if (bound == null) {
      trimToBound();
    } else if (bound.equals(picked)) {
      // a use: renews the binding's idle time (a read, which writes nothing: a move another
      // request made meanwhile stays)
      bindings.getIfPresent(key);
    } else if (Boolean.FALSE.equals(state.get(boundPresent))) {
      map.replace(key, bound, picked);
    }
  }

  /** The endpoint this instance pins: its profile's pick, or the primary one. */
  private @Nullable String pickedId(RoutingDecision decision) {
    if (profileName == null) {
      return decision.primary().id();
    }
    return profilePick(decision, profileName);
  }

  /** The first endpoint {@code profile} picked, or null when it did not run or picked none. */
  private static @Nullable String profilePick(RoutingDecision decision, String profile) {
    io.epp4j.api.ProfileResult r = decision.profileResults().get(profile);
    Endpoint e = r == null ? null : r.primary();
    return e == null ? null : e.id();
  }

  /**
   * Whether {@code value} could be a token {@link #encodeEndpoint} wrote: not empty, at most 400
   * characters (an endpoint id is a host and a port), and only base64's characters. Checked
   * before decoding, so that a client's opaque token costs no exception per request.
   */
  static boolean mayBeEndpointToken(String value) {
    int n = value.length();
    if (n == 0 || n > 400) {
      return false;
    }
    for (int i = 0; i < n; i++) {
      char ch = value.charAt(i);
      boolean base64 = ch >= 'A' && ch <= 'Z' || ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9'
          || ch == '+' || ch == '/' || ch == '=';
      if (!base64) {
        return false;
      }
    }
    return true;
  }

  /** The token {@link #decodeEndpoint} reads back: base64 of the endpoint id. */
  static String encodeEndpoint(String endpointId) {
    return Base64.getEncoder().encodeToString(endpointId.getBytes(StandardCharsets.UTF_8));
  }

  /** The gateway forwards the request to a fallback: the session is bound there if it was bound to {@code from}. */
  @Override
  public void onFallback(InferenceRequest request, Endpoint from, Endpoint to) {
    if (mode != Mode.EPP4J) {
      return; // llm-d binds where the request was routed
    }
    String raw = sessionKey(request);
    if (raw == null || !members.contains(to.id())) {
      return;
    }
    bindings.asMap().replace(bounded(raw), from.id(), to.id());
  }

  /**
   * Another router bound a session to {@code endpointId}: bound here too, when this scorer keys
   * sessions by the request's session key (another key source names keys the hint does not
   * carry) and the endpoint is in the pool.
   */
  @Override
  public void onRemoteSession(String remoteKey, String endpointId, long nowNanos) {
    if (mode != Mode.EPP4J || keySource.kind != HashKeySource.Kind.SESSION
        || !members.contains(endpointId) || isEndpointToken(remoteKey)) {
      return;
    }
    String sessionKey = bounded(remoteKey);
    // as in afterRouting: written only when the session moves (a peer sends this hint for every
    // request it routes, and a rewrite would restart maxAge); reading it counts as a use
    if (!endpointId.equals(bindings.asMap().get(sessionKey))) {
      bindings.put(sessionKey, endpointId);
      trimToBound();
    }
  }

  /**
   * The request's session key for epp4j's bindings, or null when it has none or when it is an
   * endpoint token this scorer writes: every client an endpoint served carries that same token,
   * and the request parser takes it as the session key when the client sends no other session
   * header, so bound like one session's key it would pin all of them to wherever the first went
   * once the endpoint left the pool.
   */
  private @Nullable String sessionKey(InferenceRequest request) {
    String key = keySource.key(request);
    return key == null || isEndpointToken(key) ? null : key;
  }

  /**
   * Whether a request's session key is the token {@link #encodeEndpoint} writes (base64 of an
   * endpoint id), when the key is the request's session key and the endpoint header is on.
   */
  private boolean isEndpointToken(String key) {
    return endpointHeader != null && keySource.kind == HashKeySource.Kind.SESSION
        && SessionKeys.isEndpointToken(key);
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

  /**
   * The endpoint stops being bound to. Its bindings stay until they expire ({@code ttlSeconds}
   * unused, {@code maxAge}) or the bound on sessions drops them, like any other: while it is
   * away they name no candidate and bind nothing (a request of such a session is placed by the
   * other scorers and bound where it goes), and if it comes back at the same address (a
   * readiness probe that failed under load, a discovery blip) the sessions that waited return to
   * the cache that holds their history. Memory stays within {@code maxSessions} however many
   * endpoints leave.
   */
  @Override
  public void onEndpointRemoved(Endpoint endpoint) {
    members.remove(endpoint.id());
  }

  /** Bindings held now, after dropping the expired ones; for tests. */
  long boundSessions() {
    bindings.cleanUp();
    return bindings.estimatedSize();
  }

  /** Characters of every session key the bindings hold; for tests. */
  long storedKeyChars() {
    long n = 0;
    for (String k : bindings.asMap().keySet()) {
      n += k.length();
    }
    return n;
  }

  /** The endpoint id a session is bound to, or {@code null}, read without renewing it; tests. */
  @Nullable String binding(String sessionKey) {
    return bindings.policy().getIfPresentQuietly(bounded(sessionKey));
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
      return fromParameters(c, p);
    }
  }

  /** llm-d's parameters; any of them selects llm-d's strategies over epp4j's own. */
  private static final List<String> UPSTREAM_PARAMETERS = List.of("strategy",
      "encodedEndpointHeaderConfig", "sessionIdConfig", "profileName");
  /** epp4j's own parameters that llm-d's strategies replace. */
  private static final List<String> OWN_PARAMETERS = List.of("sessionKeyFrom",
      "endpointHeader", "ttlSeconds", "maxAge");

  /** Builds the scorer (or the filter's core) from either parameter set. */
  static SessionAffinityScorer fromParameters(PluginContext c, Parameters p) {
    long max = p.getLong("maxSessions", 100_000);
    if (max < 1) {
      p.error("maxSessions", "must be >= 1, got " + max);
      max = 100_000;
    }
    for (String upstream : UPSTREAM_PARAMETERS) {
      if (p.has(upstream)) {
        return createUpstream(c, p, max);
      }
    }
    HashKeySource key = HashKeySource.parse(p, "sessionKeyFrom", "session");
    String header = p.getString("endpointHeader", "x-session-token");
    long ttl = p.getLong("ttlSeconds", 300);
    if (ttl < 1) {
      p.error("ttlSeconds", "must be >= 1, got " + ttl);
      ttl = 300;
    }
    Duration maxAge = null;
    if (p.has("maxAge")) {
      maxAge = maxAge(p.raw("maxAge"));
      if (maxAge == null) {
        p.error("maxAge", "must be a whole number of seconds above 0 or a duration above 0 such"
            + " as '90s', '30m' or '1h30m', got '" + p.raw("maxAge") + "'");
      }
    }
    return new SessionAffinityScorer(Mode.EPP4J, key, List.of(), header == null
        || header.isBlank() ? null : header.trim().toLowerCase(Locale.ROOT), null,
        Duration.ofSeconds(ttl), maxAge, max, c.ticker());
  }

  /**
   * {@code maxAge} as given, or null when it is none of its forms: a cookie's Max-Age is a whole
   * number of seconds (written as a number, or in quotes as any number parameter may be), and a
   * duration with a unit is accepted too. Read in one place so that a bad value is one error.
   */
  private static @Nullable Duration maxAge(@Nullable Object raw) {
    Parameters one = Parameters.of(java.util.Map.of("maxAge", raw == null ? "" : raw));
    boolean seconds = raw instanceof Number
        || raw instanceof String s && s.trim().matches("[+-]?[0-9]+");
    Duration d = seconds ? Duration.ofSeconds(one.getLong("maxAge", 0))
        : one.getDuration("maxAge", Duration.ZERO);
    return one.errors().isEmpty() && !d.isZero() && !d.isNegative() ? d : null;
  }

  /** llm-d's {@code strategy} with its configuration blocks and {@code profileName}. */
  private static SessionAffinityScorer createUpstream(PluginContext c, Parameters p, long max) {
    for (String own : OWN_PARAMETERS) {
      if (p.has(own)) {
        p.raw(own);
        p.error(own, "is epp4j's own parameter, which llm-d's strategy, encodedEndpointHeaderConfig,"
            + " sessionIdConfig and profileName replace; give one set");
      }
    }
    String strategy = p.getString("strategy", "encoded_endpoint_header");
    Mode mode;
    if ("encoded_endpoint_header".equals(strategy)) {
      mode = Mode.ENCODED_ENDPOINT_HEADER;
    } else if ("session_id".equals(strategy)) {
      mode = Mode.SESSION_ID;
    } else {
      p.error("strategy", "must be encoded_endpoint_header or session_id, got '" + strategy + "'");
      mode = Mode.ENCODED_ENDPOINT_HEADER;
    }
    String profile = p.getString("profileName", "");
    profile = profile == null || profile.isBlank() ? null : profile.trim();
    // llm-d reads only the block of the chosen strategy; the other is accepted and not used
    String other = mode == Mode.SESSION_ID ? "encodedEndpointHeaderConfig" : "sessionIdConfig";
    if (p.has(other)) {
      p.notice(other, "is not used with strategy " + strategy + ", as in llm-d");
    }
    String header = "x-session-token";
    if (mode == Mode.ENCODED_ENDPOINT_HEADER) {
      Parameters encoded = p.getNested("encodedEndpointHeaderConfig");
      String h = encoded.getString("header", "");
      if (h != null && !h.isBlank()) {
        header = h.trim().toLowerCase(Locale.ROOT);
      }
      nestedErrors(p, "encodedEndpointHeaderConfig", encoded, "header");
    }
    List<IdSource> sources = new java.util.ArrayList<>();
    double ttlSeconds = 300;
    if (mode == Mode.SESSION_ID) {
      Parameters ids = p.getNested("sessionIdConfig");
      Object raw = ids.raw("sources");
      if (raw instanceof List<?> list && !list.isEmpty()) {
        for (int i = 0; i < list.size(); i++) {
          IdSource src = idSource(p, "sessionIdConfig.sources[" + i + "]", list.get(i));
          if (src != null) {
            sources.add(src);
          }
        }
      } else if (raw != null && !(raw instanceof List<?>)) {
        p.error("sessionIdConfig", "field 'sources' must be a list of {header} or {attribute,"
            + " producer} entries, got " + raw);
      }
      if (sources.isEmpty()) {
        sources.add(new IdSource("x-session-id", null));
      }
      // llm-d takes 0 as not set
      ttlSeconds = ids.getDouble("evictionTtlSeconds", 0);
      if (ttlSeconds == 0) {
        ttlSeconds = 300;
      } else if (!(ttlSeconds > 0) || ttlSeconds > 366 * 86_400.0) {
        p.error("sessionIdConfig", "field 'evictionTtlSeconds' must be > 0 and at most a year,"
            + " got " + ids.raw("evictionTtlSeconds"));
        ttlSeconds = 300;
      }
      double sweep = ids.getDouble("evictionSweepSeconds", 0);
      if (sweep < 0) {
        p.error("sessionIdConfig", "field 'evictionSweepSeconds' must be > 0, got " + sweep);
      } else if (ids.has("evictionSweepSeconds")) {
        p.notice("sessionIdConfig", "field 'evictionSweepSeconds': a binding ends"
            + " evictionTtlSeconds after its last use, checked whenever it is read, so no sweep"
            + " is needed (llm-d's sweep lets one live up to a sweep interval longer)");
      }
      nestedErrors(p, "sessionIdConfig", ids, "sources, evictionTtlSeconds, evictionSweepSeconds");
    }
    return new SessionAffinityScorer(mode, HashKeySource.SESSION, sources,
        mode == Mode.SESSION_ID ? null : header, profile,
        Duration.ofNanos((long) (ttlSeconds * 1e9)), null, max, c.ticker());
  }

  /** One entry of {@code sessionIdConfig.sources}: exactly one of header and attribute. */
  private static @Nullable IdSource idSource(Parameters p, String where, @Nullable Object entry) {
    if (!(entry instanceof Map<?, ?> m)) {
      p.error("sessionIdConfig", where + " must be an object with header or attribute, got "
          + entry);
      return null;
    }
    Object header = m.get("header");
    Object attribute = m.get("attribute");
    Object producer = m.get("producer");
    for (Object k : m.keySet()) {
      if (!"header".equals(k) && !"attribute".equals(k) && !"producer".equals(k)) {
        p.error("sessionIdConfig", where + " has unknown field '" + k
            + "'; expected header, attribute, producer");
      }
    }
    // names, as upstream's string fields, which refuse a number or a boolean: read as its text,
    // 'header: 5' loaded a file upstream refuses
    for (String f : new String[] {"header", "attribute", "producer"}) {
      Object v = m.get(f);
      if (v != null && !(v instanceof String)) {
        p.error("sessionIdConfig", where + ": field '" + f + "' must be a string, got "
            + (v instanceof Map ? "an object" : v instanceof List ? "a list" : "'" + v + "'")
            + " (write it in quotes if it is meant as text)");
        return null;
      }
    }
    String h = header == null ? "" : ((String) header).trim();
    String a = attribute == null ? "" : ((String) attribute).trim();
    if (h.isEmpty() == a.isEmpty()) {
      p.error("sessionIdConfig", where + ": exactly one of header or attribute must be set");
      return null;
    }
    if (!h.isEmpty()) {
      if (producer != null) {
        p.error("sessionIdConfig", where + ": producer goes with attribute, not header");
      }
      return new IdSource(h.toLowerCase(Locale.ROOT), null);
    }
    // upstream keys an attribute "dataType/producerName"; no producer is the empty name
    String prod = producer == null ? "" : ((String) producer).trim();
    return new IdSource(null, a + "/" + prod);
  }

  /** Reports a nested block's errors and unknown fields under the block's name. */
  static void nestedErrors(Parameters p, String block, Parameters nested, String expected) {
    for (String e : nested.errors()) {
      p.error(block, e.replaceFirst("^parameter ", "field "));
    }
    for (String unread : nested.unreadNames()) {
      p.error(block, "has unknown field '" + unread + "'; expected " + expected);
    }
  }
}
