package io.epp4j.spring.gateway;

import static org.assertj.core.api.Assertions.assertThat;
import static org.springframework.cloud.gateway.support.ServerWebExchangeUtils.GATEWAY_ROUTE_ATTR;

import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import org.springframework.cloud.gateway.event.EnableBodyCachingEvent;
import org.springframework.cloud.gateway.filter.AdaptCachedBodyGlobalFilter;
import org.springframework.cloud.gateway.filter.GatewayFilter;
import org.springframework.cloud.gateway.filter.GatewayFilterChain;
import org.springframework.cloud.gateway.route.Route;
import org.springframework.core.io.buffer.DataBuffer;
import org.springframework.core.io.buffer.DataBufferUtils;
import org.springframework.core.io.buffer.DefaultDataBuffer;
import org.springframework.core.io.buffer.DefaultDataBufferFactory;
import org.springframework.http.HttpMethod;
import org.springframework.mock.http.server.reactive.MockServerHttpRequest;
import org.springframework.mock.web.server.MockServerWebExchange;
import org.springframework.web.server.ServerWebExchange;
import reactor.core.publisher.Flux;
import reactor.core.publisher.Mono;

/**
 * The body limit ahead of SCG's body cache (the one the {@code Retry} filter asks for): which
 * routes and which limit, with SCG's real {@link AdaptCachedBodyGlobalFilter} behind it.
 */
class Epp4jBodyLimitFilterTest {
  private final ApplicationContextRunner runner = new ApplicationContextRunner()
      .withConfiguration(AutoConfigurations.of(Epp4jAutoConfiguration.class))
      .withPropertyValues("epp4j.metrics.enabled=false", "epp4j.endpoints=127.0.0.1:9000",
          "epp4j.max-body-size=4KB",
          "epp4j.pools.llama.endpoints=127.0.0.1:9001", "epp4j.pools.llama.max-body-size=1KB");

  /** How many requests got past SCG's body cache to the route's filters. */
  final AtomicInteger reached = new AtomicInteger();

  /**
   * One POST of {@code size} bytes in 256-byte buffers (its length declared or not) through the
   * limit filter, then SCG's body cache for the route, then the rest of the chain; its status.
   */
  Integer post(Epp4jBodyLimitFilter limit, GatewayFilter filter, int size, boolean declared) {
    return send(HttpMethod.POST, limit, filter, size, declared);
  }

  /** As {@link #post}, with another method. */
  Integer send(HttpMethod method, Epp4jBodyLimitFilter limit, GatewayFilter filter, int size,
      boolean declared) {
    Route route = Route.async().id("llm").uri(URI.create("http://replica.invalid"))
        .predicate(e -> true).filter(filter).build();
    AdaptCachedBodyGlobalFilter cache = new AdaptCachedBodyGlobalFilter();
    cache.onApplicationEvent(new EnableBodyCachingEvent(this, "llm")); // as Retry's factory does
    Flux<DataBuffer> body = Flux.range(0, (size + 255) / 256).map(i -> DefaultDataBufferFactory
        .sharedInstance.wrap("x".repeat(Math.min(256, size - i * 256))
            .getBytes(StandardCharsets.US_ASCII)));
    MockServerHttpRequest.BodyBuilder request =
        MockServerHttpRequest.method(method, "/v1/completions");
    if (declared) {
      request.contentLength(size);
    }
    MockServerWebExchange exchange = MockServerWebExchange.from(request.body(body));
    exchange.getAttributes().put(GATEWAY_ROUTE_ATTR, route);
    GatewayFilterChain rest = e -> {
      reached.incrementAndGet();
      return Mono.empty();
    };
    limit.filter(exchange, e -> cache.filter(e, rest)).block(Duration.ofSeconds(10));
    return exchange.getResponse().getStatusCode() == null
        ? null : exchange.getResponse().getStatusCode().value();
  }

  @Test
  void aBodyAboveTheLimitOfTheRoutesPoolIsRefusedBeforeTheCacheHasItAll() {
    runner.run(ctx -> {
      Epp4jBodyLimitFilter limit = ctx.getBean(Epp4jBodyLimitFilter.class);
      Epp4jGatewayFilterFactory epp4j = ctx.getBean(Epp4jGatewayFilterFactory.class);
      for (boolean declared : new boolean[] {true, false}) {
        // the default router's limit is 4 KB, the llama pool's 1 KB
        assertThat(post(limit, epp4j.filter(), 4096, declared)).isNull();
        assertThat(post(limit, epp4j.filter(), 4097, declared)).isEqualTo(413);
        assertThat(post(limit, epp4j.filter("llama"), 1024, declared)).isNull();
        assertThat(post(limit, epp4j.filter("llama"), 1025, declared)).isEqualTo(413);
      }
      assertThat(reached).hasValue(4);
    });
  }

