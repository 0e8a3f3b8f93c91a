package io.epp4j.kvevents;

import java.util.logging.Level;
import java.util.logging.Logger;
import org.jspecify.annotations.Nullable;

/**
 * Counts the KV-event messages a {@link KvEventSubscriber} drops and reports them in the log at
 * most once per {@link KvEventSubscriber#REPORT_INTERVAL} per kind: a publisher that sends
 * garbage sends it with every step, and one line with a count says as much as thousands. Names
 * a publisher chose are made printable and cut short before they reach the log.
 *
 * <p>Also decides which failures a message may cost ({@link #rethrowIfFatal}).
 *
 * <p>Threading: owned by the subscriber thread; the counters it updates are the index's
 * thread-safe metrics.
 */
final class DropReports {
  /** The subscriber's logger: its reports are the subscriber's. */
  private static final Logger LOG = Logger.getLogger(KvEventSubscriber.class.getName());

  private final KvEventMetrics metrics;
  private final Report malformed = new Report();
  private final Report unknownTopics = new Report();
  private final Report replaysUnavailable = new Report();
  private final Report wrongRanks = new Report();
  private final Report foreignTopics = new Report();

  DropReports(KvEventMetrics metrics) {
    this.metrics = metrics;
  }

  /** Rate limit of one kind of log report. */
  private static final class Report {
    long sinceReport;
    long lastNanos;
    boolean reported;

    /** Counts one occurrence; true when it is time to log (then the count starts over). */
    boolean due() {
      sinceReport++;
      long now = System.nanoTime();
      if (reported && now - lastNanos < KvEventSubscriber.REPORT_INTERVAL.toNanos()) {
        return false;
      }
      reported = true;
      lastNanos = now;
      return true;
    }
  }

  /**
   * Counts a dropped message in {@link KvEventMetrics#decodeErrors()} and reports it; the report
   * says how many were dropped since the previous one.
   */
  void dropped(String source, String reason, @Nullable Throwable failure) {
    metrics.decodeErrors.increment();
    if (!malformed.due()) {
      return;
    }
    String msg = "dropped " + malformed.sinceReport + " KV-event message(s) since the last report"
        + " (the total is the decodeErrors metric); the latest, from " + printable(source)
        + ": " + reason;
    malformed.sinceReport = 0;
    LOG.log(failure == null ? Level.WARNING : Level.SEVERE, msg, failure);
  }

  /**
   * Counts a central-mode message whose topic names no pool member; reported like
   * {@link #dropped}. Publishers that reach the bound port and are not in the pool (a
   * misconfigured engine, an engine whose endpoint already left, or a hostile sender) show here.
   */
  void unknownTopic(String endpointId) {
    metrics.unknownEndpointMessages.increment();
    if (!unknownTopics.due()) {
      return;
    }
    String msg = "dropped " + unknownTopics.sinceReport + " KV-event message(s) since the last"
        + " report whose topic names an endpoint not in the pool (the total is the"
        + " unknownEndpointMessages metric); the latest for " + printable(endpointId);
    unknownTopics.sinceReport = 0;
    LOG.warning(msg);
  }

  /**
   * Counts a message whose topic does not start with the topic filter, in
   * {@link KvEventMetrics#foreignTopicMessages()}; reported like {@link #dropped}, naming the
   * topic (an engine's setting, never request content) and what to change. The usual cause is an
   * engine left on vLLM's default empty topic.
   */
  void foreignTopic(String source, String topic, String topicFilter) {
    metrics.foreignTopicMessages.increment();
    if (!foreignTopics.due()) {
      return;
    }
    String msg = "dropped " + foreignTopics.sinceReport + " KV-event message(s) since the last"
        + " report whose topic does not start with the topic filter '" + printable(topicFilter)
        + "' (the total is the foreignTopicMessages metric); the latest, from "
        + printable(source) + ", had the topic '" + printable(topic) + "'. vLLM publishes with"
        + " an empty topic unless its --kv-events-config sets \"topic\" (kv@<ip:port>@<model>);"
        + " set that, or set kvEvents.topicFilter to the engines' topic prefix (\"\" accepts"
        + " every topic; central mode needs kv@<ip:port>@<model> to tell engines apart)";
    foreignTopics.sinceReport = 0;
    LOG.warning(msg);
  }

  /**
   * Reports that an endpoint's replay address was refused (a host name that does not resolve, a
   * port ZeroMQ refuses). Nothing is dropped: the stream goes on without replays, and a gap in it is
   * resynced. Logged like {@link #dropped}, at most once per interval.
   */
  void replayUnavailable(String endpointId, String address, Exception failure) {
    if (!replaysUnavailable.due()) {
      return;
    }
    String msg = "cannot open the KV-event replay socket of endpoint " + printable(endpointId)
        + " at " + printable(address) + " (" + replaysUnavailable.sinceReport + " time(s) since"
        + " the last report): " + failure.getMessage() + "; its gaps are resynced instead";
    replaysUnavailable.sinceReport = 0;
    LOG.warning(msg);
  }

  /**
   * Counts a batch dropped because it names another data-parallel rank than the endpoint whose
   * stream delivered it, in {@link KvEventMetrics#wrongRankBatches()}; logged like
   * {@link #dropped}, at most once per interval. Every batch of such a stream is another
   * rank's: the ports configured do not match the engine's ranks.
   */
  void wrongRank(String endpointId, int expectedRank, int batchRank) {
    metrics.wrongRankBatches.increment();
    if (!wrongRanks.due()) {
      return;
    }
    String msg = "dropped " + wrongRanks.sinceReport + " KV-event batch(es) since the last report"
        + " whose data_parallel_rank is not their endpoint's rank (the total is the"
        + " wrongRankBatches metric); the latest, for endpoint " + printable(endpointId)
        + " (rank " + expectedRank + "), came from rank " + batchRank + ": check that"
        + " kvEvents.port, dataParallelFirstPort and the port labels match the engine's ranks";
    wrongRanks.sinceReport = 0;
    LOG.warning(msg);
  }

  /** A publisher-chosen name, safe to put on one log line. */
  private static String printable(String s) {
    StringBuilder b = new StringBuilder(Math.min(s.length(), 100));
    for (int i = 0; i < s.length() && i < 100; i++) {
      char c = s.charAt(i);
      b.append(Character.isISOControl(c) ? '?' : c);
    }
    return s.length() > 100 ? b.append("...").toString() : b.toString();
  }

  /**
   * Errors after which nothing can be trusted any more end the thread; everything else a message
   * causes (a stack overflow, a failed allocation, a bug in a listener) costs only that message.
   */
  static void rethrowIfFatal(Throwable t) {
    if (t instanceof VirtualMachineError && !(t instanceof StackOverflowError)
        && !(t instanceof OutOfMemoryError)) {
      throw (VirtualMachineError) t;
    }
  }
}
