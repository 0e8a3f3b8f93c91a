package io.epp4j.spring.gateway;

import io.epp4j.api.PoolListener;
import io.epp4j.api.RequestListener;
import io.epp4j.core.MetricsScraper;
import io.epp4j.core.Router;
import io.opentelemetry.api.OpenTelemetry;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.Set;
import java.util.List;
import java.util.Objects;
import java.util.logging.Logger;
import org.springframework.beans.factory.BeanFactory;
import org.springframework.beans.factory.ListableBeanFactory;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.beans.factory.SmartInitializingSingleton;
import org.springframework.beans.factory.annotation.AnnotatedBeanDefinition;
import org.springframework.beans.factory.config.ConfigurableListableBeanFactory;
import org.springframework.beans.factory.config.BeanPostProcessor;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.context.properties.ConfigurationPropertiesBindHandlerAdvisor;
import org.springframework.boot.context.properties.EnableConfigurationProperties;
import org.springframework.cloud.client.discovery.DiscoveryClient;
import org.springframework.cloud.gateway.filter.factory.GatewayFilterFactory;
import org.springframework.boot.health.autoconfigure.contributor.ConditionalOnEnabledHealthIndicator;
import org.springframework.boot.context.properties.bind.Binder;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Condition;
import org.springframework.context.annotation.ConditionContext;
import org.springframework.context.annotation.Conditional;
import org.springframework.context.annotation.Configuration;
import org.springframework.core.env.Environment;
import org.springframework.core.type.AnnotatedTypeMetadata;
import org.springframework.web.reactive.socket.client.WebSocketClient;
import org.springframework.web.reactive.socket.server.WebSocketService;

/**
 * Builds the epp4j {@link Router}, the {@link MetricsScraper} that keeps its replica metrics
 * fresh, and the {@code Epp4j} gateway filter from the {@code epp4j.*} properties, and the named
 * pools of {@code epp4j.pools.<name>.*} ({@link Epp4jPools}). Each bean yields to one of the same
 * type the application defines.
 */
// after the discovery clients, so that @ConditionalOnBean(DiscoveryClient) sees them
@AutoConfiguration(afterName = {
    "org.springframework.cloud.client.discovery.simple.SimpleDiscoveryClientAutoConfiguration",
    "org.springframework.cloud.client.discovery.composite.CompositeDiscoveryClientAutoConfiguration"})
@ConditionalOnClass(GatewayFilterFactory.class)
@EnableConfigurationProperties(Epp4jProperties.class)
public class Epp4jAutoConfiguration {
  private static final Logger LOG = Logger.getLogger(Epp4jAutoConfiguration.class.getName());

  /**
   * The router; closed with the context. The application's {@link OpenTelemetry} bean, when there
   * is one, receives the router's metrics; {@link RequestListener} and {@link PoolListener} beans
   * are registered with it; a Lettuce {@code ClientResources} bean is its router service (see
   * {@link SharedRouterServices}).
   */
  @Bean(destroyMethod = "close")
  @ConditionalOnMissingBean
  public Router epp4jRouter(Epp4jProperties properties, ObjectProvider<OpenTelemetry> otel,
      ObjectProvider<RequestListener> requestListeners, ObjectProvider<PoolListener> poolListeners,
      BeanFactory beans) {
    PoolSettings settings = PoolSettings.of(properties);
    settings.validate(); // fails naming the property, as for the named pools
    Router.Builder b = settings.routerBuilder();
    SharedRouterServices.of(beans).accept(b);
    listeners(requestListeners, poolListeners).forEach(b::listener);
    OpenTelemetry telemetry = otel.getIfAvailable();
    if (telemetry != null) {
      b.openTelemetry(telemetry);
    }
    return settings.build(b); // a config file with errors: names epp4j.config-file
  }

