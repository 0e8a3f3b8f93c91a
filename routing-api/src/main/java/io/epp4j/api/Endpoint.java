package io.epp4j.api;

import java.util.Map;
import java.util.Objects;

/**
 * One model-server replica that can serve inference requests, identified by {@code host:port}.
 * Labels carry placement facts such as the prefill/decode role ({@value #ROLE_LABEL}). An id
 * or host holding a control character (C0, DEL, C1, U+2028, U+2029) is refused with an
 * {@link IllegalArgumentException} naming the field: the id goes into headers and log lines.
 *
 * @param id     {@code host:port}, the identity used everywhere (metrics, decisions, headers)
 * @param host   IP address or host name
 * @param port   TCP port, 1..65535
 * @param labels immutable labels, e.g. {@code llm-d.ai/role=decode}
 */
public record Endpoint(String id, String host, int port, Map<String, String> labels) {

  /** The label that tells the role of an endpoint in prefill/decode disaggregation. */
  public static final String ROLE_LABEL = "llm-d.ai/role";

  /**
   * The values of {@value #ROLE_LABEL} llm-d defines and the role filters read: {@code prefill},
   * {@code decode}, {@code both}, {@code prefill-decode}, {@code encode}, {@code encode-prefill}
   * and {@code encode-prefill-decode}.
   */
  public static final java.util.Set<String> ROLES = java.util.Set.of("prefill", "decode", "both",
      "prefill-decode", "encode", "encode-prefill", "encode-prefill-decode");

  public Endpoint {
    Objects.requireNonNull(id, "id");
    Objects.requireNonNull(host, "host");
    if (host.isEmpty()) {
      throw new IllegalArgumentException("endpoint host must not be empty");
    }
    if (port < 1 || port > 65535) {
      throw new IllegalArgumentException("endpoint port must be in 1..65535, got " + port);
    }
    // the id goes into headers (the destination header, the session token), log lines and
    // metric attributes, the host into URLs: a control character (a line break, NUL, DEL) in
    // either is never part of an address, and a proxy refuses the header that would carry it
    refuseControlCharacters("host", host);
    refuseControlCharacters("id", id);
    labels = Map.copyOf(labels);
  }

