package io.epp4j.spring.gateway;

import org.springframework.cloud.gateway.filter.GatewayFilter;

/**
 * A filter that routes a request with epp4j: the {@code Epp4j} filter of a route, on the default
 * router or on a named pool.
 */
interface Epp4jRouting extends GatewayFilter {}
