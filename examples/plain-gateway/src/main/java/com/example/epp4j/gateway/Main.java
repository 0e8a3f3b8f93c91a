package com.example.epp4j.gateway;

import io.epp4j.api.Endpoint;
import io.epp4j.core.ConfigException;
import io.epp4j.core.Router;
import java.io.IOException;
import java.io.PrintWriter;
import java.net.InetSocketAddress;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.Callable;
import java.util.stream.Collectors;
import org.jspecify.annotations.Nullable;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.Spec;

/**
 * Command line of {@code plain-gateway.jar}: the gateway, and ({@code stand-in}) a stand-in vLLM
 * server to try it with. Both keep running until the process is stopped.
 */
public final class Main {
  private Main() {}

  public static void main(String[] args) {
    int code = commandLine(new PrintWriter(System.out, true), new PrintWriter(System.err, true))
        .execute(args);
    if (code != 0 || (args.length > 0 && args[0].equals("e2e"))) {
      System.exit(code); // e2e ends when its report is out, whatever thread is still winding down
    }
    // 0 with a server started: its non-daemon threads keep the process alive
  }

  /** The parser, with errors printed as one line naming the option plus the synopsis. */
  static CommandLine commandLine(PrintWriter out, PrintWriter err) {
    CommandLine cl = new CommandLine(new GatewayCommand());
    // "--config -x" is an option whose value was left out, not a file named -x; a negative
    // number ("--ttft-ms -1") still reaches the option, whose converter checks its range
    cl.setUnmatchedOptionsAllowedAsOptionParameters(false);
    cl.setOut(out);
    cl.setErr(err);
    cl.setParameterExceptionHandler((ex, args) -> {
      CommandLine c = ex.getCommandLine();
      c.getErr().println(c.getCommandSpec().qualifiedName() + ": " + ex.getMessage());
      c.getErr().print("usage: " + c.getHelp().synopsis(0));
      c.getErr().println("run with --help for the options");
      return c.getCommandSpec().exitCodeOnInvalidInput();
    });
    return cl;
  }

  @Command(name = "plain-gateway", mixinStandardHelpOptions = true, version = "epp4j plain-gateway",
      sortOptions = false, subcommands = {StandInCommand.class, EndToEndCommand.class},
      description = {
          "An OpenAI-compatible gateway: epp4j picks the replica for each /v1/completions and "
              + "/v1/chat/completions request; GET /v1/models goes to any replica.",
          "Commands: stand-in (a stand-in vLLM server to try the gateway with), e2e (emulated "
              + "replicas, this gateway with each policy in turn and a load generator: the "
              + "comparison over real sockets)."})
  static final class GatewayCommand implements Callable<Integer> {
    /** How long a stopping gateway lets requests in progress finish: under Kubernetes' 30 s. */
    static final Duration SHUTDOWN_GRACE = Duration.ofSeconds(25);
    /** {@link PlainGateway.Options#DEFAULT_STREAM_IDLE_TIMEOUT}, as an annotation can hold it. */
    static final int DEFAULT_STREAM_IDLE_SECONDS = 300;

    @Spec CommandSpec spec;

    @Option(names = "--port", defaultValue = "8080", converter = PortConverter.class,
        description = "port to listen on (0: any free port); default ${DEFAULT-VALUE}")
    int port;

    @Option(names = "--endpoints", split = ",", paramLabel = "HOST:PORT",
        converter = EndpointConverter.class,
        description = "the replicas, comma-separated, e.g. 10.0.0.1:8000,10.0.0.2:8000 (required)")
    @Nullable List<Endpoint> endpoints;

    @Option(names = "--config", paramLabel = "FILE",
        description = "an EndpointPickerConfig YAML file; default: the EPP default profile")
    @Nullable Path config;

