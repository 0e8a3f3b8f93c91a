/**
 * Active-active gateways: the {@code redis-replication} plugin shares routing hints (prefixes
 * sent, session bindings, in-flight load) between the routers of one pool through a Redis or
 * Valkey stream. See the module's README for setup, parameters and failure behaviour.
 */
@NullMarked
package io.epp4j.redis;

import org.jspecify.annotations.NullMarked;
