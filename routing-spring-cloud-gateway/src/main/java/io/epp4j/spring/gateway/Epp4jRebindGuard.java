package io.epp4j.spring.gateway;

import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.WeakHashMap;
import java.util.function.Supplier;
import org.jspecify.annotations.Nullable;
import org.springframework.boot.context.properties.ConfigurationPropertiesBindHandlerAdvisor;
import org.springframework.boot.context.properties.bind.AbstractBindHandler;
import org.springframework.boot.context.properties.bind.BindContext;
import org.springframework.boot.context.properties.bind.BindHandler;
import org.springframework.boot.context.properties.bind.Bindable;
import org.springframework.boot.context.properties.bind.Binder;
import org.springframework.boot.context.properties.bind.PropertySourcesPlaceholdersResolver;
import org.springframework.boot.context.properties.source.ConfigurationProperty;
import org.springframework.boot.context.properties.source.ConfigurationPropertyName;
import org.springframework.boot.context.properties.source.ConfigurationPropertySource;
import org.springframework.boot.context.properties.source.ConfigurationPropertySources;
import org.springframework.boot.context.properties.source.IterableConfigurationPropertySource;
import org.springframework.boot.context.properties.source.MapConfigurationPropertySource;
import org.springframework.core.env.Environment;

/**
 * Keeps Spring Cloud's {@code ConfigurationPropertiesRebinder} from binding an environment the
 * {@link Epp4jRefresher} refuses into the {@link Epp4jProperties} bean. On every refresh the
 * rebinder binds the bean again in place, with startup's check for unknown properties
 * ({@code ignoreUnknownFields = false}), which runs once the values are set: a misspelled
 * {@code epp4j.pools.llama.endpoint} left the bean half rebound (the pool gone from it) and threw
 * out of the refresh, so that the beans after it were not rebound and {@code /actuator/refresh}
 * failed with a stack trace.
 *
 * <p>Once the bean has been bound (startup, which still fails on such a property), each rebinding
 * first binds a fresh copy with the same checks; when that fails the bean is given back the
 * {@code epp4j.*} values of its last good binding (the rebinder has reset it to its defaults
 * before binding), which the routers run with, and the refresh goes on. The
 * {@link Epp4jRefresher} names the property in its warning; the next refresh without it binds the
 * bean as usual. Other {@code @ConfigurationProperties} beans are not touched.
 */
final class Epp4jRebindGuard implements ConfigurationPropertiesBindHandlerAdvisor {
  private final Environment environment;
  /** The bean instances bound once, with the epp4j.* values of their last good binding. */
  private final Map<Object, Map<String, Object>> bound =
      Collections.synchronizedMap(new WeakHashMap<>());

  Epp4jRebindGuard(Environment environment) {
    this.environment = environment;
  }

  @Override
  public BindHandler apply(BindHandler handler) {
    return new Guard(handler);
  }

  /** One binding of one bean (the binder asks the advisor for each). */
  private final class Guard extends AbstractBindHandler {
    private @Nullable Object refused;

    Guard(BindHandler parent) {
      super(parent);
    }

    @Override
    public <T> @Nullable Bindable<T> onStart(ConfigurationPropertyName name, Bindable<T> target,
        BindContext context) {
      @Nullable Object bean = epp4jBean(target, context);
      Map<String, Object> lastGood = bean == null ? null : bound.get(bean);
      if (bean != null && lastGood != null) {
        try {
          context.getBinder().bind(name, Bindable.of(Epp4jProperties.class),
              Epp4jRefresher.startupChecks());
        } catch (RuntimeException e) { // named by the Epp4jRefresher, which refuses it too
          refused = bean;
          new Binder(new MapConfigurationPropertySource(lastGood))
              .bind(name, Bindable.ofInstance((Epp4jProperties) bean));
          return null; // the environment's values are not bound
        }
      }
      return super.onStart(name, target, context);
    }

    @Override
    public void onFinish(ConfigurationPropertyName name, Bindable<?> target, BindContext context,
        @Nullable Object result) throws Exception {
      @Nullable Object bean = epp4jBean(target, context);
      if (bean != null && bean == refused) {
        return; // the check would report every epp4j property as unbound
      }
      super.onFinish(name, target, context, result);
      if (bean != null) {
        bound.put(bean, values(name));
      }
    }
  }

  /** The properties under {@code prefix}, placeholders resolved, the first source winning. */
  private Map<String, Object> values(ConfigurationPropertyName prefix) {
    PropertySourcesPlaceholdersResolver placeholders =
        new PropertySourcesPlaceholdersResolver(environment);
    Map<String, Object> values = new LinkedHashMap<>();
    for (ConfigurationPropertySource source : ConfigurationPropertySources.get(environment)) {
      if (source instanceof IterableConfigurationPropertySource iterable) {
        iterable.filter(prefix::isAncestorOf).stream().forEach(n -> {
          ConfigurationProperty property = iterable.getConfigurationProperty(n);
          Object value = property == null ? null : property.getValue();
          if (value != null) {
            values.putIfAbsent(n.toString(), placeholders.resolvePlaceholders(value));
          }
        });
      }
    }
    return values;
  }

  /** The existing {@link Epp4jProperties} instance a top-level binding fills; null otherwise. */
  private static @Nullable Object epp4jBean(Bindable<?> target, BindContext context) {
    if (context.getDepth() != 0) {
      return null;
    }
    Supplier<?> value = target.getValue();
    Object bean = value == null ? null : value.get();
    return bean instanceof Epp4jProperties ? bean : null;
  }
}