    @Option(names = "--stream-idle-timeout-s", paramLabel = "N",
        defaultValue = "" + DEFAULT_STREAM_IDLE_SECONDS, converter = PositiveConverter.class,
        description = "seconds a replica may send nothing while its answer is relayed; then the "
            + "client's answer is cut off and the request counts as failed; also how long a "
            + "write to a client that stopped reading may block; default "
            + "${DEFAULT-VALUE}")
    int streamIdleSeconds;

    @Option(names = "--max-concurrent-requests", paramLabel = "N",
        defaultValue = "" + PlainGateway.Options.DEFAULT_MAX_CONCURRENT_REQUESTS,
        converter = PositiveConverter.class,
        description = "requests handled at once, each on a thread of its own until its answer "
            + "ends; more get 503 gateway_overloaded with Retry-After; default ${DEFAULT-VALUE}")
    int maxConcurrentRequests;

    /** The running gateway, once started. */
    @Nullable PlainGateway gateway;

    @Override
    public Integer call() throws IOException {
      // checked here rather than with required=true: picocli would demand it for stand-in too
      if (endpoints == null || endpoints.isEmpty()) {
        throw new ParameterException(spec.commandLine(),
            "Missing required option: '--endpoints=HOST:PORT[,HOST:PORT...]'");
      }
      java.util.Set<String> ids = new java.util.HashSet<>();
      for (Endpoint e : endpoints) {
        if (!ids.add(e.id())) {
          // the router refuses it too, but as an exception: a stack trace and exit code 1
          throw new ParameterException(spec.commandLine(), "Invalid value for option "
              + "'--endpoints': " + e.id() + " is listed twice (the pool holds one endpoint per "
              + "address)");
        }
      }
      if (config != null && !Files.isReadable(config)) {
        throw new ParameterException(spec.commandLine(),
            "Invalid value for option '--config': cannot read file " + config);
      }
      Router.Builder b = Router.builder().endpoints(endpoints);
      if (config != null) {
        b.configFile(config);
      }
      Router router;
      try {
        router = b.build();
      } catch (ConfigException e) {
        PrintWriter err = spec.commandLine().getErr();
        err.println("plain-gateway: --config " + config + " is not valid:");
        e.errors().forEach(m -> err.println("  " + m));
        return 2;
      }
      try {
        gateway = new PlainGateway(new InetSocketAddress(port), router,
            new PlainGateway.Options(Duration.ofSeconds(streamIdleSeconds), maxConcurrentRequests));
      } catch (IOException e) { // the gateway has closed the router
        spec.commandLine().getErr().println(
            "plain-gateway: cannot listen on --port " + port + ": " + e.getMessage());
        return 1;
      }
      PlainGateway started = gateway;
      // a stop (SIGTERM, as in a rolling update) lets the answers being relayed finish first
      Runtime.getRuntime().addShutdownHook(new Thread(() -> started.close(SHUTDOWN_GRACE),
          "plain-gateway-stop"));
      spec.commandLine().getOut().println("plain-gateway listening on :" + gateway.port()
          + ", routing to " + endpoints.stream().map(Endpoint::id).collect(Collectors.joining(", "))
          + " with " + (config == null ? "the EPP default profile" : config));
      return 0;
    }
  }

  @Command(name = "stand-in", mixinStandardHelpOptions = true, sortOptions = false,
      description = {
          "A stand-in vLLM server for trying the gateway without a GPU: canned words, about four "
              + "bytes of prompt per token, fixed latencies, a prefix cache so that cached_tokens "
              + "and vLLM's prefix-cache metrics react to routing. Not a model and not a "
              + "performance emulator.",
          "Serves /v1/completions, /v1/chat/completions (JSON or SSE), /v1/models, /metrics "
              + "(vLLM names), /health, /tokenize (the stand-in's own tokenizer, which counts "
              + "the prompt tokens) and /detokenize (checked; the stand-in's IDs cannot be "
              + "decoded)."})
  static final class StandInCommand implements Callable<Integer> {
    @Spec CommandSpec spec;

    @Option(names = "--port", defaultValue = "8000", converter = PortConverter.class,
        description = "port to listen on (0: any free port); default ${DEFAULT-VALUE}")
    int port;