  /** Scrapes every replica's Prometheus metrics; off with {@code epp4j.metrics.enabled=false}. */
  @Bean(destroyMethod = "close")
  @ConditionalOnMissingBean
  @Conditional(MetricsEnabled.class)
  public MetricsScraper epp4jMetricsScraper(Router router, Epp4jProperties properties) {
    PoolSettings settings = PoolSettings.of(properties);
    // checked here too: with the application's own router, ours never checked them
    settings.validateScraper();
    return scraper(router, settings);
  }

  /**
   * The named pools of {@code epp4j.pools.<name>.*}, each with its own router, scraper and
   * discovery; closed with the context. The {@link RequestListener} and {@link PoolListener} beans
   * are registered with every pool's router; the {@link OpenTelemetry} bean receives every pool's
   * router metrics, with the attribute {@code pool=<name>}; a Lettuce {@code ClientResources}
   * bean is every pool's router service, so that their Redis clients share its threads.
   */
  @Bean(destroyMethod = "close")
  @ConditionalOnMissingBean
  public Epp4jPools epp4jPools(Epp4jProperties properties, ObjectProvider<OpenTelemetry> otel,
      ObjectProvider<RequestListener> requestListeners, ObjectProvider<PoolListener> poolListeners,
      ObjectProvider<DiscoveryClient> discovery, BeanFactory beans) {
    // built even without pools: pools may be added at runtime
    return Epp4jPools.build(properties, listeners(requestListeners, poolListeners),
        otel.getIfAvailable(), discovery.getIfAvailable(), SharedRouterServices.of(beans));
  }

  /** The {@code Epp4j} filter of route definitions and the Java DSL. */
  @Bean
  @ConditionalOnMissingBean
  public Epp4jGatewayFilterFactory epp4jGatewayFilterFactory(Router router,
      Epp4jProperties properties, ObjectProvider<Epp4jPools> pools) {
    int maxBody = maxBodyBytes(properties);
    int parserLimit = router.requestParser().maxBodyBytes();
    if (maxBody > parserLimit) {
      // an application's own router keeps its parser's limit: a body between the two would be
      // let through by the filter and answered 400 by the router
      throw new Epp4jConfigurationException("epp4j.max-body-size (" + maxBody + " bytes) is above the "
          + "request parser limit of the application's Router bean (" + parserLimit + " bytes):"
          + " build that router with requestParser(OpenAiRequestParser.of(" + maxBody
          + ", ...)) or lower epp4j.max-body-size");
    }
    return new Epp4jGatewayFilterFactory(router, PoolSettings.of(properties).scheme,
        maxBody, pools.getIfAvailable(Epp4jPools::none));
  }

  /**
   * The counter of the headers routing plugins asked for that the {@code Epp4j} filters left out
   * (a name that is no HTTP token, a value holding a control character), all routes and pools
   * together; recorded to the {@link OpenTelemetry} bean.
   */
  public static final String HEADERS_LEFT_OUT_METRIC = "epp4j.gateway.plugin_headers_left_out";

  /**
   * Reports {@value #HEADERS_LEFT_OUT_METRIC} to the application's {@link OpenTelemetry} bean,
   * when there is one; stops with the context.
   */
  @Bean(destroyMethod = "close")
  HeadersLeftOutMetric epp4jHeadersLeftOutMetric(ObjectProvider<OpenTelemetry> otel) {
    OpenTelemetry telemetry = otel.getIfAvailable();
    return new HeadersLeftOutMetric(telemetry == null ? null : telemetry
        .getMeter("io.epp4j.spring.gateway")
        .counterBuilder(HEADERS_LEFT_OUT_METRIC)
        .setDescription("Headers routing plugins asked for that the gateway left out: a name"
            + " that is no HTTP token or a value holding a control character")
        .setUnit("{header}")
        .buildWithCallback(m -> m.record(Epp4jGatewayFilter.HEADER_REFUSALS.count())));
  }

  /** The registration of {@value #HEADERS_LEFT_OUT_METRIC}, if any; closed with the context. */
  static final class HeadersLeftOutMetric implements AutoCloseable {
    private final @org.jspecify.annotations.Nullable AutoCloseable registration;

