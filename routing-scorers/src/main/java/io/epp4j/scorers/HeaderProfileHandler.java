package io.epp4j.scorers;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.CycleState;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.ProfileHandler;
import io.epp4j.api.ProfileRunner;
import io.epp4j.api.Rejection;
import java.util.Locale;
import java.util.Set;
import org.jspecify.annotations.Nullable;

/**
 * {@code header-profile-handler} (llm-d): runs exactly one profile per request, the one a request
 * header names, and makes it primary. For a caller that already knows which stage of a
 * disaggregated pipeline a call is for and asks once per stage.
 *
 * <p>With a single profile configured, that profile runs whatever the header says. Otherwise the
 * header's value, trimmed, names the profile (case-sensitively); a missing or blank header
 * selects {@code defaultProfile}. A name that matches no profile runs nothing: upstream then
 * answers with a generic 429, epp4j with a rejection that says what was wrong (400 for a header
 * naming an unknown profile, 503 when the request has no header and {@code defaultProfile} is
 * not configured, a fault of the configuration rather than of the request).
 */
final class HeaderProfileHandler implements ProfileHandler {
  static final String DEFAULT_HEADER = "epp-profile";
  static final String DEFAULT_PROFILE = "decode";
  /** The longest header value a rejection quotes; the rest is cut. */
  private static final int QUOTED = 64;

  private final String headerName;
  private final String defaultProfile;

  HeaderProfileHandler(String headerName, String defaultProfile) {
    this.headerName = headerName;
    this.defaultProfile = defaultProfile;
  }

  @Override
  public String handle(InferenceRequest request, CycleState state, ProfileRunner runner) {
    Set<String> names = runner.profileNames();
    if (names.size() == 1) {
      String only = names.iterator().next();
      runner.run(only);
      return only;
    }
    @Nullable String raw = request.headers().get(headerName);
    String named = raw == null ? "" : raw.strip();
    String chosen = named.isEmpty() ? defaultProfile : named;
    if (!names.contains(chosen)) {
      state.put(REJECTION, named.isEmpty()
          ? new Rejection(Rejection.Reason.NO_ENDPOINTS, "header-profile-handler: the request"
              + " has no '" + headerName + "' header and defaultProfile '" + defaultProfile
              + "' is not a configured profile " + names)
          : new Rejection(Rejection.Reason.INVALID_REQUEST, "header-profile-handler: header '"
              + headerName + "' names profile '" + quoted(named)
              + "', which is not a configured profile " + names));
      return chosen;
    }
    runner.run(chosen);
    return chosen;
  }

  private static String quoted(String value) {
    return value.length() <= QUOTED ? value : value.substring(0, QUOTED) + "...";
  }

  @Override
  public String toString() {
    return "header-profile-handler(" + headerName + ", default " + defaultProfile + ")";
  }

  /** Provides {@code header-profile-handler}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("header-profile-handler");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      // as upstream: both trimmed, an empty value takes the default; header names are compared
      // in lower case (the request's are lower-cased), profile names as written
      String header = text(p, "headerName").toLowerCase(Locale.ROOT);
      if (header.isEmpty()) {
        header = DEFAULT_HEADER;
      } else if (header.chars().anyMatch(Character::isWhitespace)) {
        p.error("headerName", "must be a header name, without whitespace, got '" + header + "'");
      }
      String profile = text(p, "defaultProfile");
      return new HeaderProfileHandler(header, profile.isEmpty() ? DEFAULT_PROFILE : profile);
    }

    private static String text(Parameters p, String name) {
      @Nullable String v = p.getString(name, null);
      return v == null ? "" : v.strip();
    }
  }
}
