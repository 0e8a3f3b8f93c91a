package io.epp4j.redis;

import io.epp4j.api.PrefixBlocks;
import io.epp4j.api.RouterHints;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * A router for tests that drive {@link RedisReplication} directly: its own in-flight figures are
 * {@link #local} (each request counted with 100 tokens), and it records in {@link #remote} the
 * figures it hears from other routers, by endpoint. Prefixes and session moves it hears are
 * dropped unless a subclass keeps them.
 */
class FakeHints implements RouterHints {
  final Map<String, Integer> local;
  final Map<String, Integer> remote = new ConcurrentHashMap<>();

  FakeHints(Map<String, Integer> local) {
    this.local = local;
  }

  @Override
  public void prefixSent(String endpointId, PrefixBlocks blocks) {}

  @Override
  public void sessionBound(String sessionKey, String endpointId) {}

  @Override
  public void inFlight(String origin, String endpointId, int requests, long tokens) {
    if (requests == 0) {
      remote.remove(endpointId);
    } else {
      remote.put(endpointId, requests);
    }
  }

  @Override
  public void forget(String origin) {
    remote.clear();
  }

  @Override
  public void forEachLocalInFlight(InFlightVisitor visitor) {
    local.forEach((ep, r) -> visitor.visit(ep, r, 100L * r));
  }
}