    @Option(names = "--model", defaultValue = "stand-in", converter = ModelNameConverter.class,
        description = "served model name; requests naming another get 404; default ${DEFAULT-VALUE}")
    String model;

    @Option(names = "--ttft-ms", defaultValue = "20", converter = MillisConverter.class,
        description = "time to first token, ms; default ${DEFAULT-VALUE}")
    Duration ttft;

    @Option(names = "--itl-ms", defaultValue = "5", converter = MillisConverter.class,
        description = "time between tokens, ms; default ${DEFAULT-VALUE}")
    Duration itl;

    @Option(names = "--kv-blocks", defaultValue = "4000", converter = PositiveConverter.class,
        description = "KV-cache capacity in 16-token blocks; default ${DEFAULT-VALUE}")
    int kvBlocks;

    @Option(names = "--max-num-seqs", defaultValue = "64", converter = PositiveConverter.class,
        description = "requests generating at once, more wait; default ${DEFAULT-VALUE}")
    int maxNumSeqs;

    @Option(names = "--max-model-len", defaultValue = "32768", converter = PositiveConverter.class,
        description = "prompt + max_tokens limit; default ${DEFAULT-VALUE}")
    int maxModelLen;

    // vLLM's name too: a stand-in started as vLLM is (and as routing-sim serve takes it) ran
    // into "Unknown option"
    @Option(names = {"--force-include-usage", "--enable-force-include-usage"},
        description = "end every stream with the usage chunk (vLLM's "
            + "--enable-force-include-usage); otherwise only when stream_options.include_usage")
    boolean forceIncludeUsage;

    @Option(names = "--enable-prompt-tokens-details",
        description = "usage names the prompt tokens found in the prefix cache, "
            + "prompt_tokens_details.cached_tokens, as vLLM's flag of that name; off, as in vLLM, "
            + "it does not")
    boolean promptTokensDetails;

    @Option(names = "--max-threads", defaultValue = "" + StandInVllm.Options.DEFAULT_MAX_THREADS,
        converter = PositiveConverter.class,
        description = "threads handling connections; more connections wait their turn; "
            + "default ${DEFAULT-VALUE}")
    int maxThreads;

    /** The running server, once started. */
    @Nullable StandInVllm server;

    @Override
    public Integer call() {
      StandInVllm.Options o = new StandInVllm.Options(model, ttft, itl, kvBlocks, maxNumSeqs,
          maxModelLen, forceIncludeUsage, maxThreads, promptTokensDetails);
      try {
        server = StandInVllm.start(new InetSocketAddress(port), o);
      } catch (IOException e) {
        spec.commandLine().getErr().println(
            "stand-in: cannot listen on --port " + port + ": " + e.getMessage());
        return 1;
      }
      Runtime.getRuntime().addShutdownHook(new Thread(server::close, "stand-in-stop"));
      spec.commandLine().getOut().println("stand-in vLLM server (not a model) listening on :"
          + server.port() + ", serving model '" + model + "'");
      return 0;
    }
  }

  @Command(name = "e2e", mixinStandardHelpOptions = true, sortOptions = false,
      description = {
          "The seed experiment through real sockets on this machine: for each policy, fresh "
              + "emulated vLLM replicas (routing-sim serve), this gateway routing with the "
              + "policy (epp-precise reads the replicas' KV events over ZeroMQ) and the load "
              + "generator (routing-sim load) sending the shared-prefix workload through it; "
              + "then the comparison and the gateway's own time per request. Stops by itself."})
  static final class EndToEndCommand implements Callable<Integer> {
    @Spec CommandSpec spec;

    @Option(names = "--policies", split = ",", paramLabel = "NAME",
        defaultValue = "round-robin,epp-approximate,epp-precise,epp4j",
        description = "simulator presets, comma-separated; default ${DEFAULT-VALUE}")
    List<String> policies;

    @Option(names = "--replicas", defaultValue = "6", converter = PositiveConverter.class,
        description = "emulated replicas per policy; default ${DEFAULT-VALUE}")
    int replicas;

