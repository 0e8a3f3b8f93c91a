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
    if (code != 0) {
      System.exit(code);
    }
    // 0 with a server started: its non-daemon threads keep the process alive
  }

  /** The parser, with errors printed as one line naming the option plus the synopsis. */
  static CommandLine commandLine(PrintWriter out, PrintWriter err) {
    CommandLine cl = new CommandLine(new GatewayCommand());
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
      sortOptions = false, subcommands = StandInCommand.class,
      description = {
          "An OpenAI-compatible gateway: epp4j picks the replica for each /v1/completions and "
              + "/v1/chat/completions request; GET /v1/models goes to any replica.",
          "Commands: stand-in (a stand-in vLLM server to try the gateway with)."})
  static final class GatewayCommand implements Callable<Integer> {
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

    /** The running gateway, once started. */
    @Nullable PlainGateway gateway;

    @Override
    public Integer call() throws IOException {
      // checked here rather than with required=true: picocli would demand it for stand-in too
      if (endpoints == null || endpoints.isEmpty()) {
        throw new ParameterException(spec.commandLine(),
            "Missing required option: '--endpoints=HOST:PORT[,HOST:PORT...]'");
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
        gateway = new PlainGateway(new InetSocketAddress(port), router);
      } catch (IOException e) { // the gateway has closed the router
        spec.commandLine().getErr().println(
            "plain-gateway: cannot listen on --port " + port + ": " + e.getMessage());
        return 1;
      }
      Runtime.getRuntime().addShutdownHook(new Thread(gateway::close, "plain-gateway-stop"));
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
              + "(vLLM names), /health."})
  static final class StandInCommand implements Callable<Integer> {
    @Spec CommandSpec spec;

    @Option(names = "--port", defaultValue = "8000", converter = PortConverter.class,
        description = "port to listen on (0: any free port); default ${DEFAULT-VALUE}")
    int port;

    @Option(names = "--model", defaultValue = "stand-in",
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

    @Option(names = "--force-include-usage",
        description = "end every stream with the usage chunk (vLLM's "
            + "--enable-force-include-usage); otherwise only when stream_options.include_usage")
    boolean forceIncludeUsage;

    /** The running server, once started. */
    @Nullable StandInVllm server;

    @Override
    public Integer call() {
      StandInVllm.Options o = new StandInVllm.Options(model, ttft, itl, kvBlocks, maxNumSeqs,
          maxModelLen, forceIncludeUsage);
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

  private static int integer(String value) {
    try {
      return Integer.parseInt(value.strip());
    } catch (NumberFormatException e) {
      throw new CommandLine.TypeConversionException("'" + value + "' is not a whole number");
    }
  }
}