    HeadersLeftOutMetric(@org.jspecify.annotations.Nullable AutoCloseable registration) {
      this.registration = registration;
    }

    @Override
    public void close() throws Exception {
      if (registration != null) {
        registration.close();
      }
    }
  }

  /**
   * Checks the {@code epp4j.*} properties against the beans the context ended up with, once all
   * are built: every bean above yields to the application's own, and a property that built the
   * bean replaced would otherwise be ignored without a word. Not replaceable itself.
   */
  @Bean
  static SmartInitializingSingleton epp4jPropertyCheck(ObjectProvider<Epp4jProperties> properties,
      ListableBeanFactory beans, Environment environment) {
    return () -> checkProperties(properties.getObject(), beans, Binder.get(environment));
  }

  /**
   * The checks of {@link #epp4jPropertyCheck}: a bad value fails naming the property, a value
   * that the application's own bean does not take is a warning naming the property and the bean.
   */
  static void checkProperties(Epp4jProperties properties, ListableBeanFactory beans,
      Binder binder) {
    PoolSettings settings = PoolSettings.of(properties);
    if (!builtHere(beans, Router.class)) {
      // the application's own Router bean: epp4jRouter, which checks every value, was not
      // built, nor, with scraping off, the scraper, which checks its own; a refresh applies
      // endpoints, config file and preset to that router, and switching scraping on uses the
      // metrics settings, so a mistake in them fails now, naming the property, as with ours
      settings.validate();
      checkConfigFile(settings, beans);
      // the properties that build ours do nothing to it at startup (a refresh changing
      // endpoints, config file or preset does apply those)
      List<String> ignored = settings.routerPropertiesSet();
      if (!ignored.isEmpty()) {
        LOG.warning("epp4j: the application's own Router bean routes the default pool; "
            + String.join(", ", ignored) + " did not build it and are not applied to it at"
            + " startup");
      }
    }
    boolean ownScraper = beans.getBeanNamesForType(MetricsScraper.class).length > 0
        && !builtHere(beans, MetricsScraper.class);
    List<String> unused = metricsPropertiesUnused(properties, binder, !ownScraper);
    if (!unused.isEmpty()) {
      LOG.warning("epp4j: " + String.join(", ", unused) + " set, but no scraper uses them:"
          + " scraping is off where they apply (epp4j.metrics.enabled or the pool's"
          + " metrics.enabled is false)");
    }
    if (ownScraper) {
      List<String> notTaken = new ArrayList<>();
      if (!properties.getMetrics().isEnabled()) {
        notTaken.add(settings.property("metrics.enabled")); // it does not stop that scraper
      }
      notTaken.addAll(topMetricsPropertiesNotInherited(properties, binder));
      if (settings.schemeSet != null) {
        // set, it is the scheme of our scraper's scrapes too, whatever the configuration says
        notTaken.add(settings.property("scheme") + " (as the scheme of the scrapes; the Epp4j"
            + " filter's requests still take it)");
      }
      if (!notTaken.isEmpty()) {
        LOG.warning("epp4j: the application's own MetricsScraper bean scrapes the default pool; "
            + String.join(", ", notTaken) + " did not build it and do not apply to it");
      }
    }
    if (!builtHere(beans, Epp4jGatewayFilterFactory.class)) {
      Epp4jGatewayFilterFactory factory =
          beans.getBeanProvider(Epp4jGatewayFilterFactory.class).getIfUnique();
      List<String> notTaken = new ArrayList<>();
      if (factory != null && settings.schemeSet != null
          && !settings.schemeSet.equals(factory.scheme())) {
        notTaken.add(settings.property("scheme") + " (" + settings.schemeSet + "; it routes with "
            + factory.scheme() + ")");
      }
      if (factory != null && binder.bind(settings.property("max-body-size"), String.class)
          .isBound() && settings.maxBodyBytes() != factory.maxBodyBytes()) {
        notTaken.add(settings.property("max-body-size") + " (" + settings.maxBodyBytes()
            + " bytes; it limits bodies to " + factory.maxBodyBytes() + " bytes)");
      }
      Epp4jPools pools = beans.getBeanProvider(Epp4jPools.class).getIfUnique();
      if (factory != null && pools != null && factory.pools() != pools
          && !properties.getPools().isEmpty()) {
        // the pools are built and scraped, but that factory refuses a route's Epp4j=<name> as
        // a pool nobody defined; told, its error says why instead
        factory.poolsNotGiven(pools);
        List<String> named = new ArrayList<>();
        properties.getPools().keySet().forEach(n -> named.add(PoolSettings.poolPrefix(n)));
        LOG.warning("epp4j: the application's own Epp4jGatewayFilterFactory bean was not given"
            + " the Epp4jPools bean; no route's Epp4j=<name> can select " + String.join(", ", named)
            + " (build the factory with new Epp4jGatewayFilterFactory(router, scheme,"
            + " maxBodyBytes, pools))");
      }
      if (!notTaken.isEmpty()) {
        LOG.warning("epp4j: the application's own Epp4jGatewayFilterFactory bean makes the Epp4j"
            + " filter of the default pool; " + String.join(", ", notTaken)
            + " did not build it and do not apply to it");
      }
    }
    Epp4jPools namedPools = beans.getBeanProvider(Epp4jPools.class).getIfUnique();
    java.util.function.Predicate<String> discovers = name -> {
      Epp4jPools.Pool built = namedPools != null ? namedPools.find(name) : null;
      if (built != null) {
        return built.discoveryOwnsPool(); // without a DiscoveryClient, no lookup runs
      }
      // a pool the application's own Epp4jPools bean does not have: its service id says
      Epp4jProperties.Pool p = properties.getPools().get(name);
      String id = p != null ? p.getDiscovery().getServiceId() : null;
      return id != null && !id.isBlank();
    };
    List<String> noLookups = discoveryPropertiesUnused(properties, binder,
        settings.hasServiceId() || beans.getBeanNamesForType(Epp4jDiscoveryPool.class).length > 0,
        discovers);
    if (!noLookups.isEmpty()) {
      LOG.warning("epp4j: " + String.join(", ", noLookups) + " set, but no discovery looks up"
          + " with them: the pool they apply to has no discovery.service-id ("
          + PoolSettings.PREFIX + ".discovery.refresh-interval applies to the default pool and to"
          + " each named pool with a service id that leaves its own unset, when a DiscoveryClient"
          + " looks that pool up)");
    }
    if (settings.hasServiceId()) {
      String[] pools = beans.getBeanNamesForType(Epp4jDiscoveryPool.class);
      if (pools.length == 0) {
        // said, as for a named pool, rather than left unexplained; the refresh interval too,
        // unless a named pool's lookups run with it
        List<String> noEffect = new ArrayList<>();
        noEffect.add(settings.property("discovery.service-id"));
        if (binder.bind(settings.property("discovery.refresh-interval"), String.class).isBound()
            && properties.getPools().entrySet().stream().noneMatch(e ->
                e.getValue().getDiscovery().getRefreshInterval() == null
                    && discovers.test(e.getKey()))) {
          noEffect.add(settings.property("discovery.refresh-interval"));
        }
        LOG.warning("epp4j: " + String.join(", ", noEffect) + " set, but there is no"
            + " DiscoveryClient: no lookup runs with them, and the default pool keeps "
            + settings.property("endpoints"));
      } else if (!builtHere(beans, Epp4jDiscoveryPool.class)) {
        Epp4jDiscoveryPool own = beans.getBeanProvider(Epp4jDiscoveryPool.class).getIfUnique();
        List<String> notTaken = new ArrayList<>();
        if (own != null && !own.serviceId().equals(settings.serviceId)) {
          notTaken.add(settings.property("discovery.service-id") + " (" + settings.serviceId
              + "; it looks up " + own.serviceId() + ")");
        }
        if (own != null && binder.bind(settings.property("discovery.refresh-interval"),
            String.class).isBound() && !own.interval().equals(settings.refreshInterval)) {
          notTaken.add(settings.property("discovery.refresh-interval") + " ("
              + settings.refreshInterval + "; it looks up every " + own.interval() + ")");
        }
        if (!notTaken.isEmpty()) {
          LOG.warning("epp4j: the application's own Epp4jDiscoveryPool bean gives the default"
              + " pool; " + String.join(", ", notTaken) + " did not build it and do not apply"
              + " to it");
        }
      }
    }
  }