    @Option(names = "--speed", defaultValue = "4", converter = DecimalConverter.class,
        description = "emulated seconds per wall second; default ${DEFAULT-VALUE}")
    double speed;

    @Option(names = "--requests", defaultValue = "240", converter = PositiveConverter.class,
        description = "requests per policy; default ${DEFAULT-VALUE}")
    int requests;

    @Option(names = "--concurrency", defaultValue = "24", converter = PositiveConverter.class,
        description = "closed-loop clients; default ${DEFAULT-VALUE}")
    int concurrency;

    @Option(names = "--groups", defaultValue = "28", converter = PositiveConverter.class,
        description = "system prompts (6000 tokens each); default ${DEFAULT-VALUE}")
    int groups;

    @Option(names = "--output-len", defaultValue = "50-150",
        description = "output tokens, N or A-B; default ${DEFAULT-VALUE}")
    String outputLen;

    @Option(names = "--seed", defaultValue = "1", converter = LongConverter.class,
        description = "default ${DEFAULT-VALUE}")
    long seed;

    @Option(names = "--warmup", defaultValue = "48", converter = NonNegativeConverter.class,
        description = "unmeasured requests through round-robin first (JIT), 0 for none; "
            + "default ${DEFAULT-VALUE}")
    int warmup;

    @Option(names = "--port", defaultValue = "0", converter = PortConverter.class,
        description = "HTTP port of the first policy's replica 0 (policy k: port + k × "
            + "replicas); 0 picks free ports; default ${DEFAULT-VALUE}")
    int port;

    @Option(names = "--kv-events-port", defaultValue = "25557", converter = PortConverter.class,
        description = "KV-event port of the first policy's replica 0 (replica i of policy k: "
            + "+ 2 × (k × replicas + i)), used with --port; default ${DEFAULT-VALUE}")
    int kvEventsPort;

    @Option(names = "--timeout-s", defaultValue = "60", converter = PositiveConverter.class,
        description = "per request; default ${DEFAULT-VALUE}")
    int timeoutSeconds;

    @Option(names = "--json", paramLabel = "PATH", description = "also write the report as JSON")
    @Nullable Path json;

    @Option(names = "--quiet", description = "no progress on stderr")
    boolean quiet;

