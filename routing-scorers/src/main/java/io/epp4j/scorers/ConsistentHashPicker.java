package io.epp4j.scorers;

import io.epp4j.api.Candidate;
import io.epp4j.api.CycleState;
import io.epp4j.api.Endpoint;
import io.epp4j.api.InferenceRequest;
import io.epp4j.api.Picker;
import io.epp4j.api.PoolListener;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReferenceArray;
import org.jspecify.annotations.Nullable;

/**
 * Common part of {@code ring-hash-picker} and {@code maglev-picker}: the request key, the
 * placement table (rebuilt only when the candidates' ids or weights change), optional bounded
 * load and fallbacks. The request hash is {@code XXH64(key, seed 0)} as in Envoy; a request
 * without a key gets a random hash from the cycle's random source, as Envoy does.
 */
abstract class ConsistentHashPicker implements Picker, PoolListener {
  /**
   * Label holding an endpoint's integer weight, 1 to {@link Integer#MAX_VALUE}; absent, or not
   * such an integer, it is 1.
   */
  static final String WEIGHT_LABEL = "epp4j.io/weight";

  /**
   * A placement table built for one candidate list. It reads each endpoint's address
   * ({@link Endpoint#id()}) and weight and nothing else, so it serves any list with the same
   * addresses and weights in the same order, whatever their other labels: a discovery that
   * relabels a member (its zone, its version) costs no rebuild. Picks return the candidates
   * given, never {@link #endpoints}, which keep the labels of the list the table was built for.
   */
  abstract static class Table {
    final Endpoint[] endpoints;
    final double[] normalizedWeights;
    private final int[] weights;

    Table(List<Candidate> candidates) {
      this(endpointsOf(candidates));
    }

    Table(Endpoint[] endpoints) {
      int n = endpoints.length;
      this.endpoints = endpoints;
      normalizedWeights = new double[n];
      weights = new int[n];
      long sum = 0;
      for (int i = 0; i < n; i++) {
        weights[i] = weight(endpoints[i]);
        sum += weights[i];
      }
      for (int i = 0; i < n; i++) {
        // same arithmetic as Envoy: weight * locality weight (1.0) / sum, in double
        normalizedWeights[i] = weights[i] * 1.0 / sum;
      }
    }

    /** Whether {@code e} takes the place of the {@code i}-th endpoint: same address and weight. */
    private boolean samePlace(Endpoint e, int i) {
      Endpoint mine = endpoints[i];
      return e == mine || (e.id().equals(mine.id()) && weight(e) == weights[i]);
    }

    /**
     * Whether this table stands in for another until that one is built: placements are not
     * Envoy's, and the table is replaced as soon as the exact one is ready.
     */
    boolean provisional() {
      return false;
    }

    final boolean matches(Endpoint[] others) {
      if (others.length != endpoints.length) {
        return false;
      }
      for (int i = 0; i < endpoints.length; i++) {
        if (!samePlace(others[i], i)) {
          return false;
        }
      }
      return true;
    }

    final boolean matches(List<Candidate> candidates) {
      if (candidates.size() != endpoints.length) {
        return false;
      }
      for (int i = 0; i < endpoints.length; i++) {
        if (!samePlace(candidates.get(i).endpoint(), i)) {
          return false;
        }
      }
      return true;
    }

    /** Position of a request hash in the table. */
    abstract int position(long hash);

    /** Candidate index at a position; -1 for a position no candidate holds. */
    abstract int hostAt(int position);

    /** Number of positions. */
    abstract int size();
  }

  /**
   * Another candidate list's table read for these candidates while their own is being built:
   * a position whose host is not among them passes to the next one clockwise that is, so a
   * request whose host stays keeps it, as Envoy's workers keep their previous ring until the
   * rebuilt one reaches them.
   */
  static final class Restricted extends Table {
    private final Table base;
    private final int[] hostOf; // base host -> index among these endpoints, or -1
    final int present;

    Restricted(Table base, Endpoint[] endpoints) {
      super(endpoints);
      this.base = base;
      Map<String, Integer> index = new HashMap<>(endpoints.length * 2);
      for (int i = 0; i < endpoints.length; i++) {
        index.put(endpoints[i].id(), i);
      }
      hostOf = new int[base.endpoints.length];
      int found = 0;
      for (int h = 0; h < hostOf.length; h++) {
        Integer i = index.get(base.endpoints[h].id());
        hostOf[h] = i == null ? -1 : i;
        if (i != null) {
          found++;
        }
      }
      present = found;
    }

    @Override
    boolean provisional() {
      return true;
    }