  /**
   * Loads {@code epp4j.config-file} beside the application's own Router, which does not take it
   * at startup but is given it by a refresh that touches it: a file that cannot be read or has
   * errors fails startup naming the property and the file, as it does when the file builds our
   * router, rather than waiting for that refresh. Loaded by a router of its own, without
   * endpoints, closed at once: only loading tells a valid configuration from an invalid one.
   */
  private static void checkConfigFile(PoolSettings settings, BeanFactory beans) {
    java.nio.file.Path file = settings.configPath();
    if (file == null) {
      return;
    }
    Router.Builder b = Router.builder().configFile(file);
    SharedRouterServices.of(beans).accept(b);
    try {
      b.build().close();
    } catch (RuntimeException e) {
      throw new Epp4jConfigurationException(settings.property("config-file") + ": "
          + e.getMessage() + " (the application's own Router bean routes the default pool and"
          + " does not take this file at startup, but a refresh that changes the property applies"
          + " it to that router)", e);
    }
  }

  /**
   * The one bean of {@code type} comes from a bean method of this configuration, not from the
   * application: told by where it is defined, since an application's bean may have our name
   * (a method {@code epp4jRouter} of its own, a bean registered under its class's short name).
   */
  static boolean builtHere(ListableBeanFactory beans, Class<?> type) {
    String[] names = beans.getBeanNamesForType(type, true, false);
    if (names.length != 1 || !(beans instanceof ConfigurableListableBeanFactory f)
        || !f.containsBeanDefinition(names[0])) {
      return false;
    }
    return f.getBeanDefinition(names[0]) instanceof AnnotatedBeanDefinition d
        && d.getFactoryMethodMetadata() != null
        && Epp4jAutoConfiguration.class.getName()
            .equals(d.getFactoryMethodMetadata().getDeclaringClassName());
  }