  private static void refuseControlCharacters(String field, String text) {
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      if (Character.isISOControl(c) || c == '\u2028' || c == '\u2029') {
        throw new IllegalArgumentException("endpoint " + field + " holds a control character (U+"
            + String.format(java.util.Locale.ROOT, "%04X", (int) c) + ") at index " + i
            + "; an address never does");
      }
    }
  }

  /** An endpoint without labels; see {@link #of(String, int, Map)}. */
  public static Endpoint of(String host, int port) {
    return of(host, port, Map.of());
  }

  /**
   * An endpoint with labels. An IPv6 host may be given with or without its brackets (as
   * {@link java.net.URI#getHost()} gives it); the record's {@link #host()} is the bare address
   * and the id brackets it.
   */
  public static Endpoint of(String host, int port, Map<String, String> labels) {
    if (host.length() > 2 && host.charAt(0) == '[' && host.charAt(host.length() - 1) == ']') {
      host = host.substring(1, host.length() - 1);
    }
    String id = host.indexOf(':') >= 0 ? "[" + host + "]:" + port : host + ":" + port;
    return new Endpoint(id, host, port, labels);
  }

  /**
   * Parses {@code host:port}; an IPv6 address must be in brackets ({@code [fd00::1]:8000}), as
   * without them its last group could not be told from a port.
   *
   * @throws IllegalArgumentException naming the text when it is not {@code host:port} with a
   *     port of 1..65535 in decimal digits
   */
  public static Endpoint parse(String hostPort) {
    return parse(hostPort, Map.of());
  }

  /**
   * Parses {@code host:port}, optionally followed by {@code =} and items separated by {@code ;},
   * the form gateways take endpoint lists in: an item without {@code =} is the role, one of
   * {@link #ROLES}, which becomes the {@value #ROLE_LABEL} label (for prefill/decode
   * disaggregation: {@code 10.0.0.1:8000=prefill}); an item {@code name=value} is a label (for
   * the label plugins: {@code 10.0.0.1:8000=decode;topology.kubernetes.io/zone=a}).
   *
   * @throws IllegalArgumentException naming the text when the address is not {@code host:port}
   *     (see {@link #parse(String)}), the role is not one of {@link #ROLES}, two roles are given,
   *     a label is given twice, or an item is empty or has an empty name or value
   */
  public static Endpoint parseWithRole(String spec) {
    Objects.requireNonNull(spec, "spec");
    int eq = spec.indexOf('=');
    if (eq < 0) {
      return parse(spec);
    }
    Map<String, String> labels = new java.util.LinkedHashMap<>();
    String role = null;
    String[] items = spec.substring(eq + 1).split(";", -1);
    for (String item : items) {
      if (items.length > 1 && item.isBlank()) {
        // "=decode;" or "=;zone=a": reported as an empty item, not as a role
        throw new IllegalArgumentException("endpoint has an empty item between ';' (a ';' too"
            + " many?) in '" + spec + "'");
      }
      int at = item.indexOf('=');
      if (at < 0) {
        String r = item.strip();
        if (role != null) {
          throw new IllegalArgumentException("endpoint has two roles, '" + role + "' and '" + r
              + "', in '" + spec + "'");
        }
        role = r;
        continue;
      }
      String name = item.substring(0, at).strip();
      String value = item.substring(at + 1).strip();
      if (name.isEmpty() || value.isEmpty()) {
        throw new IllegalArgumentException("endpoint label '" + item.strip() + "' needs a name"
            + " and a value (name=value) in '" + spec + "'");
      }
      String before = labels.put(name, value);
      if (before != null) {
        throw new IllegalArgumentException("endpoint gives label '" + name + "' twice, '"
            + before + "' and '" + value + "', in '" + spec + "'");
      }
    }
    if (role == null) {
      role = labels.get(ROLE_LABEL);
    } else if (labels.containsKey(ROLE_LABEL) && !labels.get(ROLE_LABEL).equals(role)) {
      throw new IllegalArgumentException("endpoint has two roles, '" + role + "' and '"
          + labels.get(ROLE_LABEL) + "', in '" + spec + "'");
    }
    if (role != null) {
      if (!ROLES.contains(role)) {
        throw new IllegalArgumentException("endpoint role must be one of "
            + new java.util.TreeSet<>(ROLES) + ", got '" + role + "' in '" + spec + "'");
      }
      labels.put(ROLE_LABEL, role);
    }
    return parse(spec.substring(0, eq).strip(), labels);
  }

  /** Parses {@code host:port} (see {@link #parse(String)}) and attaches labels. */
  public static Endpoint parse(String hostPort, Map<String, String> labels) {
    Objects.requireNonNull(hostPort, "hostPort");
    int colon = hostPort.lastIndexOf(':');
    if (colon <= 0 || colon == hostPort.length() - 1) {
      throw new IllegalArgumentException("endpoint must be host:port, got '" + hostPort + "'");
    }
    String host = hostPort.substring(0, colon);
    if (host.startsWith("[")) {
      host = host.substring(1, host.endsWith("]") ? host.length() - 1 : 1);
      if (host.isEmpty() || host.indexOf('[') >= 0 || host.indexOf(']') >= 0) {
        throw new IllegalArgumentException(
            "endpoint must be host:port or [IPv6 address]:port, got '" + hostPort + "'");
      }
    } else if (host.indexOf(':') >= 0 || host.indexOf('[') >= 0 || host.indexOf(']') >= 0) {
      throw new IllegalArgumentException(
          "endpoint must be host:port with an IPv6 address in brackets, got '" + hostPort + "'");
    }
    String digits = hostPort.substring(colon + 1);
    int port = 0;
    for (int i = 0; i < digits.length() && port <= 65535; i++) {
      char c = digits.charAt(i);
      if (c < '0' || c > '9') {
        throw new IllegalArgumentException("endpoint port is not a number in '" + hostPort + "'");
      }
      port = port * 10 + (c - '0');
    }
    if (port < 1 || port > 65535) {
      throw new IllegalArgumentException(
          "endpoint port must be in 1..65535 in '" + hostPort + "'");
    }
    return of(host, port, labels);
  }

  /** The value of a label, or {@code null}. */
  public @org.jspecify.annotations.Nullable String label(String name) {
    return labels.get(name);
  }

  @Override
  public String toString() {
    return id;
  }
}