    @Override
    public Integer call() throws Exception {
      List<io.epp4j.sim.Policy> chosen = new java.util.ArrayList<>();
      for (String name : policies) {
        // as the simulator's --policies reads them: any case, each once
        io.epp4j.sim.Policy p = io.epp4j.sim.Policy.presets()
            .get(name.strip().toLowerCase(java.util.Locale.ROOT));
        if (p == null) {
          throw new ParameterException(spec.commandLine(), "Invalid value for option "
              + "'--policies': unknown policy '" + name + "' (presets: "
              + String.join(", ", io.epp4j.sim.Policy.presets().keySet()) + ")");
        }
        if (chosen.contains(p)) {
          // run twice, it made two rows of one name in the table and the JSON
          throw new ParameterException(spec.commandLine(), "Invalid value for option "
              + "'--policies': it lists " + p.name() + " twice");
        }
        chosen.add(p);
      }
      if (port != 0) {
        checkPorts(spec, chosen.size(), replicas, port, kvEventsPort);
      }
      if (!(speed > 0) || speed > 1000) {
        throw new ParameterException(spec.commandLine(),
            "Invalid value for option '--speed': must be in (0, 1000], got " + speed);
      }
      io.epp4j.sim.LengthDist out;
      try {
        out = io.epp4j.sim.LengthDist.parse(outputLen);
      } catch (IllegalArgumentException e) {
        throw new ParameterException(spec.commandLine(),
            "Invalid value for option '--output-len': " + e.getMessage());
      }
      if (json != null) {
        // found only after every policy has run, a bad path would lose the whole experiment
        String why = unwritable(json);
        if (why != null) {
          throw new ParameterException(spec.commandLine(),
              "Invalid value for option '--json': " + json + ": " + why);
        }
      }
      io.epp4j.sim.SharedPrefixWorkload d = EndToEnd.defaultWorkload(requests, concurrency);
      io.epp4j.sim.SharedPrefixWorkload w = new io.epp4j.sim.SharedPrefixWorkload(groups,
          d.usersPerGroup(), d.systemPromptLength(), d.questionLength(), out, requests,
          concurrency, 0);
      EndToEnd.Settings s = new EndToEnd.Settings(replicas, speed, port, kvEventsPort, chosen, w,
          seed, Duration.ofSeconds(timeoutSeconds), warmup);
      PrintWriter err = spec.commandLine().getErr();
      java.io.PrintStream progress = quiet ? null : new java.io.PrintStream(
          new java.io.OutputStream() {
            @Override
            public void write(int b) {
              err.write(b);
            }

            @Override
            public void flush() {
              err.flush();
            }
          }, true, java.nio.charset.StandardCharsets.UTF_8);
      EndToEnd.Outcome o = EndToEnd.run(s, progress);
      java.io.ByteArrayOutputStream buf = new java.io.ByteArrayOutputStream();
      EndToEnd.print(o, new java.io.PrintStream(buf, true, java.nio.charset.StandardCharsets.UTF_8));
      PrintWriter out2 = spec.commandLine().getOut();
      out2.print(buf.toString(java.nio.charset.StandardCharsets.UTF_8));
      out2.flush();
      if (json != null) {
        EndToEnd.writeJson(o, s, spec.commandLine().getParseResult().originalArgs(), json);
      }
      int failed = o.scenario().runs().stream().mapToInt(io.epp4j.sim.LoadGenerator.Result::failed)
          .sum();
      return failed == 0 ? 0 : 1;
    }
  }

  /**
   * The ports every policy's replicas take from {@code --port} and {@code --kv-events-port} must
   * exist and not overlap: found when a later policy's replicas start, the policies run before
   * would be lost.
   */
  private static void checkPorts(CommandSpec spec, int policies, int replicas, int port,
      int kvEventsPort) {
    long lastHttp = port + (long) policies * replicas - 1;
    long lastKv = kvEventsPort + 2L * policies * replicas - 1;
    String uses = policies + " policies × " + replicas + " replicas use HTTP ports " + port + ".."
        + lastHttp + " and KV event ports " + kvEventsPort + ".." + lastKv;
    if (lastHttp > 65535) {
      throw new ParameterException(spec.commandLine(), "Invalid value for option '--port': "
          + port + " leaves no room: " + uses);
    }
    if (lastKv > 65535) {
      throw new ParameterException(spec.commandLine(), "Invalid value for option "
          + "'--kv-events-port': " + kvEventsPort + " leaves no room: " + uses);
    }
    if (port <= lastKv && kvEventsPort <= lastHttp) {
      throw new ParameterException(spec.commandLine(), "Invalid values for options '--port' and "
          + "'--kv-events-port': they overlap: " + uses);
    }
  }

  /**
   * Why a report cannot be written to {@code p}, or {@code null} when it can: the directory must
   * exist and take a new file (creating one is the only sure test: permissions, read-only file
   * systems), and an existing file must be a writable regular file.
   */
  static @Nullable String unwritable(Path p) {
    Path abs = p.toAbsolutePath().normalize();
    if (Files.isDirectory(abs)) {
      return "is a directory; give a file name";
    }
    Path parent = abs.getParent();
    if (parent == null || !Files.isDirectory(parent)) {
      return "directory " + parent + " does not exist";
    }
    if (Files.exists(abs)) {
      return Files.isRegularFile(abs) && Files.isWritable(abs)
          ? null : "exists and cannot be overwritten";
    }
    try {
      Files.createFile(abs);
      Files.delete(abs);
      return null;
    } catch (IOException e) {
      return "cannot create a file in " + parent + " (" + e.getClass().getSimpleName()
          + (e.getMessage() == null ? "" : ": " + e.getMessage()) + ")";
    }
  }