    @Override
    int position(long hash) {
      int size = base.size();
      int p = base.position(hash);
      for (int step = 0; step < size && hostAt(p) < 0; step++) {
        p = p + 1 == size ? 0 : p + 1;
      }
      return p;
    }

    @Override
    int hostAt(int position) {
      return hostOf[base.hostAt(position)];
    }

    @Override
    int size() {
      return base.size();
    }
  }

  /**
   * Entries a background build makes between two looks at whether the picker has closed: a few
   * microseconds of work, so {@link #close()} stops a build of millions of entries at once.
   */
  static final int STOP_CHECK_INTERVAL = 4096;

  /** Thrown out of a table's construction when the picker closed meanwhile. */
  static final class BuildStopped extends RuntimeException {
    private static final long serialVersionUID = 1L;

    BuildStopped() {
      super("picker closed", null, false, false);
    }
  }

  /** For the builds of a route, which are small and never stopped. */
  static final java.util.function.BooleanSupplier NEVER = () -> false;

  /**
   * Tables of more entries than this are built off the routing thread (when the pool changes,
   * or after a route meets a candidate list without one): about 10 ms of work at most, so a route
   * that builds one does not stall.
   */
  static final int ROUTE_BUILD_LIMIT = 1 << 16;

  private final HashKeySource keySource;
  private final double balanceFactor;
  private final int maxEndpoints;
  // a few recent tables, so that filters alternating between candidate sets do not rebuild
  private static final int CACHED_TABLES = 4;
  private final AtomicReferenceArray<Table> tables = new AtomicReferenceArray<>(CACHED_TABLES);
  private final AtomicInteger nextSlot = new AtomicInteger();
  /** Tables built on the routing thread, inside {@link #pick} (for tests). */
  final AtomicInteger routeBuilds = new AtomicInteger();
  /** The most recently built exact table, read for new candidates until theirs is built. */
  private volatile @Nullable Table latest;
  /** The pool as announced, in the router's order; also the lock of the builder's set-up. */
  private final LinkedHashMap<String, Endpoint> pool = new LinkedHashMap<>();
  private final AtomicBoolean poolBuildQueued = new AtomicBoolean();
  /** Candidate lists whose exact table is queued or being built. */
  private final Set<List<Endpoint>> requested = ConcurrentHashMap.newKeySet();
  /**
   * Builds for candidate lists queued or under way, at most {@link #CACHED_TABLES}: the cache
   * keeps no more tables than that, so building further ones ahead would only evict the first
   * ones, and filters that give each request another subset of the pool would queue builds
   * faster than one thread makes them, without bound. A list asked for while the queue is full
   * is asked for again by its next route (its stand-in stays in the cache, or is made anew).
   */
  private final AtomicInteger queuedBuilds = new AtomicInteger();
  private volatile @Nullable ThreadPoolExecutor builder;
  /** Set under {@code pool}; read without it by the builds, which stop once it is set. */
  private volatile boolean closed;
  /** Runs at each of a background build's looks at {@link #closed} (for tests). */
  volatile @Nullable Runnable buildCheckHook;
  /** Whether a background build should stop: the picker has closed. */
  private final java.util.function.BooleanSupplier stop = () -> {
    Runnable hook = buildCheckHook;
    if (hook != null) {
      hook.run();
    }
    return closed;
  };

  ConsistentHashPicker(HashKeySource keySource, double balanceFactor, int maxEndpoints) {
    if (balanceFactor != 0 && !(balanceFactor >= 1.0)) {
      throw new IllegalArgumentException("balanceFactor must be 0 (off) or >= 1, got " + balanceFactor);
    }
    if (maxEndpoints < 1) {
      throw new IllegalArgumentException("maxNumOfEndpoints must be >= 1, got " + maxEndpoints);
    }
    this.keySource = keySource;
    this.balanceFactor = balanceFactor;
    this.maxEndpoints = maxEndpoints;
  }

  static int weight(Endpoint e) {
    String w = e.label(WEIGHT_LABEL);
    if (w == null) {
      return 1;
    }
    String digits = w.trim();
    // ASCII digits only: Integer.parseInt alone also reads other scripts' digits ("٣", "３")
    // and a sign, and such a label is not the integer the weight label is documented to hold
    for (int i = 0; i < digits.length(); i++) {
      char c = digits.charAt(i);
      if (c < '0' || c > '9') {
        return 1;
      }
    }
    try {
      int v = Integer.parseInt(digits);
      // any weight Envoy takes for one endpoint that an int holds; the sums are longs and the
      // ring's size is bounded by maximumRingSize whatever the spread
      return v >= 1 ? v : 1;
    } catch (NumberFormatException ex) {
      return 1;
    }
  }

