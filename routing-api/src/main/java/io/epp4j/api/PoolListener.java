package io.epp4j.api;

/**
 * Notified when endpoints join or leave the pool, or stay with new labels, for plugins that keep
 * per-endpoint state and must forget an endpoint that left (or read its labels again). Called on
 * the thread that changed the pool, one pool change at a time and in the order the pool made
 * them: when {@code onEndpointRemoved(e)} runs, no re-add of {@code e} has been announced yet.
 * Within one change (e.g. {@code Router.setEndpoints}) a listener hears the removals first, then
 * the members whose labels changed, then the additions. Keep these calls short, since the next
 * pool change waits for them (metrics updates and routing do not). An exception is logged and
 * does not undo the change or keep other listeners from hearing it.
 */
public interface PoolListener {

  default void onEndpointAdded(Endpoint endpoint) {}

  default void onEndpointRemoved(Endpoint endpoint) {}

  /**
   * A member stays in the pool at the same address ({@code previous.id()} equals
   * {@code current.id()}) but with different labels, e.g. a new weight. It is not announced as a
   * removal and an addition: the router keeps its metrics and in-flight counts, and a listener
   * should keep its per-endpoint state too, only taking the new labels. Called after the change's
   * removals and before its additions; routes may already see {@code current}. The default does
   * nothing, right for a listener that reads no labels; one that reads labels only when an
   * endpoint is added keeps the old ones until the endpoint is removed and added again.
   */
  default void onEndpointChanged(Endpoint previous, Endpoint current) {}

  /**
   * The member's engine has dropped its prefix cache while the endpoint stayed in the pool: its
   * metrics now say it sleeps ({@link EndpointMetrics#asleep()}; vLLM's sleep mode discards the
   * KV cache at every level, and an engine woken up starts with an empty one), or that its server
   * restarted at the same address (its {@link EndpointMetrics#processStartTimeSeconds() start
   * time} changed, or its {@link EndpointMetrics#promptTokensTotal() prompt-token counter} went
   * back; a scrape that failed meanwhile is no restart). A listener that models what the engine
   * holds from the requests it routed should forget the endpoint's blocks, or it would draw
   * prompts to a cache that is no longer there. Called once per transition from awake to asleep
   * and once per restart (once when an update shows both), on the thread that published the
   * metrics, after routes can see them; not ordered with pool changes, so the endpoint may have
   * left meanwhile (there is then nothing left to forget). The default does nothing.
   */
  default void onEndpointCacheDropped(Endpoint endpoint) {}
}
