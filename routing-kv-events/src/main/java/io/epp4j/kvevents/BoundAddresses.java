package io.epp4j.kvevents;

import java.util.ArrayDeque;
import java.util.HashMap;
import java.util.Map;
import org.jspecify.annotations.Nullable;

/**
 * The central-mode subscribers of this JVM, per address they bind, newest first: the first one
 * holds the address, the ones behind it handed it over. A reconfiguration builds the new
 * configuration's scorer while the running one still holds {@code bindAddress}; the new
 * subscriber takes the address over instead of failing to bind, and if it closes while an older
 * one is still open (the reconfiguration failed on another plugin, or was replaced again), that
 * one binds it again. Addresses with a wildcard port are never contended and are not kept.
 */
final class BoundAddresses {
  private static final Map<String, ArrayDeque<SubscriberLoop>> HOLDERS = new HashMap<>();

  private BoundAddresses() {}

  private static boolean wildcardPort(String address) {
    return address.endsWith(":*") || address.endsWith(":!");
  }

  /** Records that {@code loop} now holds {@code address}. */
  static synchronized void bound(String address, SubscriberLoop loop) {
    if (!wildcardPort(address)) {
      ArrayDeque<SubscriberLoop> d = HOLDERS.computeIfAbsent(address, a -> new ArrayDeque<>());
      d.remove(loop);
      d.addFirst(loop);
    }
  }

  /** The subscriber of this JVM that holds (or last held) {@code address}, or null. */
  static synchronized @Nullable SubscriberLoop holder(String address) {
    ArrayDeque<SubscriberLoop> d = HOLDERS.get(address);
    return d == null ? null : d.peekFirst();
  }

  /**
   * Forgets {@code loop}, which has closed; returns the subscriber that should bind
   * {@code address} again (the next newest, when {@code loop} held the address and that one is
   * still open), or null.
   */
  static synchronized @Nullable SubscriberLoop closed(String address, SubscriberLoop loop) {
    ArrayDeque<SubscriberLoop> d = HOLDERS.get(address);
    if (d == null) {
      return null;
    }
    boolean held = d.peekFirst() == loop;
    d.remove(loop);
    if (d.isEmpty()) {
      HOLDERS.remove(address);
      return null;
    }
    SubscriberLoop next = d.peekFirst();
    return held && next.handedOver() ? next : null;
  }
}