  @Test
  void aRouteWhosePoolWasRemovedKeepsTheTopLevelLimitOnTheCachedBody() {
    runner.run(ctx -> {
      Epp4jBodyLimitFilter limit = ctx.getBean(Epp4jBodyLimitFilter.class);
      GatewayFilter llama = ctx.getBean(Epp4jGatewayFilterFactory.class).filter("llama");
      assertThat(ctx.getBean(Epp4jPools.class).remove("llama")).isTrue();
      for (boolean declared : new boolean[] {true, false}) {
        // the route answers 503 now; its body is not cached whole, whatever its length, first
        assertThat(post(limit, llama, 4096, declared)).isNull();
        assertThat(post(limit, llama, 1 << 20, declared)).isEqualTo(413);
      }
      assertThat(reached).hasValue(2);
    });
  }

  @Test
  void aPutOrPatchBodyAboveTheLimitIsRefusedBeforeTheCacheHasItAll() {
    // the Epp4j filter routes them by their headers, but the cache reads their bodies whole
    runner.run(ctx -> {
      Epp4jBodyLimitFilter limit = ctx.getBean(Epp4jBodyLimitFilter.class);
      GatewayFilter epp4j = ctx.getBean(Epp4jGatewayFilterFactory.class).filter();
      for (HttpMethod method : new HttpMethod[] {HttpMethod.PUT, HttpMethod.PATCH}) {
        for (boolean declared : new boolean[] {true, false}) {
          assertThat(send(method, limit, epp4j, 4096, declared)).isNull();
          assertThat(send(method, limit, epp4j, 1 << 20, declared)).isEqualTo(413);
        }
      }
      assertThat(reached).hasValue(4);
    });
  }

  @Test
  void routesWithoutAnEpp4jFilterInTheirListAreLeftAlone() {
    runner.run(ctx -> {
      Epp4jBodyLimitFilter limit = ctx.getBean(Epp4jBodyLimitFilter.class);
      GatewayFilter epp4j = ctx.getBean(Epp4jGatewayFilterFactory.class).filter();
      GatewayFilter other = (exchange, chain) -> chain.filter(exchange);
      GatewayFilter wrapper = (exchange, chain) -> epp4j.filter(exchange, chain);
      // a route without Epp4j, and one whose Epp4j filter is hidden inside an application's
      // own filter (the README's limitation: the Epp4j filter checks the cached body later)
      assertThat(post(limit, other, 8192, false)).isNull();
      assertThat(post(limit, wrapper, 8192, false)).isNull();
      assertThat(reached).hasValue(2);
    });
  }

  /** Counts the buffers made by the factory the request's body pieces come from. */
  static final class CountingFactory extends DefaultDataBufferFactory {
    final AtomicInteger made = new AtomicInteger();

    @Override
    public DefaultDataBuffer allocateBuffer(int initialCapacity) {
      made.incrementAndGet();
      return super.allocateBuffer(initialCapacity);
    }

    @Override
    public DefaultDataBuffer wrap(byte[] bytes) {
      made.incrementAndGet();
      return super.wrap(bytes);
    }

    @Override
    public DefaultDataBuffer wrap(java.nio.ByteBuffer byteBuffer) {
      made.incrementAndGet();
      return super.wrap(byteBuffer);
    }
  }

  /**
   * The buffers made while a completion request (four body pieces) goes through the chain: the
   * limit filter when {@code limited}, SCG's body cache (enabled for the route, as Retry's
   * factory does, when {@code cached}), the {@code Epp4j} filter, then a stand-in for the routing
   * filter that reads the body it would send, which the request must reach. Two counts: in all,
   * and those made from the {@code Epp4j} filter's start to the stand-in's.
   */
  int[] buffersMade(Epp4jBodyLimitFilter limit, GatewayFilter epp4j, boolean limited,
      boolean cached) {
    Route route = Route.async().id("llm").uri(URI.create("http://replica.invalid"))
        .predicate(e -> true).filter(epp4j).build();
    AdaptCachedBodyGlobalFilter cache = new AdaptCachedBodyGlobalFilter();
    if (cached) {
      cache.onApplicationEvent(new EnableBodyCachingEvent(this, "llm"));
    }
    CountingFactory factory = new CountingFactory();
    String json = "{\"model\":\"m\",\"prompt\":\"" + "x".repeat(900) + "\"}";
    byte[] bytes = json.getBytes(StandardCharsets.US_ASCII);
    java.util.List<DataBuffer> pieces = new java.util.ArrayList<>();
    for (int at = 0; at < bytes.length; at += 256) {
      pieces.add(factory.wrap(java.util.Arrays.copyOfRange(bytes, at,
          Math.min(bytes.length, at + 256))));
    }
    assertThat(pieces).hasSize(4);
    factory.made.set(0);
    MockServerWebExchange exchange = MockServerWebExchange.from(MockServerHttpRequest
        .post("/v1/completions").contentLength(bytes.length)
        .header("content-type", "application/json").body(Flux.fromIterable(pieces)));
    exchange.getAttributes().put(GATEWAY_ROUTE_ATTR, route);
    int[] byFilter = new int[1];
    GatewayFilterChain send = e -> {
      byFilter[0] += factory.made.get();
      return DataBufferUtils.join(e.getRequest().getBody()).map(body -> {
        try {
          assertThat(body.toString(StandardCharsets.US_ASCII)).isEqualTo(json);
        } finally {
          DataBufferUtils.release(body);
        }
        reached.incrementAndGet();
        return body;
      }).then();
    };
    GatewayFilterChain routeFilters = e -> {
      byFilter[0] -= factory.made.get();
      return epp4j.filter(e, send);
    };
    GatewayFilterChain cacheAndRoute = e -> cache.filter(e, routeFilters);
    (limited ? limit.filter(exchange, cacheAndRoute) : cacheAndRoute.filter(exchange))
        .block(Duration.ofSeconds(10));
    return new int[] {factory.made.get(), byFilter[0]};
  }

