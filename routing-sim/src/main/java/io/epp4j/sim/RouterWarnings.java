package io.epp4j.sim;

import java.io.PrintStream;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.logging.Handler;
import java.util.logging.Level;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import org.jspecify.annotations.Nullable;

/**
 * Takes the library's log records ({@code io.epp4j.*}) away from the console for the length of a
 * comparison. A simulation routes thousands of requests in a second, so a plugin that throws on
 * every call would otherwise print one stack trace per request: here the first record of each
 * kind is shown in full and the repeats are counted per policy. With no stream (quiet) nothing is
 * shown; the simulator reports a policy that served nothing on its own.
 */
final class RouterWarnings extends Handler implements AutoCloseable {
  // a strong reference: JUL holds loggers weakly, and a collected logger loses its settings
  private final Logger logger = Logger.getLogger("io.epp4j");
  private final boolean usedParentHandlers;
  private final @Nullable PrintStream out;
  /** Records of each kind since the last summary; the key is the message and exception type. */
  private final Map<String, Integer> repeats = new LinkedHashMap<>();
  /** What each kind looks like in a summary: its level and message. */
  private final Map<String, String> shown = new java.util.HashMap<>();

  RouterWarnings(@Nullable PrintStream out) {
    this.out = out;
    this.usedParentHandlers = logger.getUseParentHandlers();
    setLevel(Level.ALL);
    logger.addHandler(this);
    logger.setUseParentHandlers(false);
  }

  @Override
  public synchronized void publish(LogRecord r) {
    if (!isLoggable(r)) {
      return;
    }
    Throwable t = r.getThrown();
    String key = r.getLevel() + " " + r.getMessage() + (t == null ? "" : " " + t.getClass().getName());
    if (!shown.containsKey(key)) {
      String text = r.getLevel().getName().toLowerCase(java.util.Locale.ROOT) + " from "
          + r.getLoggerName() + ": " + formatMessage(r);
      shown.put(key, text);
      if (out != null) {
        out.println(text);
        if (t != null) {
          t.printStackTrace(out);
        }
      }
    } else {
      repeats.merge(key, 1, Integer::sum);
    }
  }

  /** Prints how often the warnings already shown came back since the last summary. */
  synchronized void summarize(String label) {
    if (out != null) {
      for (Map.Entry<String, Integer> e : repeats.entrySet()) {
        out.printf("  %s: %d more like it (%s)%n", label, e.getValue(), shown.get(e.getKey()));
      }
    }
    repeats.clear();
  }

  private static String formatMessage(LogRecord r) {
    String m = r.getMessage();
    Object[] params = r.getParameters();
    if (m == null || params == null || params.length == 0) {
      return String.valueOf(m);
    }
    try {
      return java.text.MessageFormat.format(m, params);
    } catch (IllegalArgumentException e) {
      return m;
    }
  }

  @Override
  public void flush() {
    if (out != null) {
      out.flush();
    }
  }

  @Override
  public void close() {
    logger.removeHandler(this);
    logger.setUseParentHandlers(usedParentHandlers);
  }
}