  abstract Table build(List<Candidate> candidates);

  /**
   * Largest table, in entries, that a route builds itself ({@link #ROUTE_BUILD_LIMIT} unless a
   * picker's own default table is a little larger); larger ones are built off the routing thread.
   */
  long routeBuildLimit() {
    return ROUTE_BUILD_LIMIT;
  }

  /**
   * Entries a table for these endpoints would hold, to choose where it is built; 0 (the default)
   * builds every table on the route that first needs it.
   */
  long plannedSize(Endpoint[] endpoints) {
    return 0;
  }

  /**
   * The exact table for {@code endpoints}; called off the routing thread. Asks {@code stop}
   * every {@link #STOP_CHECK_INTERVAL} entries or so and throws {@link BuildStopped} once it
   * answers true.
   */
  Table build(Endpoint[] endpoints, java.util.function.BooleanSupplier stop) {
    throw new UnsupportedOperationException();
  }

  /**
   * A table of at most about {@link #routeBuildLimit()} entries that stands in for the exact one
   * of a large table when no other table is at hand.
   */
  Table provisional(Endpoint[] endpoints) {
    throw new UnsupportedOperationException();
  }

  /**
   * The table for these candidates: a cached one; else, when small, one built here; else the
   * stand-in for it (the last exact table read for these candidates, or a provisional one when
   * none was built yet) while the exact one is built on the builder thread.
   */
  final Table tableFor(List<Candidate> candidates) {
    Table stopgap = null;
    for (int i = 0; i < CACHED_TABLES; i++) {
      Table t = tables.get(i);
      if (t != null && t.matches(candidates)) {
        if (!t.provisional()) {
          return t;
        }
        stopgap = t;
      }
    }
    if (stopgap != null) {
      // its exact table is being built, or was built and has since left the cache while this
      // stand-in stayed (two routes that missed at once each installed one, and the exact table
      // replaced only one of them): asked for again, it is built once more in the second case
      // and the request is dropped as a duplicate in the first
      buildLater(stopgap.endpoints);
      return stopgap;
    }
    Endpoint[] eps = endpointsOf(candidates);
    if (plannedSize(eps) <= routeBuildLimit()) {
      // racing builders produce equal tables; a duplicate only wastes a slot
      Table t = build(candidates);
      routeBuilds.incrementAndGet();
      installOnRoute(t);
      return t;
    }
    buildLater(eps);
    Table last = latest;
    if (last != null) {
      Restricted r = new Restricted(last, eps);
      if (r.present > 0) {
        installOnRoute(r);
        return r;
      }
    }
    Table t = provisional(eps);
    installOnRoute(t);
    return t;
  }

  /**
   * Caches a table a route made, unless the picker has closed: a route that still reaches a
   * closed picker (it read the configuration before a reload retired the picker) is answered
   * from its table, which is then dropped. {@link #close()} sets {@link #closed} before it empties
   * the cache, so a table installed after the emptying is seen here and dropped again.
   */
  private void installOnRoute(Table t) {
    if (closed) {
      return;
    }
    install(t);
    if (closed) {
      releaseTables();
    }
  }

  /**
   * Caches {@code t}, in place of a stand-in for the same endpoints if there is one
   * (package-private for tests, which install a second stand-in as two racing routes would).
   */
  void install(Table t) {
    if (!t.provisional()) {
      latest = t;
      for (int i = 0; i < CACHED_TABLES; i++) {
        Table old = tables.get(i);
        if (old != null && old.provisional() && old.matches(t.endpoints)
            && tables.compareAndSet(i, old, t)) {
          return;
        }
      }
    }
    tables.set((nextSlot.getAndIncrement() & Integer.MAX_VALUE) % CACHED_TABLES, t);
  }

  /**
   * Caches a table built on the builder thread unless the picker has closed: {@link #close()}
   * empties the cache under the same lock, so no table outlives it.
   */
  private void installIfOpen(Table t) {
    synchronized (pool) {
      if (!closed) {
        install(t);
      }
    }
  }

  /** Tables held: cached ones and the last exact one, each counted once (for tests). */
  int heldTables() {
    Set<Table> held = java.util.Collections.newSetFromMap(new java.util.IdentityHashMap<>());
    for (int i = 0; i < CACHED_TABLES; i++) {
      Table t = tables.get(i);
      if (t != null) {
        held.add(t);
      }
    }
    Table last = latest;
    if (last != null) {
      held.add(last);
    }
    return held.size();
  }

