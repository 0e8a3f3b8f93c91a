package io.epp4j.envoy;

import io.grpc.ChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder;
import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;

/**
 * Tests that start {@link Main} on loopback as its command line would and talk to it over gRPC:
 * what a test starts or opens is closed after it, last first; what the program prints is kept in
 * {@link #out} and {@link #err}.
 */
abstract class MainProcessTest {
  static final String A = "10.0.0.1:8000";
  final List<AutoCloseable> toClose = new ArrayList<>();
  final ByteArrayOutputStream out = new ByteArrayOutputStream();
  final ByteArrayOutputStream err = new ByteArrayOutputStream();

  @AfterEach
  void closeAll() throws Exception {
    for (int i = toClose.size() - 1; i >= 0; i--) {
      toClose.get(i).close();
    }
  }

  /** A channel to {@code 127.0.0.1:port}, shut down after the test. */
  ManagedChannel channel(int port, ChannelCredentials credentials) {
    ManagedChannel ch = NettyChannelBuilder.forAddress("127.0.0.1", port, credentials).build();
    toClose.add(() -> ch.shutdownNow().awaitTermination(5, TimeUnit.SECONDS));
    return ch;
  }

  /** {@link Main} routing to {@link #A} on a free port, without scraping, plus {@code extra}. */
  Main.Running main(String... extra) throws Main.Exit {
    return mainOn("0", extra);
  }

  /** The same on {@code --port port}. */
  Main.Running mainOn(String port, String... extra) throws Main.Exit {
    List<String> args = new ArrayList<>(List.of("--endpoints", A, "--port", port, "--host",
        "127.0.0.1", "--metrics-enabled=false", "--drain-timeout", "1s"));
    args.addAll(List.of(extra));
    Main.Running r = Main.start(args.toArray(new String[0]),
        new PrintStream(out, true, StandardCharsets.UTF_8),
        new PrintStream(err, true, StandardCharsets.UTF_8));
    toClose.add(r);
    return r;
  }
}
