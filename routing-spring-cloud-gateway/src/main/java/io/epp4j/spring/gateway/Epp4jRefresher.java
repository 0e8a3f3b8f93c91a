package io.epp4j.spring.gateway;

import io.epp4j.api.Endpoint;
import io.epp4j.api.Result;
import io.epp4j.core.Router;
import io.epp4j.core.RouterConfig;
import java.nio.file.Path;
import java.util.List;
import java.util.function.BooleanSupplier;
import java.util.logging.Level;
import java.util.logging.Logger;
import org.jspecify.annotations.Nullable;
import org.springframework.boot.context.properties.bind.Binder;
import org.springframework.cloud.context.environment.EnvironmentChangeEvent;
import org.springframework.context.ApplicationListener;
import org.springframework.core.env.Environment;

/**
 * Applies changed {@code epp4j.*} properties to the running router when Spring Cloud reports an
 * environment change (a {@code /actuator/refresh}, a config server push): the endpoint list is
 * replaced (unless an {@link Epp4jDiscoveryPool} takes the pool from a registry) and the config
 * file or preset is loaded again. Requests in flight keep their
 * decisions and are counted against the new pool where their endpoint stays. An invalid change (an endpoint that is not
 * {@code host:port}, an unknown preset, a configuration with errors) is logged and nothing of it
 * is applied: the router keeps its pool and configuration, and the refresh itself goes on (an
 * exception here would keep Spring's later listeners, such as the rebinding of
 * {@code @ConfigurationProperties} beans, from running).
 */
public class Epp4jRefresher implements ApplicationListener<EnvironmentChangeEvent> {
  private static final Logger LOG = Logger.getLogger(Epp4jRefresher.class.getName());

  private final Router router;
  private final Environment environment;
  private final BooleanSupplier discoveryOwnsPool;

  public Epp4jRefresher(Router router, Environment environment) {
    this(router, environment, () -> false);
  }

  /**
   * @param discoveryOwnsPool whether service discovery supplies the pool, which
   *     {@code epp4j.endpoints} then must not replace
   */
  public Epp4jRefresher(Router router, Environment environment,
      BooleanSupplier discoveryOwnsPool) {
    this.router = router;
    this.environment = environment;
    this.discoveryOwnsPool = discoveryOwnsPool;
  }

  @Override
  public void onApplicationEvent(EnvironmentChangeEvent event) {
    boolean ours = event.getKeys().stream().anyMatch(k -> k.startsWith("epp4j."));
    if (!ours) {
      return;
    }
    @Nullable List<Endpoint> pool; // null: discovery owns the pool
    @Nullable Path file = null;
    @Nullable String preset = null;
    @Nullable String presetYaml = null;
    try {
      Epp4jProperties p = Binder.get(environment)
          .bind("epp4j", Epp4jProperties.class).orElseGet(Epp4jProperties::new);
      pool = discoveryOwnsPool.getAsBoolean() ? null
          : Epp4jAutoConfiguration.endpoints(p.getEndpoints());
      String configFile = p.getConfigFile();
      if (configFile != null && !configFile.isBlank()) {
        file = Path.of(configFile);
      } else if (p.getPreset() != null && !p.getPreset().isBlank()) {
        preset = p.getPreset();
        presetYaml = Epp4jAutoConfiguration.presetYaml(preset); // fails on an unknown name
      }
    } catch (RuntimeException e) { // IllegalArgumentException naming the property, bind errors
      LOG.warning("epp4j: the changed epp4j properties are invalid, keeping the current pool and"
          + " configuration: " + e.getMessage());
      return;
    }
    @Nullable Result<RouterConfig> result = null;
    if (file != null) {
      result = router.reconfigure(file);
    } else if (preset != null && presetYaml != null) {
      result = router.reconfigure(presetYaml, preset);
    }
    if (result != null && !result.isOk()) {
      LOG.log(Level.WARNING, "epp4j: the new routing configuration is invalid, keeping the"
          + " current pool and configuration: " + String.join("; ", result.errors()));
      return;
    }
    if (pool != null) {
      router.setEndpoints(pool);
    }
  }
}
