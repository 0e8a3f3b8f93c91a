package io.epp4j.scorers;

import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import org.jspecify.annotations.Nullable;

/**
 * Where a sticky picker or session scorer takes its key from, as Istio's {@code consistentHash}
 * offers it: {@code session} (the request's session key), {@code header:<name>},
 * {@code cookie:<name>}, {@code query:<name>} (from the {@code :path} or
 * {@code x-envoy-original-path} header) or {@code source-ip} (the {@code :source-ip}
 * pseudo-header a gateway sets from the connection, else the first entry of
 * {@code x-forwarded-for}).
 */
final class HashKeySource {
  enum Kind { SESSION, HEADER, COOKIE, QUERY, SOURCE_IP }

  /**
   * The pseudo-header in which a gateway hands the router the client's address as its connection
   * shows it (the Spring Cloud Gateway filter does, and the Envoy ext_proc server from Envoy's
   * {@code source.address} attribute); {@code source-ip} keys read it first.
   */
  static final String SOURCE_IP_HEADER = ":source-ip";

  final Kind kind;
  final String name;

  private HashKeySource(Kind kind, String name) {
    this.kind = kind;
    this.name = name;
  }

  static final HashKeySource SESSION = new HashKeySource(Kind.SESSION, "");

  /** Parses the parameter; records an error naming it when the value is not understood. */
  static HashKeySource parse(Parameters p, String param, String defaultValue) {
    String v = p.getString(param, defaultValue);
    if (v == null) {
      v = defaultValue;
    }
    HashKeySource s = parse(v.trim());
    if (s == null) {
      p.error(param, "must be session, header:<name>, cookie:<name>, query:<name> or source-ip,"
          + " got '" + v + "'" + nameRule(v.trim()));
      return SESSION;
    }
    return s;
  }

  /**
   * What a name after {@code header:}, {@code cookie:} or {@code query:} may hold, for the error
   * about one that breaks it; empty for any other value.
   */
  private static String nameRule(String v) {
    int colon = v.indexOf(':');
    String prefix = colon < 0 ? "" : v.substring(0, colon);
    String name = colon < 0 ? "" : v.substring(colon + 1).trim();
    if (name.isEmpty()) {
      return "";
    }
    switch (prefix) {
      case "header":
        return ": a header name is letters, digits and !#$%&'*+-.^_`|~ (after a ':' for a"
            + " pseudo-header), so no request would carry '" + name + "'";
      case "cookie":
        return ": a cookie name is letters, digits and !#$%&'*+-.^_`|~, so no cookie would be"
            + " named '" + name + "'";
      case "query":
        return ": a query parameter's name holds no '&', '=' or '#', so no query would name '"
            + name + "'";
      default:
        return "";
    }
  }

  static @Nullable HashKeySource parse(String v) {
    if (v.equals("session")) {
      return SESSION;
    }
    if (v.equals("source-ip")) {
      return new HashKeySource(Kind.SOURCE_IP, "");
    }
    int colon = v.indexOf(':');
    if (colon <= 0 || colon == v.length() - 1) {
      return null;
    }
    String prefix = v.substring(0, colon);
    String name = v.substring(colon + 1).trim();
    if (name.isEmpty()) {
      return null;
    }
    // a name no request can carry (a blank inside, a separator) would leave every request
    // without a key, each then hashed at random: refused instead
    switch (prefix) {
      case "header":
        return isToken(name, name.startsWith(":") ? 1 : 0)
            ? new HashKeySource(Kind.HEADER, name.toLowerCase(java.util.Locale.ROOT)) : null;
      case "cookie":
        return isToken(name, 0) ? new HashKeySource(Kind.COOKIE, name) : null;
      case "query":
        return name.indexOf('&') < 0 && name.indexOf('=') < 0 && name.indexOf('#') < 0
            ? new HashKeySource(Kind.QUERY, name) : null;
      default:
        return null;
    }
  }

  /** Whether {@code s} from {@code from} on is an HTTP token (RFC 9110), at least one char. */
  private static boolean isToken(String s, int from) {
    if (s.length() <= from) {
      return false;
    }
    for (int i = from; i < s.length(); i++) {
      char c = s.charAt(i);
      boolean ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
          || "!#$%&'*+-.^_`|~".indexOf(c) >= 0;
      if (!ok) {
        return false;
      }
    }
    return true;
  }

  /** The key of a request, or {@code null} when the request does not carry one. */
  @Nullable String key(InferenceRequest r) {
    switch (kind) {
      case SESSION:
        // an endpoint token is no session's key: see SessionKeys.sessionKey
        return SessionKeys.sessionKey(r);
      case HEADER:
        return nonEmpty(r.header(name));
      case COOKIE:
        return cookie(r.header("cookie"), name);
      case QUERY: {
        String path = r.header(":path");
        if (path == null) {
          path = r.header("x-envoy-original-path");
        }
        return query(path, name);
      }
      case SOURCE_IP: {
        // the client's address as the gateway saw the connection (a pseudo-header no client can
        // send); without it, the first x-forwarded-for entry, which whoever sent the request
        // wrote unless a proxy in front replaced the header
        String peer = nonEmpty(r.header(SOURCE_IP_HEADER));
        if (peer != null) {
          return peer;
        }
        String xff = r.header("x-forwarded-for");
        if (xff == null) {
          return null;
        }
        int comma = xff.indexOf(',');
        return nonEmpty((comma < 0 ? xff : xff.substring(0, comma)).trim());
      }
      default:
        return null;
    }
  }

  private static @Nullable String nonEmpty(@Nullable String s) {
    return s == null || s.isEmpty() ? null : s;
  }

  static @Nullable String cookie(@Nullable String header, String name) {
    if (header == null) {
      return null;
    }
    int i = 0;
    int n = header.length();
    while (i < n) {
      int end = header.indexOf(';', i);
      if (end < 0) {
        end = n;
      }
      int eq = header.indexOf('=', i);
      if (eq > 0 && eq < end && header.substring(i, eq).trim().equals(name)) {
        String v = header.substring(eq + 1, end).trim();
        if (v.length() >= 2 && v.startsWith("\"") && v.endsWith("\"")) {
          v = v.substring(1, v.length() - 1);
        }
        return nonEmpty(v);
      }
      i = end + 1;
    }
    return null;
  }

  static @Nullable String query(@Nullable String path, String name) {
    if (path == null) {
      return null;
    }
    int q = path.indexOf('?');
    if (q < 0) {
      return null;
    }
    int end = path.indexOf('#', q);
    String qs = path.substring(q + 1, end < 0 ? path.length() : end);
    for (String part : qs.split("&")) {
      int eq = part.indexOf('=');
      String k = eq < 0 ? part : part.substring(0, eq);
      if (k.equals(name)) {
        return nonEmpty(eq < 0 ? "" : part.substring(eq + 1));
      }
    }
    return null;
  }

  @Override
  public String toString() {
    switch (kind) {
      case SESSION:
        return "session";
      case SOURCE_IP:
        return "source-ip";
      default:
        return kind.name().toLowerCase(java.util.Locale.ROOT) + ":" + name;
    }
  }
}