  /**
   * Applies the {@code Epp4j} filter's body size limit while SCG's body cache (which the
   * {@code Retry} filter asks for) reads the body, before the route's filters run.
   */
  @Bean
  @ConditionalOnMissingBean
  public Epp4jBodyLimitFilter epp4jBodyLimitFilter() {
    return new Epp4jBodyLimitFilter();
  }

  /** Lets the {@code Epp4j} filter watch the answers of the routes it is on. */
  @Bean
  @ConditionalOnMissingBean
  public Epp4jResponseTapFilter epp4jResponseTapFilter() {
    return new Epp4jResponseTapFilter();
  }

  /**
   * The pool from Spring Cloud service discovery, when {@code epp4j.discovery.service-id} is set
   * and the application has a {@code DiscoveryClient}.
   */
  @Bean(destroyMethod = "close")
  @ConditionalOnMissingBean
  @ConditionalOnClass(name = "org.springframework.cloud.client.discovery.DiscoveryClient")
  @ConditionalOnBean(DiscoveryClient.class)
  @Conditional(ServiceIdSet.class)
  public Epp4jDiscoveryPool epp4jDiscoveryPool(Router router, DiscoveryClient discovery,
      Epp4jProperties properties) {
    // checked before the first lookup: beside an application's own Router, which did not check
    // it, that lookup would empty the router's pool before the startup check failed
    PoolSettings.of(properties).checkServiceId();
    String id = Objects.requireNonNull(properties.getDiscovery().getServiceId());
    return new Epp4jDiscoveryPool(router, discovery, id,
        properties.getDiscovery().getRefreshInterval());
  }

