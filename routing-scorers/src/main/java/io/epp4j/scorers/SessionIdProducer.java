package io.epp4j.scorers;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.CycleState;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.RequestPreparer;
import java.util.Locale;
import org.jspecify.annotations.Nullable;

/**
 * {@code session-id-producer}: llm-d's session identifier producer. Reads a request header
 * ({@code headerName}) or one cookie of the {@code cookie} header ({@code cookieName}), trimmed,
 * and publishes it as the request attribute {@code SessionIDDataKey/<this plugin's name>}, which
 * {@code session-affinity-scorer} and {@code -filter} read with a {@code sessionIdConfig} source
 * {@code {attribute: SessionIDDataKey, producer: <name>}}. A request without it gets no
 * attribute.
 */
final class SessionIdProducer implements RequestPreparer {
  /** The data type part of the attribute's name, as upstream names it. */
  static final String DATA_TYPE = "SessionIDDataKey";

  private final String attribute;
  private final @Nullable String header;
  private final @Nullable String cookie;

  SessionIdProducer(String pluginName, @Nullable String header, @Nullable String cookie) {
    this.attribute = DATA_TYPE + "/" + pluginName;
    this.header = header;
    this.cookie = cookie;
  }

  @Override
  public void prepare(InferenceRequest request, CycleState state,
      java.util.List<io.epp4j.api.Candidate> candidates) {
    String v = header != null ? request.header(header)
        : cookieValue(request.header("cookie"), cookie);
    if (v != null) {
      v = v.trim();
      if (!v.isEmpty()) {
        state.putRequestAttribute(attribute, v);
      }
    }
  }

  /** The value of cookie {@code name} in a {@code cookie} header, or null. */
  static @Nullable String cookieValue(@Nullable String header, @Nullable String name) {
    if (header == null || name == null || name.isEmpty()) {
      return null;
    }
    for (String pair : header.split(";")) {
      String t = pair.trim();
      int eq = t.indexOf('=');
      if (eq >= 0 && t.substring(0, eq).equals(name)) {
        return t.substring(eq + 1);
      }
    }
    return null;
  }

  /** The attribute name this producer publishes under; for tests. */
  String attribute() {
    return attribute;
  }

  @Override
  public String toString() {
    return "session-id-producer";
  }

  /** Provides {@code session-id-producer}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("session-id-producer");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      int before = p.errors().size();
      String header = p.getString("headerName", "");
      String cookie = p.getString("cookieName", "");
      header = header == null ? "" : header.trim().toLowerCase(Locale.ROOT);
      cookie = cookie == null ? "" : cookie.trim();
      // a name refused as not a string is reported; it is not also missing
      if (p.errors().size() == before && header.isEmpty() == cookie.isEmpty()) {
        p.error(header.isEmpty() ? "headerName" : "cookieName", header.isEmpty()
            ? "or cookieName must be given (exactly one of the two)"
            : "and headerName are both given; give exactly one of the two");
      }
      return new SessionIdProducer(c.pluginName(), header.isEmpty() ? null : header,
          cookie.isEmpty() ? null : cookie);
    }
  }
}