  @Test
  void theBodyIsCopiedOnceBetweenTheLimitAndTheEpp4jFilter() {
    runner.run(ctx -> {
      Epp4jBodyLimitFilter limit = ctx.getBean(Epp4jBodyLimitFilter.class);
      GatewayFilter epp4j = ctx.getBean(Epp4jGatewayFilterFactory.class).filter();
      // a plain route: the limit filter's copies of the pieces are the ones the Epp4j filter
      // caches, as many buffers in all as the Epp4j filter makes alone
      assertThat(buffersMade(limit, epp4j, true, false)[0])
          .isEqualTo(buffersMade(limit, epp4j, false, false)[0]);
      // behind Retry's body cache, filled with the limit filter's copies: the Epp4j filter
      // makes none
      assertThat(buffersMade(limit, epp4j, true, true)[1]).isZero();
      // a body SCG cached without the limit filter (a ReadBody predicate, an Epp4j filter hidden
      // in an application filter) holds the server's own buffers: the Epp4j filter still puts a
      // copy of its own in the cache for SCG to free
      assertThat(buffersMade(limit, epp4j, false, true)[1]).isEqualTo(1);
      assertThat(reached).hasValue(4);
    });
  }

  /**
   * A body SCG cached whole before any filter (a {@code ReadBody} predicate) above the limit is
   * answered 413 without the filter copying it: before, the whole refused body was copied into
   * the cache first, holding it twice.
   */
  @Test
  void aBodyCachedWholeAboveTheLimitIsRefusedWithoutBeingCopied() {
    int limit = 1024;
    AtomicInteger largest = new AtomicInteger();
    DefaultDataBufferFactory factory = new DefaultDataBufferFactory() {
      @Override
      public DefaultDataBuffer allocateBuffer(int initialCapacity) {
        largest.accumulateAndGet(initialCapacity, Math::max);
        return super.allocateBuffer(initialCapacity);
      }

      @Override
      public DefaultDataBuffer wrap(byte[] bytes) {
        largest.accumulateAndGet(bytes.length, Math::max);
        return super.wrap(bytes);
      }
    };
    byte[] json = ("{\"model\":\"m\",\"prompt\":\"" + "x".repeat(8 * limit) + "\"}")
        .getBytes(StandardCharsets.US_ASCII);
    DataBuffer cached = factory.wrap(json); // as SCG caches it, from the server's factory
    largest.set(0);
    io.epp4j.core.Router router = io.epp4j.core.Router.builder()
        .endpoints(java.util.List.of(io.epp4j.api.Endpoint.parse("10.0.0.1:8000"))).build();
    try {
      MockServerWebExchange exchange = MockServerWebExchange.from(MockServerHttpRequest
          .post("/v1/completions").header("content-type", "application/json"));
      exchange.getAttributes().put(
          org.springframework.cloud.gateway.support.ServerWebExchangeUtils.CACHED_REQUEST_BODY_ATTR,
          cached);
      new Epp4jGatewayFilter(router, "http", limit).filter(exchange, e -> {
        reached.incrementAndGet();
        return Mono.empty();
      }).block(Duration.ofSeconds(10));
      assertThat(exchange.getResponse().getStatusCode().value()).isEqualTo(413);
      assertThat(reached).hasValue(0);
      assertThat(largest.get()).as("bytes in the largest buffer the filter made")
          .isLessThanOrEqualTo(limit);
    } finally {
      router.close();
    }
  }

  @Test
  void itRunsJustAheadOfTheGatewaysBodyCache() {
    assertThat(new Epp4jBodyLimitFilter().getOrder())
        .isLessThan(new AdaptCachedBodyGlobalFilter().getOrder());
  }
}
