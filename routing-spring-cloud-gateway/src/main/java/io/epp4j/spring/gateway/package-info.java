/**
 * Spring Boot auto-configuration and a Spring Cloud Gateway (server WebFlux) filter that route
 * OpenAI-compatible requests with epp4j: {@link io.epp4j.spring.gateway.Epp4jAutoConfiguration}
 * builds the {@code Router} and {@code MetricsScraper} from the {@code epp4j.*} properties
 * ({@link io.epp4j.spring.gateway.Epp4jProperties}), {@link io.epp4j.spring.gateway.Epp4jPools}
 * holds a router per named pool ({@code epp4j.pools.<name>.*}), and the {@code Epp4j} filter
 * ({@link io.epp4j.spring.gateway.Epp4jGatewayFilterFactory}) picks the replica of each request,
 * with the default router or, for {@code Epp4j=<name>}, that pool's.
 */
@NullMarked
package io.epp4j.spring.gateway;

import org.jspecify.annotations.NullMarked;