  private @Nullable Table cachedExact(Endpoint[] eps) {
    for (int i = 0; i < CACHED_TABLES; i++) {
      Table t = tables.get(i);
      if (t != null && !t.provisional() && t.matches(eps)) {
        return t;
      }
    }
    return null;
  }

  /** Builds the exact table for {@code eps} on the builder thread, once however many ask. */
  private void buildLater(Endpoint[] eps) {
    List<Endpoint> key = List.of(eps);
    if (!requested.add(key)) {
      return;
    }
    if (queuedBuilds.incrementAndGet() > CACHED_TABLES) {
      buildDone(key); // full: the list's next route asks again
      return;
    }
    try {
      builder().execute(() -> {
        try {
          if (cachedExact(eps) == null) {
            installIfOpen(build(eps, stop));
          }
        } catch (BuildStopped closedMeanwhile) {
          // nothing to install
        } finally {
          buildDone(key);
        }
      });
    } catch (RejectedExecutionException closedMeanwhile) {
      buildDone(key);
    }
  }

  private void buildDone(List<Endpoint> key) {
    requested.remove(key);
    queuedBuilds.decrementAndGet();
  }

  /** Builds for candidate lists queued or under way (for tests). */
  int queuedListBuilds() {
    return requested.size();
  }

  @Override
  public void onEndpointAdded(Endpoint endpoint) {
    synchronized (pool) {
      pool.remove(endpoint.id()); // an announcement of a member again moves it last, as the router
      pool.put(endpoint.id(), endpoint);
    }
    poolChanged();
  }

  @Override
  public void onEndpointRemoved(Endpoint endpoint) {
    synchronized (pool) {
      pool.remove(endpoint.id());
    }
    poolChanged();
  }

  /**
   * A member's labels changed (its weight, say): the pool's table changes as for a join or a
   * leave. The member keeps its place in the pool's order, as it does in the router's.
   */
  @Override
  public void onEndpointChanged(Endpoint previous, Endpoint current) {
    synchronized (pool) {
      pool.put(current.id(), current); // same id: replaced in place
    }
    poolChanged();
  }

  /**
   * The pool changed: when its table is large, builds it on the builder thread, which reads the
   * pool as it is by then, so a batch of announcements costs one build.
   */
  private void poolChanged() {
    Endpoint[] eps;
    synchronized (pool) {
      eps = pool.values().toArray(new Endpoint[0]);
    }
    if (eps.length == 0 || plannedSize(eps) <= routeBuildLimit()
        || !poolBuildQueued.compareAndSet(false, true)) {
      return;
    }
    try {
      builder().execute(() -> {
        poolBuildQueued.set(false);
        Endpoint[] now;
        synchronized (pool) {
          now = pool.values().toArray(new Endpoint[0]);
        }
        if (now.length > 0 && plannedSize(now) > routeBuildLimit() && cachedExact(now) == null) {
          try {
            installIfOpen(build(now, stop));
          } catch (BuildStopped closedMeanwhile) {
            // nothing to install
          }
        }
      });
    } catch (RejectedExecutionException closedMeanwhile) {
      poolBuildQueued.set(false);
    }
  }

  /** One daemon thread, started on first use and stopped after a minute without work. */
  private ThreadPoolExecutor builder() {
    ThreadPoolExecutor b = builder;
    if (b == null) {
      synchronized (pool) {
        b = builder;
        if (b == null) {
          b = new ThreadPoolExecutor(1, 1, 60, TimeUnit.SECONDS, new LinkedBlockingQueue<>(),
              r -> {
                Thread t = new Thread(r, "epp4j-" + getClass().getSimpleName() + "-build");
                t.setDaemon(true);
                return t;
              });
          b.allowCoreThreadTimeOut(true);
          if (closed) {
            b.shutdown();
          }
          builder = b;
        }
      }
    }
    return b;
  }

  /** Runs {@code task} on the builder thread, before builds asked for later (for tests). */
  void onBuilder(Runnable task) {
    builder().execute(task);
  }

  /** Whether the builder thread's executor exists (for tests). */
  boolean builderStarted() {
    return builder != null;
  }

