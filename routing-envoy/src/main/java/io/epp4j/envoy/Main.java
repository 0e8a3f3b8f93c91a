package io.epp4j.envoy;

import io.epp4j.api.Endpoint;
import io.epp4j.core.ConfigException;
import io.epp4j.core.MetricsScraper;
import io.epp4j.core.OpenAiRequestParser;
import io.epp4j.core.Router;
import io.epp4j.scorers.Epp4jPreset;
import java.io.IOException;
import java.io.PrintStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.URISyntaxException;
import java.net.UnknownHostException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.format.DateTimeParseException;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.jspecify.annotations.Nullable;

/**
 * The ext_proc server as a program: builds a {@link Router} (and a {@link MetricsScraper}) from
 * the command line and serves it with {@link ExtProcServer} until the process is stopped, then
 * drains. The options carry the names of the Spring Cloud Gateway module's {@code epp4j.*}
 * properties, so both read alike.
 */
public final class Main {
  static final String USAGE = "usage: routing-envoy --endpoints IP:PORT[=ROLE][,...] "
      + "[--port N] [--grpc-health-port N] [--host ADDR] [--config FILE | --config-text YAML | --preset NAME] [--max-body-size SIZE] "
      + "[--max-message-size SIZE] "
      + "[--session-headers LIST] [--in-flight-max-age DURATION] [--scheme http|https] "
      + "[--metrics-enabled true|false] [--metrics-interval DURATION] [--metrics-path PATH] "
      + "[--model-server-metrics-port PORT] "
      + "[--metrics-insecure-skip-verify[=true|false]] [--disable-endpoint-subset-filter[=true|false]] "
      + "[--drain-timeout DURATION] [--secure-serving[=true|false]] [--cert-path DIR] "
      + "[--enable-cert-reload[=true|false]]";

  static final String HELP = """
      routing-envoy: an Envoy ext_proc server that picks the model-server replica of each
      inference request with epp4j (the Gateway API Inference Extension's endpoint picker
      protocol: x-gateway-destination-endpoint header and envoy.lb metadata).

        --endpoints IP:PORT,...     the replicas' IP addresses (IPv6 as [addr]:port; Envoy's
                                    ORIGINAL_DST cluster takes no host names); required. For
                                    prefill/decode disaggregation give each its role:
                                    IP:PORT=prefill, =decode, =both, ...; label llm-d.ai/role;
                                    other labels for the label plugins as ;name=value items:
                                    IP:PORT=decode;topology.kubernetes.io/zone=a
        --port N                    ext_proc and gRPC health port (0: any free one); default
                                    9002 (alias --grpc-port, upstream's name)
        --grpc-health-port N        a port serving only gRPC health, always plaintext, as the
                                    upstream picker's probes expect (0: any free one; the same
                                    as --port: none); default 9003, skipped with a warning when
                                    taken unless given
        --host ADDR                 address to listen on; default every interface
        --config FILE               an EndpointPickerConfig YAML file (alias --config-file);
                                    default the EPP default profile
        --config-text YAML          the same configuration given as text (upstream's flag);
                                    not with --config or --preset
        --preset NAME               a shipped configuration: epp4j; not with --config
        --max-body-size SIZE        larger request bodies get 413 (B, KB, MB, GB: 1024-based);
                                    default 16MB
        --max-message-size SIZE     largest gRPC message taken from Envoy: must hold the largest
                                    BUFFERED answer Envoy buffers, and max-body-size + 1MB;
                                    default 64MB (or max-body-size + 1MB when larger)
        --session-headers LIST      headers carrying the session key, tried in order;
                                    default x-session-id,x-claude-code-session-id,
                                    x-session-affinity,session-id,session_id,x-session-token
        --in-flight-max-age DUR     safety net for requests never finished; default 10m
        --scheme http|https         scheme of the replicas' metrics; default http, or the
                                    config's metrics-data-source scheme (alias
                                    --model-server-metrics-scheme)
        --metrics-enabled BOOL      scrape the replicas' Prometheus metrics; default true
        --metrics-interval DUR      time between two scrapes of a replica; default 200ms
                                    (alias --refresh-metrics-interval)
        --metrics-path PATH         metrics path on each replica; default /metrics, or the
                                    config's metrics-data-source path (alias
                                    --model-server-metrics-path)
        --model-server-metrics-port PORT
                                    read the metrics at this port of each replica's host
                                    instead of the replica's own port (upstream's flag,
                                    deprecated there); default 0: the replica's port
        --metrics-insecure-skip-verify[=BOOL]
                                    with https metrics, take any certificate the replicas
                                    present (self-signed, expired, for another name): still
                                    encrypted, but whoever can intercept a scrape can feed the
                                    router false load figures; for trusted networks only.
                                    Default: the config's metrics-data-source
                                    insecureSkipVerify, else false: the JVM's trust store
                                    and the replica's address are checked (alias
                                    --model-server-metrics-https-insecure-skip-verify, whose
                                    upstream default is true)
        --disable-endpoint-subset-filter[=BOOL]
                                    route among every replica whatever subset the proxy hints
                                    (x-gateway-destination-endpoint-subset), and read no hint;
                                    default false: the hint limits the pick (upstream's flag)
        --drain-timeout DUR         wait for open streams when stopping (0: cancel them at
                                    once); default 30s
        --secure-serving[=BOOL]     serve TLS on --port (not on --grpc-health-port); default
                                    false: plaintext (the upstream picker's default is true)
        --cert-path DIR             with --secure-serving: DIR/tls.crt (PEM certificate chain)
                                    and DIR/tls.key (PEM key: PKCS#8, PKCS#1 or SEC1); without
                                    it a self-signed certificate is made at start
        --enable-cert-reload[=BOOL] read --cert-path's files again when they change; default
                                    false
        --help, -h                  this text

      Durations: 200ms, 30s, 10m, 1h, 2d (a bare number is milliseconds), Go's 1m30s or 1.5s,
      or ISO-8601 (PT30S). A value that begins with a dash and is not a number is given as
      --name=VALUE: a following --x, -h or -x is taken for an option whose value was left out.

      Flags of the upstream endpoint picker: --grpc-port, --config-file,
      --model-server-metrics-path, --model-server-metrics-scheme, --model-server-metrics-port,
      --refresh-metrics-interval and --model-server-metrics-https-insecure-skip-verify are the
      options above; --zap-encoder,
      --zap-log-level, --zap-devel, --zap-stacktrace-level, --zap-time-encoding, --v (-v),
      --tracing, --enable-pprof, --health-checking, --metrics-port, --metrics-endpoint-auth,
      --refresh-prometheus-metrics-interval, --metrics-staleness-threshold and
      --ha-enable-leader-election are accepted (their values checked) and named in one warning:
      they have no effect here (no Prometheus endpoint is served, and upstream's staleness
      threshold only shapes its gauges; every replica serves, no leader election).
      --total-queued-requests-metric, --total-running-requests-metric,
      --kv-cache-usage-percentage-metric, --lora-info-metric and --cache-info-metric are taken
      when they name a metric read here for that figure (vLLM, SGLang or TensorRT-LLM names: each
      replica's engine is told by its page); other names are refused. --pool-name,
      --pool-namespace, --pool-group, --endpoint-selector and --endpoint-target-ports are
      refused: use --endpoints.
      Stops on SIGTERM/Ctrl-C: health turns NOT_SERVING, new streams are refused, open ones get
      the drain timeout.
      """;

