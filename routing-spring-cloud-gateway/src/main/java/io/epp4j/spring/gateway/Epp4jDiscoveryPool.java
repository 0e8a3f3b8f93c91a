package io.epp4j.spring.gateway;

import io.epp4j.api.Endpoint;
import io.epp4j.core.Router;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.logging.Level;
import java.util.logging.Logger;
import org.jspecify.annotations.Nullable;
import org.springframework.cloud.client.ServiceInstance;
import org.springframework.cloud.client.discovery.DiscoveryClient;

/**
 * Keeps the router's pool equal to the instances a {@link DiscoveryClient} lists for one service,
 * looked up at a fixed interval on a daemon thread of its own. A failed lookup keeps the pool as
 * it is; an empty answer empties it (requests then get 503), as the registry says. An instance
 * without a usable host and port is left out, with a warning naming it.
 *
 * <p>Only an instance's host and port are taken: the pool's replicas are all called with the
 * pool's scheme ({@code epp4j.scheme} or the pool's own), as listed endpoints are, so an
 * instance's {@link ServiceInstance#isSecure()} is not read (a pool has one scheme, for its
 * requests and its metrics scrapes; an {@code Endpoint} carries none).
 */
public class Epp4jDiscoveryPool implements AutoCloseable {
  private static final Logger LOG = Logger.getLogger(Epp4jDiscoveryPool.class.getName());

  private final Router router;
  private final DiscoveryClient discovery;
  private final String serviceId;
  private final Duration interval;
  private final ScheduledExecutorService timer;
  private String lastSkipped = ""; // only the timer's thread reads and writes it
  // set by close(), under the lock, which a lookup takes to apply its instances: once close()
  // returned, no lookup still in progress (one blocked in the registry's client, which need not
  // heed the interrupt) can set the endpoints of a router that is being closed after it
  private final Object applyLock = new Object();
  private boolean closed;

  public Epp4jDiscoveryPool(Router router, DiscoveryClient discovery, String serviceId,
      Duration interval) {
    this(router, discovery, serviceId, interval, "epp4j.discovery.refresh-interval",
        "epp4j-discovery");
  }

  /**
   * @param intervalProperty the property {@code interval} came from, for the error message
   * @param threadName name of the lookup thread
   */
  Epp4jDiscoveryPool(Router router, DiscoveryClient discovery, String serviceId,
      Duration interval, String intervalProperty, String threadName) {
    if (interval.isNegative() || interval.isZero()) {
      throw new Epp4jConfigurationException(
          intervalProperty + " must be positive, got " + interval);
    }
    this.router = router;
    this.discovery = discovery;
    this.serviceId = serviceId;
    this.interval = interval;
    this.timer = Executors.newSingleThreadScheduledExecutor(r -> {
      Thread t = new Thread(r, threadName);
      t.setDaemon(true);
      return t;
    });
    // in nanoseconds: a positive interval under a millisecond is 0 ms, which the executor refuses
    timer.scheduleWithFixedDelay(this::refresh, 0, nanos(interval), TimeUnit.NANOSECONDS);
  }

  /** The service whose instances are the pool. */
  String serviceId() {
    return serviceId;
  }

  /** The time between two lookups. */
  Duration interval() {
    return interval;
  }

  /**
   * One lookup. Nothing may escape: an exception thrown out of a task of a
   * {@link ScheduledExecutorService} cancels every later run, silently, and the pool would stop
   * following the registry for good.
   */
  void refresh() {
    @Nullable List<ServiceInstance> instances;
    try {
      instances = discovery.getInstances(serviceId);
    } catch (RuntimeException e) {
      LOG.log(Level.WARNING, "epp4j: looking up service '" + serviceId + "' failed; keeping the"
          + " current pool", e);
      return;
    }
    if (instances == null) {
      // no list is no answer (the contract has none for null): taken as a failed lookup, where a
      // NullPointerException would have ended the lookups for good
      LOG.warning("epp4j: looking up service '" + serviceId + "' gave no list; keeping the"
          + " current pool");
      return;
    }
    List<Endpoint> pool = new ArrayList<>(instances.size());
    List<String> unusable = new ArrayList<>();
    for (ServiceInstance i : instances) {
      if (i == null) {
        unusable.add("null");
        continue;
      }
      try {
        // host and port, and the labels (the prefill/decode role among them) from the instance's
        // metadata: the pool's scheme, not isSecure(), says how the replica is called
        pool.add(Endpoint.of(i.getHost(), i.getPort(), labelsOf(i)));
      } catch (RuntimeException e) { // no host, or a port outside 1..65535
        unusable.add("'" + i.getInstanceId() + "' (" + i.getHost() + ":" + i.getPort() + ": "
            + e.getMessage() + ")");
      }
    }
    String skipped = String.join(", ", unusable);
    if (!skipped.isEmpty() && !skipped.equals(lastSkipped)) { // once, not at every lookup
      LOG.warning("epp4j: service '" + serviceId + "' lists instances that are not a host and"
          + " port, left out of the pool: " + skipped);
    }
    lastSkipped = skipped;
    synchronized (applyLock) {
      if (closed) {
        return;
      }
      try {
        router.setEndpoints(pool);
      } catch (RuntimeException e) { // a pool listener that threw, for example
        LOG.log(Level.WARNING, "epp4j: applying the instances of service '" + serviceId
            + "' failed", e);
      }
    }
  }

  /** {@code d} in nanoseconds; a duration beyond {@code Long.MAX_VALUE} of them is that many. */
  private static long nanos(Duration d) {
    try {
      return d.toNanos();
    } catch (ArithmeticException e) {
      return Long.MAX_VALUE;
    }
  }

  /**
   * Stops the lookups. A lookup still waiting for the registry when this returns does not apply
   * its answer, so the router may be closed right after.
   */
  @Override
  public void close() {
    synchronized (applyLock) {
      closed = true;
    }
    timer.shutdownNow();
  }

  /**
   * The instance's metadata as its labels: Kubernetes discovery copies a pod's labels there, and
   * the label plugins (label selectors, topology, context length, header-label affinity, the
   * engine of the endpoint-attribute plugins) read them as upstream reads the pod's. Entries
   * without a name or a value are left out. A {@value Endpoint#ROLE_LABEL} that is not one of
   * {@link Endpoint#ROLES} is an error for this instance alone.
   */
  static java.util.Map<String, String> labelsOf(ServiceInstance i) {
    java.util.Map<String, String> metadata = i.getMetadata();
    if (metadata == null || metadata.isEmpty()) {
      return java.util.Map.of();
    }
    java.util.Map<String, String> labels = new java.util.HashMap<>();
    metadata.forEach((k, v) -> {
      if (k != null && v != null) {
        labels.put(k, v);
      }
    });
    String role = labels.get(Endpoint.ROLE_LABEL);
    if (role != null) {
      if (!Endpoint.ROLES.contains(role.strip())) {
        throw new IllegalArgumentException("metadata " + Endpoint.ROLE_LABEL + " must be one of "
            + new java.util.TreeSet<>(Endpoint.ROLES) + ", got '" + role + "'");
      }
      labels.put(Endpoint.ROLE_LABEL, role.strip());
    }
    return labels;
  }
}
