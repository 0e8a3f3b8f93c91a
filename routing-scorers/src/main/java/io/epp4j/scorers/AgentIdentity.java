package io.epp4j.scorers;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.CycleState;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.RequestPreparer;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * {@code agent-identity}: llm-d's agent session resolver. Publishes the first non-empty value
 * among {@code additionalSessionHeaders} and the session headers coding agents send
 * ({@code x-claude-code-session-id}, {@code x-session-affinity}, {@code session-id},
 * {@code session_id}) as the request attribute {@code agent-identity/}, which
 * {@code session-affinity-scorer} and {@code -filter} read with a {@code sessionIdConfig} source
 * {@code {attribute: agent-identity}}. Upstream also derives its flow-control fairness id from
 * it; epp4j queues nothing, so the attribute is all it does here.
 */
final class AgentIdentity implements RequestPreparer {
  /** The attribute's name: upstream's key has no producer part. */
  static final String ATTRIBUTE = "agent-identity/";
  static final List<String> DEFAULT_HEADERS = List.of("x-claude-code-session-id",
      "x-session-affinity", "session-id", "session_id");

  private final String[] headers;

  AgentIdentity(List<String> additional) {
    List<String> all = new ArrayList<>();
    for (String h : additional) {
      all.add(h.trim().toLowerCase(Locale.ROOT));
    }
    all.addAll(DEFAULT_HEADERS);
    this.headers = all.toArray(new String[0]);
  }

  @Override
  public void prepare(InferenceRequest request, CycleState state,
      java.util.List<io.epp4j.api.Candidate> candidates) {
    for (String h : headers) {
      String v = request.header(h);
      if (v != null && !v.isEmpty()) {
        state.putRequestAttribute(ATTRIBUTE, v);
        return;
      }
    }
  }

  @Override
  public String toString() {
    return "agent-identity";
  }

  /** Provides {@code agent-identity}; public only for {@link java.util.ServiceLoader}. */
  public static final class Provider extends AbstractPluginProvider {
    public Provider() {
      super("agent-identity");
    }

    @Override
    protected Plugin build(PluginContext c, Parameters p) {
      List<String> extra = p.getStringList("additionalSessionHeaders", List.of());
      List<String> names = new ArrayList<>();
      for (String h : extra) {
        if (h.isBlank()) {
          p.notice("additionalSessionHeaders", "has an empty header name, which matches no"
              + " header (as in llm-d)");
        } else {
          names.add(h);
        }
      }
      return new AgentIdentity(names);
    }
  }
}