  private static final Pattern SIZE = Pattern.compile("(\\d+)\\s*(B|KB|MB|GB)?",
      Pattern.CASE_INSENSITIVE);
  private static final Pattern DURATION = Pattern.compile("(\\d+)\\s*(ms|s|m|h|d)?");
  /** Go's time.ParseDuration, which the upstream picker's duration flags take: 1m30s, 1.5s. */
  private static final Pattern GO_DURATION = Pattern.compile(
      "((\\d+(\\.\\d*)?|\\.\\d+)(ns|us|\u00b5s|ms|s|m|h))+");
  private static final Pattern GO_DURATION_PART = Pattern.compile(
      "(\\d+(?:\\.\\d*)?|\\.\\d+)(ns|us|\u00b5s|ms|s|m|h)");

  private Main() {}

  public static void main(String[] args) throws InterruptedException {
    Running running;
    try {
      running = start(args, System.out, System.err);
    } catch (Exit e) {
      if (e.code != 0) {
        System.exit(e.code);
      }
      return;
    }
    Runtime.getRuntime().addShutdownHook(new Thread(running::close, "routing-envoy-stop"));
    running.server.awaitTermination();
  }

  /** A started server with the router and scraper it owns; {@link #close()} stops all three. */
  static final class Running implements AutoCloseable {
    final ExtProcServer server;
    final Router router;
    final @Nullable MetricsScraper scraper;
    private final PrintStream err;

    Running(ExtProcServer server, Router router, @Nullable MetricsScraper scraper,
        PrintStream err) {
      this.server = server;
      this.router = router;
      this.scraper = scraper;
      this.err = err;
    }

    @Override
    public void close() {
      server.close();
      int cut = server.streamsCutAtClose();
      if (cut > 0) {
        // printed, not logged: on SIGTERM the JDK's logging shuts down with the first shutdown
        // hook, long before a drain timeout passes, and would drop the server's own warning
        err.println("routing-envoy: " + cut + " ext_proc stream(s) still open after the drain "
            + "timeout were cancelled; their requests failed");
      }
      if (scraper != null) {
        scraper.close();
      }
      router.close();
    }
  }

  /** Ends the program with a status: 0 after --help, 2 for a usage error, 1 when it cannot run. */
  static final class Exit extends Exception {
    private static final long serialVersionUID = 1L;
    final int code;

    Exit(int code) {
      super(null, null, false, false);
      this.code = code;
    }
  }