  /** Waits until no table is being built or waiting to be (for tests). */
  boolean awaitBuilds(long timeout, TimeUnit unit) throws InterruptedException {
    ThreadPoolExecutor b = builder;
    if (b == null) {
      return true;
    }
    long deadline = System.nanoTime() + unit.toNanos(timeout);
    // a task queued behind the barrier would be missed: loop until the queue stays empty
    do {
      java.util.concurrent.CountDownLatch done = new java.util.concurrent.CountDownLatch(1);
      try {
        b.execute(done::countDown);
      } catch (RejectedExecutionException closedMeanwhile) {
        return b.awaitTermination(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
      }
      if (!done.await(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS)) {
        return false;
      }
    } while (!b.getQueue().isEmpty() || !requested.isEmpty() || poolBuildQueued.get());
    return true;
  }

  /**
   * Stops the builder thread: a build under way stops at its next look at {@link #closed} (within
   * {@link #STOP_CHECK_INTERVAL} entries) and installs nothing; the cached tables are released,
   * and a route that still reaches the picker afterwards is answered without caching its table.
   */
  @Override
  public void close() {
    synchronized (pool) {
      closed = true;
      if (builder != null) {
        builder.shutdownNow();
      }
      releaseTables();
    }
  }

  private void releaseTables() {
    for (int i = 0; i < CACHED_TABLES; i++) {
      tables.set(i, null);
    }
    latest = null;
  }

  static Endpoint[] endpointsOf(List<Candidate> candidates) {
    Endpoint[] eps = new Endpoint[candidates.size()];
    for (int i = 0; i < eps.length; i++) {
      eps[i] = candidates.get(i).endpoint();
    }
    return eps;
  }

  /** The request's hash: XXH64 of its key, or a random value when it has none. */
  final long requestHash(InferenceRequest request, CycleState state) {
    String key = keySource.key(request);
    return key != null ? Xxh64.hash(key, 0) : state.random().nextLong();
  }

  @Override
  public List<Candidate> pick(InferenceRequest request, CycleState state, List<Candidate> candidates,
      double[] scores) {
    int n = candidates.size();
    if (n == 0) {
      return List.of();
    }
    Table t = tableFor(candidates);
    int pos = t.position(requestHash(request, state));
    if (balanceFactor == 0 && maxEndpoints == 1) {
      return List.of(candidates.get(t.hostAt(pos)));
    }
    int k = Math.min(maxEndpoints, n);
    long totalInFlight = 0;
    if (balanceFactor != 0) {
      for (int i = 0; i < n; i++) {
        totalInFlight += candidates.get(i).inFlightRequests();
      }
    }
    boolean[] seen = new boolean[n];
    int[] chosen = new int[n];
    int chosenCount = 0;
    int[] overloaded = new int[n];
    int overloadedCount = 0;
    int distinct = 0;
    int size = t.size();
    // a stand-in read from another candidate list's table places only the candidates that list
    // had: the walk stops once it has met them all instead of going round the whole table
    int placed = t instanceof Restricted r ? r.present : n;
    // walk clockwise from the hashed position; the first distinct hosts are primary then fallbacks
    for (int step = 0; step < size && chosenCount < k && distinct < placed; step++) {
      int p = pos + step;
      if (p >= size) {
        p -= size;
      }
      int host = t.hostAt(p);
      if (host < 0 || seen[host]) {
        continue;
      }
      seen[host] = true;
      distinct++;
      if (balanceFactor != 0
          && isOverloaded(candidates.get(host), t.normalizedWeights[host], totalInFlight)) {
        overloaded[overloadedCount++] = host;
      } else {
        chosen[chosenCount++] = host;
      }
    }
    // candidates the table has no position for (newcomers while their table is being built, hosts
    // a table too small left out) complete the fallbacks after those it placed, in their order
    for (int i = 0; i < n && chosenCount < k && distinct < n; i++) {
      if (seen[i]) {
        continue;
      }
      seen[i] = true;
      distinct++;
      if (balanceFactor != 0
          && isOverloaded(candidates.get(i), t.normalizedWeights[i], totalInFlight)) {
        overloaded[overloadedCount++] = i;
      } else {
        chosen[chosenCount++] = i;
      }
    }
    // every host overloaded (or too few left): take overloaded ones in clockwise order
    for (int i = 0; i < overloadedCount && chosenCount < k; i++) {
      chosen[chosenCount++] = overloaded[i];
    }
    if (chosenCount == 1) {
      return List.of(candidates.get(chosen[0]));
    }
    List<Candidate> out = new ArrayList<>(chosenCount);
    for (int i = 0; i < chosenCount; i++) {
      out.add(candidates.get(chosen[i]));
    }
    return out;
  }

  /**
   * Bounded load (consistent hashing with bounded loads): an endpoint may take a new request
   * while its in-flight count is below {@code ceil((total + 1) × factor × weight)} (at least 1).
   */
  private boolean isOverloaded(Candidate c, double normalizedWeight, long totalInFlight) {
    double slots = Math.max(1.0, Math.ceil((totalInFlight + 1) * balanceFactor * normalizedWeight));
    return c.inFlightRequests() >= slots;
  }

  final int maxNumOfEndpoints() {
    return maxEndpoints;
  }
}
