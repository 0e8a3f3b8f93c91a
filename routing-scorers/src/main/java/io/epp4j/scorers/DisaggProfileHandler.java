package io.epp4j.scorers;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.ProfileHandler;
import io.epp4j.api.ProfileResult;
import io.epp4j.api.ProfileRunner;
import java.util.Optional;
import org.jspecify.annotations.Nullable;

/**
 * {@code disagg-profile-handler} (llm-d's current P/D handler): runs the {@code decode} profile;
 * when it picked an endpoint, a {@code prefill} profile exists and the decider named in
 * {@code deciders.prefill} says so, runs {@code prefill} too. Decode is primary; the prefill pick
 * is the decision's secondary endpoint, which the gateway sends to the decode server in
 * {@value PdProfileHandler#PREFILLER_HEADER} (see {@link PdProfileHandler#prefillEndpoint}).
 * Without a prefill decider every request stays on its decode endpoint, as upstream.
 *
 * <p>Refused: profile names other than {@code decode} / {@code prefill} (the gateway and the
 * prefix scorer find the prefill pick under that name), and encode disaggregation
 * ({@code deciders.encode}), which epp4j does not do. An {@code encode} profile without a
 * decider never runs, as upstream.
 */
final class DisaggProfileHandler implements ProfileHandler {
  private final @Nullable PrefillDecider decider;

  DisaggProfileHandler(@Nullable PrefillDecider decider) {
    this.decider = decider;
  }

  @Override
  public String handle(InferenceRequest request, CycleState state, ProfileRunner runner) {
    String decodeName = PdProfileHandler.DECODE_PROFILE;
    if (!runner.profileNames().contains(decodeName)) {
      return decodeName; // nothing ran: the router rejects the request, as upstream fails it
    }
    ProfileResult decode = runner.run(decodeName);
    Endpoint d = decode.primary();
    if (d != null && decider != null
        && runner.profileNames().contains(PdProfileHandler.PREFILL_PROFILE)
        && decider.disaggregate(request, state, d)) {
      state.put(PdProfileHandler.PEER_ENDPOINT, d);
      runner.run(PdProfileHandler.PREFILL_PROFILE);
    }
    return decodeName;
  }

  @Override
  public @Nullable String checkProfiles(java.util.Set<String> profiles) {
    return profiles.contains(PdProfileHandler.DECODE_PROFILE) ? null
        : "disagg-profile-handler needs a profile named 'decode', got " + profiles;
  }

  @Override
  public String toString() {
    return "disagg-profile-handler(" + decider + ")";
  }

  /** Provides {@code disagg-profile-handler}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("disagg-profile-handler");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      Parameters profiles = p.getNested("profiles");
      Parameters deciders = p.getNested("deciders");
      // as upstream, whose fields are Go strings: an empty one is not set (a chart that renders
      // an unset value gives one), so it takes the default and counts for neither format
      boolean nested = set(profiles, "decode") || set(profiles, "prefill")
          || set(profiles, "encode") || set(deciders, "prefill") || set(deciders, "encode");
      boolean flat = set(p, "decodeProfile") || set(p, "prefillProfile") || set(p, "encodeProfile")
          || set(p, "prefillDeciderPluginName") || set(p, "deciderPluginName")
          || set(p, "encodeDeciderPluginName");
      if (nested && flat) {
        p.error(p.has("profiles") ? "profiles" : "deciders", "cannot be mixed with the former flat"
            + " parameters (decodeProfile, prefillProfile, prefillDeciderPluginName, ...)");
      }
      profileName(p, profiles, "decode", "decodeProfile", PdProfileHandler.DECODE_PROFILE);
      profileName(p, profiles, "prefill", "prefillProfile", PdProfileHandler.PREFILL_PROFILE);
      profileName(p, profiles, "encode", "encodeProfile", "encode");
      // the errors about the decider name the parameter the file gives it under
      String deciderParameter = "deciders";
      String deciderName = orNull(deciders.getString("prefill", null));
      if (deciderName == null) {
        deciderParameter = CommonParameters.alias(p, "prefillDeciderPluginName",
            "deciderPluginName");
        deciderName = orNull(p.getString(deciderParameter, null));
      }
      if (set(deciders, "encode") || set(p, "encodeDeciderPluginName")) {
        deciders.raw("encode");
        p.getString("encodeDeciderPluginName", null);
        p.error(deciders.has("encode") ? "deciders" : "encodeDeciderPluginName",
            "names an encode decider: epp4j does not disaggregate encoding");
      }
      // a nested Parameters keeps its own errors: a value of the wrong type there is reported
      // under the field that holds it
      for (String e : profiles.errors()) {
        p.error("profiles", e.replaceFirst("^parameter ", "field "));
      }
      for (String e : deciders.errors()) {
        p.error("deciders", e.replaceFirst("^parameter ", "field "));
      }
      for (String unread : profiles.unreadNames()) {
        p.error("profiles", "has unknown field '" + unread + "'; expected decode, prefill, encode");
      }
      for (String unread : deciders.unreadNames()) {
        p.error("deciders", "has unknown field '" + unread + "'; expected prefill");
      }
      PrefillDecider decider = deciderName == null ? null
          : decider(c, p, deciderParameter, deciderName);
      return new DisaggProfileHandler(decider);
    }

    /** Whether {@code name} is given with a value other than the empty string. */
    private static boolean set(Parameters p, String name) {
      return p.has(name) && !"".equals(p.raw(name));
    }

    private static @Nullable String orNull(@Nullable String value) {
      return value == null || value.isEmpty() ? null : value;
    }

    /** Only the standard names are accepted (see the class comment); others are refused. */
    private static void profileName(Parameters p, Parameters profiles, String field,
        String flatField, String standard) {
      String given = orNull(profiles.getString(field, null));
      String where = "profiles";
      if (given == null) {
        given = orNull(p.getString(flatField, null));
        where = flatField;
      }
      if (given != null && !given.equals(standard)) {
        p.error(where, "names profile '" + given + "' for " + field + "; epp4j requires the"
            + " profile to be named '" + standard + "' (its gateways read the " + field
            + " pick under that name): rename the profile");
      }
    }
  }

  /** The decider a P/D handler names, or null after recording why not. */
  static @Nullable PrefillDecider decider(PluginContext c, Parameters p, String param,
      String name) {
    Optional<Plugin> plugin = c.plugin(name);
    if (plugin.isEmpty()) {
      p.error(param, CommonParameters.noSuchPlugin(name));
      return null;
    }
    if (!(plugin.get() instanceof PrefillDecider d)) {
      p.error(param, "must name a decider such as prefix-based-pd-decider; '" + name
          + "' is " + plugin.get());
      return null;
    }
    return d;
  }
}
