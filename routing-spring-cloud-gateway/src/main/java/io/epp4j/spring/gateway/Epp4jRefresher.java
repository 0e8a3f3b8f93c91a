package io.epp4j.spring.gateway;

import io.epp4j.api.Result;
import io.epp4j.core.Router;
import io.epp4j.core.RouterConfig;
import java.nio.file.Path;
import java.util.logging.Level;
import java.util.logging.Logger;
import org.springframework.boot.context.properties.bind.Binder;
import org.springframework.cloud.context.environment.EnvironmentChangeEvent;
import org.springframework.context.ApplicationListener;
import org.springframework.core.env.Environment;

/**
 * Applies changed {@code epp4j.*} properties to the running router when Spring Cloud reports an
 * environment change (a {@code /actuator/refresh}, a config server push): the endpoint list is
 * replaced and the config file or preset is loaded again. Requests in flight keep their decisions
 * and are counted against the new pool where their endpoint stays. An invalid new configuration is
 * logged and the router keeps the one it has.
 */
public class Epp4jRefresher implements ApplicationListener<EnvironmentChangeEvent> {
  private static final Logger LOG = Logger.getLogger(Epp4jRefresher.class.getName());

  private final Router router;
  private final Environment environment;

  public Epp4jRefresher(Router router, Environment environment) {
    this.router = router;
    this.environment = environment;
  }

  @Override
  public void onApplicationEvent(EnvironmentChangeEvent event) {
    boolean ours = event.getKeys().stream().anyMatch(k -> k.startsWith("epp4j."));
    if (!ours) {
      return;
    }
    Epp4jProperties p = Binder.get(environment)
        .bind("epp4j", Epp4jProperties.class).orElseGet(Epp4jProperties::new);
    router.setEndpoints(Epp4jAutoConfiguration.endpoints(p.getEndpoints()));
    String file = p.getConfigFile();
    String preset = p.getPreset();
    Result<RouterConfig> result;
    if (file != null && !file.isBlank()) {
      result = router.reconfigure(Path.of(file));
    } else if (preset != null && !preset.isBlank()) {
      result = router.reconfigure(Epp4jAutoConfiguration.presetYaml(preset), preset);
    } else {
      return;
    }
    if (!result.isOk()) {
      LOG.log(Level.WARNING, "epp4j: the new routing configuration is invalid, keeping the"
          + " current one: " + String.join("; ", result.errors()));
    }
  }
}
