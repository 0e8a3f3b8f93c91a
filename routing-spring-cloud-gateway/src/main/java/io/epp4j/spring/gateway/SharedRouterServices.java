package io.epp4j.spring.gateway;

import io.epp4j.core.Router;
import java.util.function.Consumer;
import org.springframework.beans.factory.BeanFactory;
import org.springframework.beans.factory.config.ConfigurableBeanFactory;
import org.springframework.util.ClassUtils;

/**
 * The application's beans that every router this module builds gets as a router service, so
 * that the pools share them instead of each starting its own: today Lettuce's
 * {@code ClientResources} (Spring Boot's Redis support makes one), which routing-redis runs its
 * clients on. Lettuce is optional: without it on the classpath nothing is looked up, and its
 * types are only touched by the nested class, loaded once Lettuce is known to be there.
 */
final class SharedRouterServices {
  private static final String LETTUCE_RESOURCES = "io.lettuce.core.resource.ClientResources";

  private SharedRouterServices() {}

  /** What to add to each router builder: nothing when the application has no such bean. */
  static Consumer<Router.Builder> of(BeanFactory beans) {
    ClassLoader loader = beans instanceof ConfigurableBeanFactory f && f.getBeanClassLoader() != null
        ? f.getBeanClassLoader() : SharedRouterServices.class.getClassLoader();
    return ClassUtils.isPresent(LETTUCE_RESOURCES, loader) ? Lettuce.of(beans) : b -> {};
  }

  private static final class Lettuce {
    static Consumer<Router.Builder> of(BeanFactory beans) {
      // one bean, or the primary one among several; none when it is ambiguous
      io.lettuce.core.resource.ClientResources resources =
          beans.getBeanProvider(io.lettuce.core.resource.ClientResources.class).getIfUnique();
      if (resources == null) {
        return b -> {};
      }
      return b -> b.service(io.lettuce.core.resource.ClientResources.class, resources);
    }
  }
}