  /**
   * Parses {@code args}, builds the router and starts the server. Problems are printed to
   * {@code err} (one line naming the option, or every error of a config file) and end in
   * {@link Exit}.
   */
  static Running start(String[] args, PrintStream out, PrintStream err) throws Exit {
    Map<String, String> o;
    try {
      o = parse(args);
    } catch (IllegalArgumentException e) {
      throw usage(err, e.getMessage());
    }
    if (o.containsKey("help")) {
      out.print(HELP);
      throw new Exit(0);
    }
    Router router;
    Router.Builder b = Router.builder();
    int port;
    int healthPort;
    int maxBody;
    int maxMessage = 0;
    Duration drain;
    boolean metrics;
    Duration metricsInterval;
    boolean metricsInsecure;
    int metricsPort;
    boolean subsetFilterOff;
    boolean secure;
    try {
      List<Endpoint> endpoints = endpoints(o.get("endpoints"));
      b.endpoints(endpoints);
      port = port(typed(o, "port"), o.getOrDefault("port", String.valueOf(ExtProcServer.DEFAULT_PORT)));
      healthPort = port("grpc-health-port", o.getOrDefault("grpc-health-port",
          String.valueOf(ExtProcServer.DEFAULT_HEALTH_PORT)));
      if (healthPort == port && port != 0) {
        healthPort = -1; // health is served on the ext_proc port already
      }
      maxBody = size("max-body-size", o.getOrDefault("max-body-size", "16MB"));
      if (o.containsKey("max-message-size")) {
        maxMessage = size("max-message-size", o.get("max-message-size"));
        if (maxMessage < maxBody + (long) ExtProcServer.MESSAGE_HEADROOM_BYTES) {
          throw new IllegalArgumentException("--max-message-size: " + o.get("max-message-size")
              + " must be at least --max-body-size (" + o.getOrDefault("max-body-size", "16MB")
              + ") + 1MB: BUFFERED sends a request body as one message");
        }
      }
      List<String> sessionHeaders = list("session-headers", o.getOrDefault("session-headers",
          String.join(",", OpenAiRequestParser.DEFAULT_SESSION_HEADERS)));
      if (sessionHeaders.isEmpty()) {
        // an empty list would turn session affinity off unseen; nothing documents that as a
        // switch, so it is taken for the slip it most likely is
        throw new IllegalArgumentException("--session-headers: '" + o.get("session-headers")
            + "' names no header (NAME[,NAME...], e.g. x-session-id)");
      }
      b.requestParser(OpenAiRequestParser.of(maxBody, sessionHeaders));
      if (o.containsKey("in-flight-max-age")) {
        b.inFlightMaxAge(duration("in-flight-max-age", o.get("in-flight-max-age")));
      }
      // zero is what the builder takes too: close() cancels open streams without waiting
      drain = duration("drain-timeout", o.getOrDefault("drain-timeout", "30s"), true);
      metrics = bool("metrics-enabled", o.getOrDefault("metrics-enabled", "true"));
      // checked here, naming the option, even when scraping is off: a mistake is a mistake
      metricsInterval = duration(typed(o, "metrics-interval"),
          o.getOrDefault("metrics-interval", "200ms"));
      if (o.containsKey("scheme")) {
        scheme(typed(o, "scheme"), o.get("scheme"));
      }
      if (o.containsKey("metrics-path")) {
        metricsPath(typed(o, "metrics-path"), o.get("metrics-path"));
      }
      metricsPort = o.containsKey("model-server-metrics-port")
          ? port("model-server-metrics-port", o.get("model-server-metrics-port")) : 0;
      metricsInsecure = bool(typed(o, "metrics-insecure-skip-verify"),
          o.getOrDefault("metrics-insecure-skip-verify", "false"));
      subsetFilterOff = bool("disable-endpoint-subset-filter",
          o.getOrDefault("disable-endpoint-subset-filter", "false"));
      noEffectValues(o);
      metricNames(o);
      if (o.containsKey("host")) {
        host(o.get("host"));
      }
      secure = bool("secure-serving", o.getOrDefault("secure-serving", "false"));
      if (o.containsKey("cert-path") && o.get("cert-path").isBlank()) {
        throw new IllegalArgumentException("--cert-path: '" + o.get("cert-path") + "' names no "
            + "directory (one holding tls.crt and tls.key)");
      }
      if (bool("enable-cert-reload", o.getOrDefault("enable-cert-reload", "false"))
          && !o.containsKey("cert-path")) {
        throw new IllegalArgumentException("--enable-cert-reload needs --cert-path: it reloads "
            + "that directory's tls.crt and tls.key");
      }
      if (o.containsKey("cert-path") && !secure) {
        // plaintext while a certificate was handed over is never what was meant: say so, rather
        // than serve a port Envoy's TLS cluster cannot talk to
        throw new IllegalArgumentException("--cert-path is given but --secure-serving is "
            + (o.containsKey("secure-serving") ? "false" : "off (plaintext is the default)")
            + ": add --secure-serving=true to serve TLS");
      }
      String config = o.get("config");
      String preset = o.get("preset");
      String configText = o.get("config-text");
      List<String> configs = new ArrayList<>();
      for (String c : List.of("config", "config-text", "preset")) {
        if (o.containsKey(c)) {
          configs.add("--" + typed(o, c));
        }
      }
      if (configs.size() > 1) {
        // each is the whole routing configuration: which one was meant cannot be told
        throw new IllegalArgumentException(String.join(" and ", configs) + " are both given; "
            + "each is a whole routing configuration: give one of them");
      }
      if (configText != null) {
        if (configText.isBlank()) {
          throw new IllegalArgumentException("--config-text is empty: give an "
              + "EndpointPickerConfig as YAML text, or leave it out for the EPP default profile");
        }
        b.configYaml(configText, "--config-text");
      } else if (config != null) {
        Path file = Path.of(config);
        if (!Files.isReadable(file)) {
          throw new IllegalArgumentException("--" + typed(o, "config") + ": cannot read file "
              + config);
        }
        b.configFile(file);
      } else if (preset != null) {
        if (!Epp4jPreset.NAME.equals(preset)) {
          throw new IllegalArgumentException("--preset: unknown preset '" + preset + "'; known: "
              + Epp4jPreset.NAME + " (or use --config)");
        }
        b.configYaml(Epp4jPreset.yaml(), Epp4jPreset.NAME);
      }
    } catch (IllegalArgumentException e) {
      throw usage(err, e.getMessage());
    }
    List<String> ignored = new ArrayList<>();
    for (Map.Entry<String, String> e : NO_EFFECT.entrySet()) {
      if (o.containsKey(e.getKey())) {
        ignored.add("--" + e.getKey() + " (" + e.getValue() + ")");
      }
    }
    if (!ignored.isEmpty()) {
      err.println("routing-envoy: warning: flags of the upstream endpoint picker that have no "
          + "effect here: " + String.join(", ", ignored));
    }
    try {
      router = b.build();
    } catch (ConfigException e) {
      err.println("routing-envoy: " + (o.containsKey("config-text") ? "--config-text"
          : "--" + typed(o, "config") + " " + o.get("config")) + " is not valid:");
      e.errors().forEach(m -> err.println("  " + m));
      throw new Exit(2);
    }
    MetricsScraper scraper = null;
    ExtProcServer server;
    try {
      if (metrics) {
        MetricsScraper.Builder sb = MetricsScraper.builder(router).interval(metricsInterval);
        if (o.containsKey("metrics-path")) {
          sb.path(o.get("metrics-path"));
        }
        if (o.containsKey("scheme")) {
          sb.scheme(o.get("scheme"));
        }
        if (metricsPort > 0) {
          sb.port(metricsPort);
        }
        if (o.containsKey("metrics-insecure-skip-verify")) {
          // without the flag, the configuration's metrics-data-source says
          sb.insecureSkipVerify(metricsInsecure);
        }
        scraper = sb.start();
      }
      ExtProcServer.Builder sb = ExtProcServer.builder(router).port(port).maxBodyBytes(maxBody)
          .drainTimeout(drain).subsetHints(!subsetFilterOff);
      if (maxMessage > 0) {
        sb.maxMessageBytes(maxMessage);
      }
      if (o.containsKey("host")) {
        sb.host(o.get("host"));
      }
      if (secure) {
        String dir = o.get("cert-path");
        if (dir == null) {
          sb.selfSignedTls();
        } else {
          try {
            sb.tls(Path.of(dir, "tls.crt"), Path.of(dir, "tls.key"),
                bool("enable-cert-reload", o.getOrDefault("enable-cert-reload", "false")));
          } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("--cert-path: " + e.getMessage(), e);
          }
        }
      }
      if (healthPort >= 0) {
        sb.healthPort(healthPort);
      }
      try {
        server = sb.start();
      } catch (ExtProcServer.HealthPortUnavailable e) {
        if (o.containsKey("grpc-health-port")) {
          throw e;
        }
        // the default only: a second server on one machine, or another program on 9003, should
        // not keep a server that used to start from starting; health stays on --port
        err.println("routing-envoy: warning: " + e.getMessage() + "; gRPC health is served on "
            + "the ext_proc port only (give --grpc-health-port to choose another port)");
        server = sb.withoutHealthPort().start();
      }
    } catch (IllegalArgumentException e) {
      closeQuietly(scraper, router);
      throw usage(err, e.getMessage());
    } catch (IOException e) {
      closeQuietly(scraper, router);
      err.println("routing-envoy: " + e.getMessage());
      throw new Exit(1);
    }
    out.println("routing-envoy: ext_proc and gRPC health on :" + server.port()
        + (!secure ? " (plaintext)" : o.containsKey("cert-path")
            ? " (TLS, " + Path.of(o.get("cert-path"), "tls.crt")
                + (o.containsKey("enable-cert-reload") && bool("enable-cert-reload",
                    o.get("enable-cert-reload")) ? ", reloaded when changed" : "") + ")"
            : " (TLS, self-signed certificate)")
        + (server.healthPort() >= 0 ? ", gRPC health on :" + server.healthPort()
            + " (plaintext)" : "")
        + ", routing to "
        + String.join(", ", router.endpoints().stream().map(c -> c.id()).toList()) + " with "
        + (o.containsKey("config-text") ? "the --config-text configuration"
            : o.containsKey("config") ? o.get("config")
            : o.containsKey("preset") ? "the " + o.get("preset") + " preset"
            : "the EPP default profile")
        + (scraper == null ? "; metrics scraping off"
            : scraper.insecureSkipVerify() && "https".equals(scraper.scheme())
                ? "; https metrics taken without checking certificates" : "")
        + (subsetFilterOff ? "; subset hints not read" : ""));
    return new Running(server, router, scraper, err);
  }

  /** The option's name as the command line wrote it: an alias of the upstream picker's. */
  private static String typed(Map<String, String> o, String option) {
    return o.getOrDefault("typed." + option, option);
  }

  private static final Set<String> ZAP_ENCODERS = Set.of("json", "console");
  private static final Set<String> ZAP_LEVELS = Set.of("debug", "info", "error", "panic");
  private static final Set<String> ZAP_STACKTRACE_LEVELS = Set.of("info", "error", "panic");
  private static final Set<String> ZAP_TIME_ENCODINGS = Set.of("epoch", "millis", "nano",
      "nanos", "iso8601", "rfc3339", "rfc3339nano");

  /** The no-effect flags' values, checked as the upstream picker checks them. */
  private static void noEffectValues(Map<String, String> o) {
    for (String f : FLAGS) {
      if (NO_EFFECT.containsKey(f) && o.containsKey(f)) {
        bool(f, o.get(f));
      }
    }
    oneOf(o, "zap-encoder", ZAP_ENCODERS);
    oneOf(o, "zap-stacktrace-level", ZAP_STACKTRACE_LEVELS);
    oneOf(o, "zap-time-encoding", ZAP_TIME_ENCODINGS);
    String level = o.get("zap-log-level");
    if (level != null && !ZAP_LEVELS.contains(level.toLowerCase(Locale.ROOT))) {
      int n = -1;
      try {
        n = Integer.parseInt(asciiInteger(level));
      } catch (NumberFormatException e) {
        // reported below
      }
      if (n <= 0) {
        throw new IllegalArgumentException("--zap-log-level: '" + level + "' is not one of "
            + String.join(", ", new java.util.TreeSet<>(ZAP_LEVELS))
            + " or an integer above 0");
      }
    }
    if (o.containsKey("v")) {
      try {
        Integer.parseInt(asciiInteger(o.get("v")));
      } catch (NumberFormatException e) {
        throw new IllegalArgumentException("--v: '" + o.get("v") + "' is not an integer", e);
      }
    }
    if (o.containsKey("metrics-port")) {
      port("metrics-port", o.get("metrics-port"));
    }
    // Go durations; upstream's ticker refuses an interval that is not positive
    if (o.containsKey("refresh-prometheus-metrics-interval")) {
      duration("refresh-prometheus-metrics-interval", o.get("refresh-prometheus-metrics-interval"));
    }
    if (o.containsKey("metrics-staleness-threshold")) {
      duration("metrics-staleness-threshold", o.get("metrics-staleness-threshold"), true);
    }
  }

  private static void oneOf(Map<String, String> o, String option, Set<String> values) {
    String v = o.get(option);
    if (v != null && !values.contains(v.toLowerCase(Locale.ROOT))) {
      throw new IllegalArgumentException("--" + option + ": '" + v + "' is not one of "
          + String.join(", ", new java.util.TreeSet<>(values)));
    }
  }

  private static void closeQuietly(@Nullable MetricsScraper scraper, Router router) {
    if (scraper != null) {
      scraper.close();
    }
    router.close();
  }

  private static Exit usage(PrintStream err, @Nullable String message) {
    err.println("routing-envoy: " + message);
    err.println(USAGE);
    err.println("run with --help for the options");
    return new Exit(2);
  }

  private static final List<String> OPTIONS = List.of("endpoints", "port", "grpc-health-port",
      "host", "config",
      "preset", "max-body-size", "max-message-size", "session-headers", "in-flight-max-age", "scheme",
      "metrics-enabled", "metrics-interval", "metrics-path", "drain-timeout", "secure-serving",
      "cert-path", "enable-cert-reload", "config-text", "metrics-insecure-skip-verify",
      "disable-endpoint-subset-filter", "model-server-metrics-port");
  /** The upstream endpoint picker's names of options this server has under another name. */
  private static final Map<String, String> ALIASES = Map.of("config-file", "config",
      "grpc-port", "port", "model-server-metrics-path", "metrics-path",
      "model-server-metrics-scheme", "scheme", "refresh-metrics-interval", "metrics-interval",
      "model-server-metrics-https-insecure-skip-verify", "metrics-insecure-skip-verify");
  /**
   * The upstream picker's logging, diagnostics and HA flags, which mean nothing here: taken (and
   * their values checked as upstream does) so that its Deployment starts, and named in one
   * warning with what each would have done.
   */
  static final Map<String, String> NO_EFFECT = noEffect();
  /** Options that alone mean true, as Go's boolean flags: {@code --secure-serving}. */
  private static final Set<String> FLAGS = Set.of("secure-serving", "enable-cert-reload",
      "metrics-insecure-skip-verify", "disable-endpoint-subset-filter",
      "zap-devel", "tracing", "metrics-endpoint-auth", "ha-enable-leader-election",
      "enable-pprof", "health-checking");

  private static Map<String, String> noEffect() {
    Map<String, String> m = new LinkedHashMap<>();
    String logging = "logging is java.util.logging's, configured by its own properties";
    m.put("zap-encoder", logging);
    m.put("zap-log-level", logging);
    m.put("zap-devel", logging);
    m.put("zap-stacktrace-level", logging);
    m.put("zap-time-encoding", logging);
    m.put("v", logging);
    m.put("tracing", "no traces are emitted");
    m.put("enable-pprof", "no profiling endpoint is served");
    m.put("health-checking", "gRPC health is always served");
    m.put("metrics-port", "no Prometheus metrics endpoint is served here");
    m.put("metrics-endpoint-auth", "no Prometheus metrics endpoint is served here");
    m.put("refresh-prometheus-metrics-interval", "it is how often upstream refreshes the pool "
        + "gauges of its own Prometheus metrics endpoint, which is not served here");
    m.put("metrics-staleness-threshold", "upstream leaves replicas with older metrics out of "
        + "those pool gauges and its debug log only, not out of routing");
    m.put("ha-enable-leader-election", "there is no leader election: every replica serves and "
        + "is ready");
    return java.util.Collections.unmodifiableMap(m);
  }

  /**
   * A metric-name flag of the upstream picker: the figure it names the metric of, the metrics the
   * scrape here reads for that figure (as upstream writes them in its specs), and why an empty
   * value cannot be followed here.
   */
  record MetricFlag(String figure, List<String> specs, String whenEmpty) {}

  private static final String EMPTY_LOAD_SPEC = "an empty spec made upstream read 0 for every "
      + "replica, which load-aware scoring takes for an idle server; this server reads the "
      + "figure: leave the flag out";

  /**
   * The upstream picker's metric-name flags (read up to its v1.3; v1.4 and later refuse them in
   * favour of the configuration's {@code engineConfigs}). The scrape here recognises each
   * replica's engine (vLLM, SGLang, trtllm-serve, Triton's TensorRT-LLM backend) by the names on
   * its page and cannot be told other names, so a flag naming one of the metrics it reads for the
   * figure asks for nothing it does not do already, and any other value is refused.
   */
  static final Map<String, MetricFlag> METRIC_FLAGS = Map.of(
      "total-queued-requests-metric", new MetricFlag("waiting requests", List.of(
          "vllm:num_requests_waiting", "sglang:num_queue_reqs", "trtllm_num_requests_waiting",
          "nv_trt_llm_request_metrics{request_type=waiting}"), EMPTY_LOAD_SPEC),
      "total-running-requests-metric", new MetricFlag("running requests", List.of(
          "vllm:num_requests_running", "sglang:num_running_reqs", "trtllm_num_requests_running",
          "nv_trt_llm_request_metrics{request_type=scheduled}"), EMPTY_LOAD_SPEC),
      "kv-cache-usage-percentage-metric", new MetricFlag("KV-cache usage", List.of(
          "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage",
          "trtllm_kv_cache_utilization",
          "nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=fraction}"), EMPTY_LOAD_SPEC),
      "lora-info-metric", new MetricFlag("LoRA adapters", List.of("vllm:lora_requests_info"),
          "an empty spec stops upstream reading LoRA adapters; to do that here, give the "
          + "configuration a core-metrics-extractor whose engineConfigs entry for vllm sets "
          + "loraSpec: \"\" (docs/plugins.md)"),
      "cache-info-metric", new MetricFlag("KV-cache size", List.of("vllm:cache_config_info",
          "sglang:cache_config_info"),
          "an empty spec stops upstream reading the KV-cache size; to do that here, give the "
          + "configuration a core-metrics-extractor whose engineConfigs entry for the engine "
          + "sets cacheInfoSpec: \"\" (docs/plugins.md)"));

  /**
   * Refuses a metric-name flag that names a metric the scrape here does not read for it; the
   * first such flag on the command line is named.
   */
  private static void metricNames(Map<String, String> o) {
    for (Map.Entry<String, String> e : o.entrySet()) {
      MetricFlag flag = METRIC_FLAGS.get(e.getKey());
      if (flag == null) {
        continue;
      }
      String value = e.getValue();
      String spec = bareSpec(value);
      if (spec.isEmpty()) {
        throw new IllegalArgumentException("--" + e.getKey() + ": '" + value + "': "
            + flag.whenEmpty());
      }
      boolean read = false;
      for (String known : flag.specs()) {
        read |= bareSpec(known).equals(spec);
      }
      if (!read) {
        throw new IllegalArgumentException("--" + e.getKey() + ": '" + value + "' is not a "
            + "metric this server reads for " + flag.figure() + ": it reads "
            + String.join(", ", flag.specs()) + ", whichever a replica's page carries, and "
            + "cannot be told other names; leave the flag out");
      }
    }
  }

  /**
   * A spec without blanks and without quotes around its label values, so that
   * {@code request_type="waiting"} and {@code request_type=waiting} match alike.
   */
  private static String bareSpec(String spec) {
    return spec.replaceAll("[\"\\s]", "");
  }

  /** The upstream picker's options for finding its replicas in Kubernetes. */
  private static final Set<String> UPSTREAM_DISCOVERY = Set.of("pool-name", "pool-namespace",
      "pool-group", "endpoint-selector", "endpoint-target-ports");

  /**
   * {@code --name value} and {@code --name=value}; the upstream endpoint picker's names in
   * {@link #ALIASES} are taken as this server's, and the name as typed is kept under
   * {@code typed.NAME} for messages.
   */
  static Map<String, String> parse(String[] args) {
    Map<String, String> o = new LinkedHashMap<>();
    for (int i = 0; i < args.length; i++) {
      String a = args[i];
      if (a.equals("--help") || a.equals("-h")) {
        o.put("help", "");
        continue;
      }
      boolean goShort = a.equals("-v") || a.startsWith("-v="); // Go's flag package takes -v
      if (!a.startsWith("--") && !goShort) {
        throw new IllegalArgumentException("unexpected argument '" + a + "'");
      }
      String name = a.substring(goShort ? 1 : 2);
      String value = null;
      int eq = name.indexOf('=');
      if (eq >= 0) {
        value = name.substring(eq + 1);
        name = name.substring(0, eq);
      }
      String typed = name;
      name = ALIASES.getOrDefault(name, name);
      if (UPSTREAM_DISCOVERY.contains(name)) {
        // a Deployment copied from upstream: say what to give instead of "unknown option"
        throw new IllegalArgumentException("--" + name + " is how the upstream endpoint picker "
            + "finds the replicas in Kubernetes (an InferencePool or a pod selector), which this "
            + "server does not do: list them with --endpoints IP:PORT[,IP:PORT...]");
      }
      if (!OPTIONS.contains(name) && !NO_EFFECT.containsKey(name)
          && !METRIC_FLAGS.containsKey(name)) {
        throw new IllegalArgumentException("unknown option '--" + name + "'");
      }
      if (value == null && FLAGS.contains(name)) {
        value = "true"; // a following word is not its value: --secure-serving false is an error
      }
      if (value == null) {
        if (i + 1 >= args.length) {
          throw new IllegalArgumentException("--" + typed + " needs a value");
        }
        String next = args[i + 1];
        if (isOptionLike(next)) {
          // the value was left out: "--session-headers --secure-serving" read a header named
          // --secure-serving and served plaintext, "--config -x" a file named -x
          throw new IllegalArgumentException("--" + typed + " needs a value, but is followed by "
              + "the option " + next + " (a value that begins with a dash and is not a number "
              + "is given as --" + typed + "=VALUE)");
        }
        value = args[++i];
      }
      if (o.put(name, value) != null) {
        String first = o.getOrDefault("typed." + name, name);
        throw new IllegalArgumentException("--" + name + " is given twice"
            + (first.equals(name) && typed.equals(name) ? ""
                : " (--" + first + " and --" + typed + ")"));
      }
      if (!typed.equals(name)) {
        o.put("typed." + name, typed);
      }
    }
    return o;
  }

  /**
   * Whether {@code a} is an option rather than a value: {@code --x}, {@code -h}, or a word of one
   * dash that is not a number ({@code -x}); a lone dash and a negative number ({@code -1},
   * {@code -.5}) are values, for the option to check.
   */
  static boolean isOptionLike(String a) {
    return a.startsWith("--") || (a.length() > 1 && a.charAt(0) == '-'
        && !a.matches("-\\.?[0-9].*"));
  }

  private static List<Endpoint> endpoints(@Nullable String text) {
    if (text == null || text.isBlank()) {
      throw new IllegalArgumentException("--endpoints is required (IP:PORT[,IP:PORT...])");
    }
    List<Endpoint> out = new ArrayList<>();
    Set<InetSocketAddress> seen = new HashSet<>();
    for (String s : list("endpoints", text)) {
      Endpoint e;
      try {
        e = Endpoint.parseWithRole(s);
      } catch (IllegalArgumentException x) {
        throw new IllegalArgumentException("--endpoints: '" + s + "' is not host:port or"
            + " host:port=role (" + x.getMessage() + ")", x);
      }
      if (!isIpLiteral(e.host())) {
        // the pick goes out as x-gateway-destination-endpoint, which Envoy's ORIGINAL_DST
        // cluster takes only as a resolved ip:port: a host name would fail every request there
        throw new IllegalArgumentException("--endpoints: '" + s + "' is not an IP address and "
            + "port: Envoy's ORIGINAL_DST cluster connects to the picked ip:port and resolves no "
            + "host names (IPv6 as [addr]:port)");
      }
      if (!seen.add(socketAddress(e))) {
        // the router would keep one of them: one replica where the command line named two
        throw new IllegalArgumentException("--endpoints: '" + s + "' is given more than once");
      }
      out.add(e);
    }
    if (out.isEmpty()) { // only commas and blanks: a server without replicas answers every request 503
      throw new IllegalArgumentException("--endpoints: '" + text + "' names no endpoint "
          + "(IP:PORT[,IP:PORT...])");
    }
    return out;
  }

  /** The endpoint's address as a value, so that two spellings of one IPv6 address are equal. */
  private static InetSocketAddress socketAddress(Endpoint e) {
    try {
      // an IP literal (checked before): no name lookup
      String host = e.host().indexOf(':') >= 0 ? "[" + e.host() + "]" : e.host();
      return new InetSocketAddress(InetAddress.getByName(host), e.port());
    } catch (UnknownHostException x) {
      throw new IllegalArgumentException("--endpoints: '" + e.id() + "' is not an IP address", x);
    }
  }

  private static final Pattern IPV4 = Pattern.compile(
      "(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)(\\.(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)){3}");

  /** A dotted IPv4 address or an IPv6 address, read without any name lookup. */
  static boolean isIpLiteral(String host) {
    if (IPV4.matcher(host).matches()) {
      return true;
    }
    if (host.indexOf(':') < 0) {
      return false; // a host name
    }
    try {
      // in brackets the JDK takes the text as an IPv6 literal or refuses it, never looking it up
      InetAddress.getByName("[" + host + "]");
      return true;
    } catch (UnknownHostException e) {
      return false;
    }
  }

  /**
   * The comma-separated items of option {@code option}'s value, stripped. A blank value is an
   * empty list; an empty item in a value that has others ({@code a,,b}, a trailing comma) is a
   * usage error, as the simulator's lists make it: it is more likely a lost item than meant.
   */
  private static List<String> list(String option, String text) {
    List<String> out = new ArrayList<>();
    if (text.isBlank()) {
      return out;
    }
    String[] items = text.split(",", -1);
    for (int i = 0; i < items.length; i++) {
      if (items[i].isBlank()) {
        throw new IllegalArgumentException("--" + option + ": item " + (i + 1) + " of '" + text
            + "' is empty");
      }
      out.add(items[i].strip());
    }
    return out;
  }

  private static int port(String option, String text) {
    try {
      int p = Integer.parseInt(asciiInteger(text.strip()));
      if (p >= 0 && p <= 65535) {
        return p;
      }
    } catch (NumberFormatException e) {
      // reported below
    }
    throw new IllegalArgumentException("--" + option + ": '" + text
        + "' is not a port (0..65535)");
  }

  /**
   * {@code text} when it is an optional sign and the digits 0-9, as Go's strconv reads integers:
   * Integer.parseInt alone also takes the digits of other scripts ("٩٠٠٢" read as 9002).
   */
  private static String asciiInteger(String text) {
    if (!text.matches("[+-]?[0-9]+")) {
      throw new NumberFormatException(text);
    }
    return text;
  }

  /** {@code 16MB}, {@code 512KB}, {@code 1048576}: units are 1024-based, as Spring's DataSize. */
  static int size(String option, String text) {
    Matcher m = SIZE.matcher(text.strip());
    if (m.matches()) {
      String unit = m.group(2) == null ? "B" : m.group(2).toUpperCase(Locale.ROOT);
      int shift = switch (unit) {
        case "KB" -> 10;
        case "MB" -> 20;
        case "GB" -> 30;
        default -> 0;
      };
      try {
        long bytes = Long.parseLong(m.group(1)) << shift;
        if (bytes > 0 && bytes <= Integer.MAX_VALUE && (bytes >> shift) == Long.parseLong(m.group(1))) {
          return (int) bytes;
        }
      } catch (NumberFormatException e) {
        // reported below
      }
    }
    throw new IllegalArgumentException("--" + option + ": '" + text
        + "' is not a size between 1 byte and 2GB (e.g. 16MB)");
  }

  /** {@code 200ms}, {@code 30s}, {@code 10m}, {@code 1h}, {@code 2d}, or ISO-8601 {@code PT30S}. */
  static Duration duration(String option, String text) {
    return duration(option, text, false);
  }

  /** As {@link #duration(String, String)}; {@code zeroAllowed} takes {@code 0} too. */
  static Duration duration(String option, String text, boolean zeroAllowed) {
    String t = text.strip();
    Matcher m = DURATION.matcher(t);
    Duration d = null;
    try {
      if (m.matches()) {
        long n = Long.parseLong(m.group(1));
        String unit = m.group(2) == null ? "ms" : m.group(2);
        d = switch (unit) {
          case "s" -> Duration.ofSeconds(n);
          case "m" -> Duration.ofMinutes(n);
          case "h" -> Duration.ofHours(n);
          case "d" -> Duration.ofDays(n);
          default -> Duration.ofMillis(n);
        };
      } else if (t.toUpperCase(Locale.ROOT).startsWith("P")) {
        d = Duration.parse(t);
      } else if (GO_DURATION.matcher(t).matches()) {
        d = goDuration(t);
      }
    } catch (NumberFormatException | DateTimeParseException | ArithmeticException e) {
      d = null;
    }
    if (d == null || d.isNegative() || (d.isZero() && !zeroAllowed)) {
      throw new IllegalArgumentException("--" + option + ": '" + text + "' is not a "
          + (zeroAllowed ? "duration of 0 or more" : "positive duration")
          + " (e.g. 200ms, 30s, 10m, PT30S)");
    }
    return d;
  }

  /** A duration as Go writes it, {@code 1m30s} or {@code 1.5s}: to the nanosecond, rounded down. */
  private static Duration goDuration(String t) {
    java.math.BigDecimal nanos = java.math.BigDecimal.ZERO;
    Matcher m = GO_DURATION_PART.matcher(t);
    while (m.find()) {
      long unit = switch (m.group(2)) {
        case "ns" -> 1L;
        case "us", "\u00b5s" -> 1_000L;
        case "ms" -> 1_000_000L;
        case "s" -> 1_000_000_000L;
        case "m" -> 60_000_000_000L;
        default -> 3_600_000_000_000L;
      };
      nanos = nanos.add(new java.math.BigDecimal(m.group(1)).multiply(
          java.math.BigDecimal.valueOf(unit)));
    }
    return Duration.ofNanos(nanos.toBigInteger().longValueExact());
  }

  /**
   * The address to listen on: an empty one would bind loopback and one that does not resolve
   * could not be bound, both mistakes of the command line (exit 2), unlike a valid address that
   * cannot be bound (a port taken: exit 1).
   */
  private static void host(String text) {
    if (text.isBlank()) {
      throw new IllegalArgumentException("--host: '" + text + "' is empty: give an address to "
          + "listen on (e.g. 127.0.0.1), or leave --host out to listen on every interface");
    }
    try {
      InetAddress.getByName(text);
    } catch (UnknownHostException e) {
      throw new IllegalArgumentException("--host: '" + text + "' does not resolve to an "
          + "address (" + e.getMessage() + ")", e);
    }
  }

  /** The scheme the scraper takes; checked here so that the message names the option. */
  private static String scheme(String option, String text) {
    if (!text.equals("http") && !text.equals("https")) {
      throw new IllegalArgumentException("--" + option + ": '" + text + "' is not http or https");
    }
    return text;
  }

  /** The metrics path the scraper takes; checked here so that the message names the option. */
  private static String metricsPath(String option, String text) {
    if (!text.startsWith("/")) {
      throw new IllegalArgumentException("--" + option + ": '" + text
          + "' is not a path starting with '/' (e.g. /metrics)");
    }
    try {
      // appended to scheme://ip:port for every scrape: one a URI cannot hold fails them all
      new URI("http://127.0.0.1:1" + text);
    } catch (URISyntaxException e) {
      throw new IllegalArgumentException("--" + option + ": '" + text + "' is not valid in a URI ("
          + e.getReason() + "; percent-encode such characters, e.g. %20 for a space)", e);
    }
    if (text.indexOf('#') >= 0) {
      throw new IllegalArgumentException("--" + option + ": '" + text
          + "' has a fragment ('#'), which is never sent");
    }
    return text;
  }

  private static boolean bool(String option, String text) {
    return switch (text.strip().toLowerCase(Locale.ROOT)) {
      case "true" -> true;
      case "false" -> false;
      default -> throw new IllegalArgumentException("--" + option + ": '" + text
          + "' is not true or false");
    };
  }
}
