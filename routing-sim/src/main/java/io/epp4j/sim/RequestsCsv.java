package io.epp4j.sim;

import java.io.BufferedWriter;
import java.io.Closeable;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Locale;
import java.util.function.Consumer;
import org.jspecify.annotations.Nullable;

/**
 * {@code --requests-csv}: one row per completed request of every run of a comparison, so that a
 * tail can be traced to the requests that form it (which turn, which replica, how much of the
 * prompt was cached, how crowded the replica was when the request arrived, and for a request
 * prefilled elsewhere, where and how long its KV took to arrive).
 */
final class RequestsCsv implements Closeable {
  static final String HEADER = "scenario,load_level,seed,policy,id,session,replica,arrival_s,"
      + "ttft_ms,e2e_ms,prompt_tokens,cached_tokens,output_tokens,preemptions,"
      + "waiting_at_arrival,running_at_arrival,kv_usage_at_arrival,prefill_replica,"
      + "decode_cached_tokens,transfer_ms";

  private final BufferedWriter out;

  private RequestsCsv(BufferedWriter out) {
    this.out = out;
  }

  /** The file opened with its header, or null when {@code path} is null. */
  static @Nullable RequestsCsv open(@Nullable Path path) throws IOException {
    if (path == null) {
      return null;
    }
    BufferedWriter w = Files.newBufferedWriter(path, StandardCharsets.UTF_8);
    w.write(HEADER);
    w.newLine();
    return new RequestsCsv(w);
  }

  /** Writes the requests of one run; an I/O error surfaces as an {@link UncheckedIOException}. */
  Consumer<Simulation.RequestRecord> rowsOf(String scenario, double loadLevel, long seed,
      String policy) {
    String prefix = Report.csvField(scenario) + "," + fmt(loadLevel) + "," + seed + ","
        + Report.csvField(policy) + ",";
    return r -> {
      try {
        out.write(prefix + Report.csvField(r.id()) + "," + Report.csvField(r.session()) + ","
            + r.replica() + "," + String.format(Locale.ROOT, "%.6f,%.3f,%.3f", r.arrivalSeconds(),
                r.ttftMs(), r.e2eMs())
            + "," + r.promptTokens() + "," + r.cachedTokens() + "," + r.outputTokens() + ","
            + r.preemptions() + "," + r.waitingAtArrival() + "," + r.runningAtArrival() + ","
            + String.format(Locale.ROOT, "%.4f", r.kvUsageAtArrival()) + ","
            + (r.disaggregated() ? r.prefillReplica() + "," + r.decodeCachedTokens() + ","
                + String.format(Locale.ROOT, "%.3f", r.transferMs()) : ",,"));
        out.newLine();
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    };
  }

  private static String fmt(double v) {
    return v == Math.rint(v) ? String.valueOf((long) v) : String.valueOf(v);
  }

  @Override
  public void close() throws IOException {
    out.close();
  }
}
