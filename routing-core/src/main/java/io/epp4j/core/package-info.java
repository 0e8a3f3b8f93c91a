/**
 * The router: scheduling cycle, endpoint pool, plugin registry (ServiceLoader), EPP config
 * loading, OpenAI body parsing and OpenTelemetry metrics.
 */
@NullMarked
package io.epp4j.core;

import org.jspecify.annotations.NullMarked;