  /** Applies changed {@code epp4j.*} properties on a Spring Cloud environment change. */
  @Bean
  @ConditionalOnMissingBean
  @ConditionalOnClass(name = "org.springframework.cloud.context.environment.EnvironmentChangeEvent")
  public Epp4jRefresher epp4jRefresher(Router router, Environment environment,
      ObjectProvider<Epp4jDiscoveryPool> discoveryPool, ObjectProvider<Epp4jPools> pools) {
    return new Epp4jRefresher(router, environment,
        () -> discoveryPool.getIfAvailable() != null, pools.getIfAvailable(Epp4jPools::none));
  }

  /**
   * Keeps Spring Cloud's rebinding of {@code @ConfigurationProperties} beans on a refresh from
   * failing, and from binding half of the values into {@link Epp4jProperties}, while the
   * environment holds an {@code epp4j.*} property that is none ({@link Epp4jRebindGuard}).
   */
  @Bean
  @ConditionalOnClass(name =
      "org.springframework.cloud.context.properties.ConfigurationPropertiesRebinder")
  static ConfigurationPropertiesBindHandlerAdvisor epp4jRebindGuard(Environment environment) {
    return new Epp4jRebindGuard(environment);
  }

  /**
   * Wraps the gateway's {@link WebSocketService} so that a websocket session the replica refuses
   * or cannot take fails its decision ({@link Epp4jWebSocketService}), and proxies its
   * {@link WebSocketClient} (keeping its class) so that one the replica ends abnormally does too.
   */
  @Bean
  static BeanPostProcessor epp4jWebSocketServiceWrapper() {
    return new BeanPostProcessor() {
      @Override
      public Object postProcessAfterInitialization(Object bean, String beanName) {
        if (bean instanceof WebSocketService s && !(bean instanceof Epp4jWebSocketService)) {
          return new Epp4jWebSocketService(s);
        }
        if (bean instanceof WebSocketClient c) {
          return Epp4jWebSocketService.watchReplicaSessions(c);
        }
        return bean;
      }
    };
  }

  /**
   * {@code epp4j} in {@code /actuator/health} ({@link Epp4jHealthIndicator}), when the
   * application has Spring Boot's health support; off with
   * {@code management.health.epp4j.enabled=false}.
   */
  // the class condition first and alone: the next one's own classes exist only with it
  @Configuration(proxyBeanMethods = false)
  @ConditionalOnClass(name = "org.springframework.boot.health.contributor.HealthIndicator")
  static class Health {
    @Bean
    @ConditionalOnEnabledHealthIndicator("epp4j")
    @ConditionalOnMissingBean(name = "epp4jHealthIndicator")
    Epp4jHealthIndicator epp4jHealthIndicator(Router router,
        ObjectProvider<MetricsScraper> scraper, ObjectProvider<Epp4jPools> pools) {
      return new Epp4jHealthIndicator(router, scraper.getIfAvailable(),
          pools.getIfAvailable(Epp4jPools::none));
    }
  }

  /**
   * The pool's scraper. A path or scheme given to the builder wins over the routing
   * configuration's {@code metrics-data-source}, so only those the properties set explicitly are
   * given: the others follow the configuration, across reloads too.
   */
  static MetricsScraper scraper(Router router, PoolSettings pool) {
    MetricsScraper.Builder b = MetricsScraper.builder(router).interval(pool.metricsInterval);
    if (pool.metricsPath != null) {
      try {
        b.path(pool.metricsPath);
      } catch (IllegalArgumentException e) {
        // validateScraper has checked the path as the builder does; should the builder ever
        // refuse more, its own message names no property, and no pool
        throw new Epp4jConfigurationException(pool.source("metrics.path")
            + " is not a usable metrics path: " + e.getMessage());
      }
    }
    if (pool.schemeSet != null) {
      b.scheme(pool.schemeSet);
    }
    if (pool.metricsInsecureSkipVerify != null) {
      b.insecureSkipVerify(pool.metricsInsecureSkipVerify);
    }
    return b.start();
  }