  /** A TCP port, 0–65535. */
  static final class PortConverter implements CommandLine.ITypeConverter<Integer> {
    @Override
    public Integer convert(String value) {
      int p = integer(value);
      if (p < 0 || p > 65535) {
        throw new CommandLine.TypeConversionException("'" + value + "' is not a port (0-65535)");
      }
      return p;
    }
  }

  /** A whole number of milliseconds, 0 or more. */
  static final class MillisConverter implements CommandLine.ITypeConverter<Duration> {
    @Override
    public Duration convert(String value) {
      int ms = integer(value);
      if (ms < 0) {
        throw new CommandLine.TypeConversionException("'" + value + "' is negative");
      }
      return Duration.ofMillis(ms);
    }
  }

  /** A model name: not blank (a stand-in serving '' would answer 404 to every named model). */
  static final class ModelNameConverter implements CommandLine.ITypeConverter<String> {
    @Override
    public String convert(String value) {
      if (value.isBlank()) {
        throw new CommandLine.TypeConversionException("a model name must not be blank");
      }
      return value;
    }
  }

  /** A whole number, 1 or more. */
  static final class PositiveConverter implements CommandLine.ITypeConverter<Integer> {
    @Override
    public Integer convert(String value) {
      int n = integer(value);
      if (n < 1) {
        throw new CommandLine.TypeConversionException("'" + value + "' is not a positive number");
      }
      return n;
    }
  }

  /** {@code host:port}. */
  static final class EndpointConverter implements CommandLine.ITypeConverter<Endpoint> {
    @Override
    public Endpoint convert(String value) {
      try {
        return Endpoint.parse(value.strip());
      } catch (IllegalArgumentException e) {
        throw new CommandLine.TypeConversionException(e.getMessage());
      }
    }
  }

  /** A whole number, 0 or more. */
  static final class NonNegativeConverter implements CommandLine.ITypeConverter<Integer> {
    @Override
    public Integer convert(String value) {
      int n = integer(value);
      if (n < 0) {
        throw new CommandLine.TypeConversionException("'" + value + "' is negative");
      }
      return n;
    }
  }

  /**
   * A plain decimal number ({@code 4}, {@code 0.5}, {@code 1e-3}): Double.valueOf, picocli's own
   * reading, also takes a type suffix and hexadecimal ({@code 4d}, {@code 0x1p2}), which
   * routing-sim's options refuse.
   */
  static final class DecimalConverter implements CommandLine.ITypeConverter<Double> {
    @Override
    public Double convert(String value) {
      String v = value.strip();
      if (!v.matches("[+-]?([0-9]+\\.?[0-9]*|\\.[0-9]+)([eE][+-]?[0-9]+)?")) {
        throw new CommandLine.TypeConversionException("'" + value + "' is not a decimal number");
      }
      return Double.parseDouble(v);
    }
  }

  /** A whole number of the range of a long, of any sign. */
  static final class LongConverter implements CommandLine.ITypeConverter<Long> {
    @Override
    public Long convert(String value) {
      try {
        return Long.parseLong(asciiInteger(value));
      } catch (NumberFormatException e) {
        throw new CommandLine.TypeConversionException("'" + value + "' is not a whole number");
      }
    }
  }

  private static int integer(String value) {
    try {
      return Integer.parseInt(asciiInteger(value));
    } catch (NumberFormatException e) {
      throw new CommandLine.TypeConversionException("'" + value + "' is not a whole number");
    }
  }

  /**
   * {@code value} stripped, when it is an optional sign and the digits 0-9: parseInt alone also
   * takes the digits of other scripts ("٣" and "３" read as 3), as routing-sim's options do not.
   */
  private static String asciiInteger(String value) {
    String v = value.strip();
    if (!v.matches("[+-]?[0-9]+")) {
      throw new NumberFormatException(value);
    }
    return v;
  }
}
