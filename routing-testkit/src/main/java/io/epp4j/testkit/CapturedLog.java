package io.epp4j.testkit;

import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.logging.Handler;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import java.util.logging.SimpleFormatter;

/**
 * What a test's code logs through {@code java.util.logging} (the logging epp4j uses), formatted
 * as a log file would show it: each record's message, its exception's class and message, its
 * frames, causes and suppressed exceptions. epp4j promises that no prompt reaches a log; a plugin
 * that logs the exceptions it meets can check the same promise:
 *
 * <pre>{@code
 * try (CapturedLog log = CapturedLog.of("com.example")) {
 *   ... // make the plugin fail on a request whose prompt holds a secret
 *   assertThat(log.text()).contains("IllegalStateException").doesNotContain(secret);
 * }
 * }</pre>
 *
 * <p>Records are captured from every thread until {@link #close()}; the logger keeps its level,
 * so only records it lets through are captured.
 */
public final class CapturedLog implements AutoCloseable {
  private final Logger logger;
  private final List<String> records = new CopyOnWriteArrayList<>();
  private final Handler handler;

  private CapturedLog(String loggerName) {
    // held here: java.util.logging keeps only weak references to loggers
    this.logger = Logger.getLogger(loggerName);
    SimpleFormatter format = new SimpleFormatter();
    this.handler = new Handler() {
      @Override
      public void publish(LogRecord r) {
        records.add(format.format(r));
      }

      @Override
      public void flush() {}

      @Override
      public void close() {}
    };
    logger.addHandler(handler);
  }

  /** Captures the records of logger {@code loggerName} and of the loggers below it. */
  public static CapturedLog of(String loggerName) {
    return new CapturedLog(loggerName);
  }

  /** Each record captured so far, formatted, in the order they were logged. */
  public List<String> records() {
    return List.copyOf(records);
  }

  /** Every record captured so far, formatted, one after the other. */
  public String text() {
    return String.join("\n", records);
  }

  /** Stops capturing. */
  @Override
  public void close() {
    logger.removeHandler(handler);
  }
}