  /** The listener beans, a bean that is both a request and a pool listener once. */
  private static List<Object> listeners(ObjectProvider<RequestListener> requestListeners,
      ObjectProvider<PoolListener> poolListeners) {
    Set<Object> listeners = new LinkedHashSet<>();
    requestListeners.orderedStream().forEach(listeners::add);
    poolListeners.orderedStream().forEach(listeners::add);
    return new ArrayList<>(listeners);
  }

  /**
   * {@code epp4j.metrics.enabled} as the property binds it ({@code false}, {@code off},
   * {@code no}, {@code 0} are all false), unset: true. {@code @ConditionalOnProperty} would take
   * only {@code false} as off and start the scraper for the others.
   */
  static final class MetricsEnabled implements Condition {
    @Override
    public boolean matches(ConditionContext context, AnnotatedTypeMetadata metadata) {
      return Binder.get(context.getEnvironment())
          .bind(PoolSettings.PREFIX + ".metrics.enabled", Boolean.class).orElse(true);
    }
  }

  /**
   * {@code epp4j.discovery.service-id} is set to a name: blank is unset, as for a named pool.
   * {@code @ConditionalOnProperty} would take a blank value ({@code EPP4J_DISCOVERY_SERVICE_ID=})
   * as set, and the lookup of a service {@code ''} would empty the pool.
   */
  static final class ServiceIdSet implements Condition {
    @Override
    public boolean matches(ConditionContext context, AnnotatedTypeMetadata metadata) {
      return Binder.get(context.getEnvironment())
          .bind(PoolSettings.PREFIX + ".discovery.service-id", String.class)
          .map(id -> !id.isBlank()).orElse(false);
    }
  }

  /**
   * The {@code metrics.interval}, {@code metrics.path} and {@code metrics.insecure-skip-verify}
   * properties that are set where scraping
   * is off, so that no scraper reads them: the top-level ones when the default pool does not
   * scrape and no named pool that scrapes inherits them, a named pool's own when that pool does
   * not scrape.
   */
  static List<String> metricsPropertiesUnused(Epp4jProperties properties, Binder binder) {
    return metricsPropertiesUnused(properties, binder, true);
  }

  /**
   * As {@link #metricsPropertiesUnused(Epp4jProperties, Binder)}; without {@code ourScraper}
   * (the application's own scraper bean scrapes the default pool) the top-level ones are left
   * out: {@link #topMetricsPropertiesNotInherited} names them.
   */
  static List<String> metricsPropertiesUnused(Epp4jProperties properties, Binder binder,
      boolean ourScraper) {
    List<String> ofPools = new ArrayList<>();
    Epp4jProperties.Metrics top = properties.getMetrics();
    boolean intervalInherited = false;
    boolean pathInherited = false;
    boolean insecureInherited = false;
    for (var e : properties.getPools().entrySet()) {
      Epp4jProperties.PoolMetrics m = e.getValue().getMetrics();
      boolean scrapes = m.getEnabled() != null ? m.getEnabled() : top.isEnabled();
      String prefix = PoolSettings.poolPrefix(e.getKey()) + ".metrics.";
      if (scrapes) {
        intervalInherited |= m.getInterval() == null;
        pathInherited |= m.getPath() == null;
        insecureInherited |= m.getInsecureSkipVerify() == null;
      } else {
        if (m.getInterval() != null) {
          ofPools.add(prefix + "interval");
        }
        if (m.getPath() != null) {
          ofPools.add(prefix + "path");
        }
        if (m.getInsecureSkipVerify() != null) {
          ofPools.add(prefix + "insecure-skip-verify");
        }
      }
    }
    List<String> unused = new ArrayList<>();
    if (!top.isEnabled() && ourScraper) {
      String prefix = PoolSettings.PREFIX + ".metrics.";
      // the interval has a default: set is what the environment gives
      if (!intervalInherited && binder.bind(prefix + "interval", String.class).isBound()) {
        unused.add(prefix + "interval");
      }
      if (!pathInherited && top.getPath() != null) {
        unused.add(prefix + "path");
      }
      if (!insecureInherited && top.getInsecureSkipVerify() != null) {
        unused.add(prefix + "insecure-skip-verify");
      }
    }
    unused.addAll(ofPools);
    return unused;
  }

  /**
   * The {@code discovery.refresh-interval} properties that are set where no discovery looks up
   * with them: a named pool's own when that pool has no service id, the top-level one when the
   * default pool does not discover ({@code defaultPoolDiscovers}) and no named pool whose lookups
   * run ({@code poolDiscovers}, by pool name) inherits it.
   */
  static List<String> discoveryPropertiesUnused(Epp4jProperties properties, Binder binder,
      boolean defaultPoolDiscovers, java.util.function.Predicate<String> poolDiscovers) {
    List<String> ofPools = new ArrayList<>();
    boolean inherited = false;
    for (var e : properties.getPools().entrySet()) {
      Epp4jProperties.PoolDiscovery d = e.getValue().getDiscovery();
      boolean hasServiceId = d.getServiceId() != null && !d.getServiceId().isBlank();
      if (hasServiceId) {
        // a pool with a service id but no DiscoveryClient names its own in its warning
        // (Epp4jPools); the top-level one it would inherit is used only by lookups that run
        inherited |= d.getRefreshInterval() == null && poolDiscovers.test(e.getKey());
      } else if (d.getRefreshInterval() != null) {
        ofPools.add(PoolSettings.poolPrefix(e.getKey()) + ".discovery.refresh-interval");
      }
    }
    List<String> unused = new ArrayList<>();
    String top = PoolSettings.PREFIX + ".discovery.refresh-interval";
    // it has a default: set is what the environment gives
    if (!defaultPoolDiscovers && !inherited && binder.bind(top, String.class).isBound()) {
      unused.add(top);
    }
    unused.addAll(ofPools);
    return unused;
  }

  /**
   * The top-level {@code metrics.interval}, {@code metrics.path} and
   * {@code metrics.insecure-skip-verify} that are set and that no
   * named pool that scrapes inherits.
   */
  static List<String> topMetricsPropertiesNotInherited(Epp4jProperties properties,
      Binder binder) {
    Epp4jProperties.Metrics top = properties.getMetrics();
    boolean intervalInherited = false;
    boolean pathInherited = false;
    boolean insecureInherited = false;
    for (Epp4jProperties.Pool p : properties.getPools().values()) {
      Epp4jProperties.PoolMetrics m = p.getMetrics();
      if (m.getEnabled() != null ? m.getEnabled() : top.isEnabled()) {
        intervalInherited |= m.getInterval() == null;
        pathInherited |= m.getPath() == null;
        insecureInherited |= m.getInsecureSkipVerify() == null;
      }
    }
    List<String> set = new ArrayList<>();
    String prefix = PoolSettings.PREFIX + ".metrics.";
    if (!intervalInherited && binder.bind(prefix + "interval", String.class).isBound()) {
      set.add(prefix + "interval");
    }
    if (!pathInherited && top.getPath() != null) {
      set.add(prefix + "path");
    }
    if (!insecureInherited && top.getInsecureSkipVerify() != null) {
      set.add(prefix + "insecure-skip-verify");
    }
    return set;
  }

  static int maxBodyBytes(Epp4jProperties properties) {
    return PoolSettings.of(properties).maxBodyBytes();
  }
}
