package io.epp4j.spring.gateway;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.beans.PropertyDescriptor;
import java.io.InputStream;
import java.net.URL;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.springframework.beans.BeanUtils;
import org.springframework.beans.BeanWrapper;
import org.springframework.beans.PropertyAccessorFactory;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.convert.ApplicationConversionService;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;

/**
 * The IDE metadata of the {@code epp4j.*} properties (the configuration processor's output,
 * merged with {@code additional-spring-configuration-metadata.json}) describes every property of
 * {@link Epp4jProperties} with its type and the default its field starts with, the properties of
 * each named pool included ({@code epp4j.pools.*.endpoints}, the {@code *} standing for the pool's
 * name), which the processor leaves out: it lists {@code epp4j.pools} as one map.
 */
class Epp4jPropertiesMetadataTest {
  private static final String PREFIX = "epp4j.";
  private static final String POOL_PREFIX = "epp4j.pools.*.";

  @Test
  void everyPropertyIsListedWithADescriptionAndTheDefaultItsFieldHas() throws Exception {
    JsonNode metadata = metadata();
    BeanWrapper defaults = PropertyAccessorFactory.forBeanPropertyAccess(new Epp4jProperties());
    BeanWrapper poolDefaults =
        PropertyAccessorFactory.forBeanPropertyAccess(new Epp4jProperties.Pool());
    List<String> listed = new ArrayList<>();
    for (JsonNode p : metadata.get("properties")) {
      String name = p.get("name").asText();
      listed.add(name);
      assertThat(p.path("description").asText()).as(name + " description").isNotBlank();
      BeanWrapper bean = name.startsWith(POOL_PREFIX) ? poolDefaults : defaults;
      String path = camel(name.substring(
          name.startsWith(POOL_PREFIX) ? POOL_PREFIX.length() : PREFIX.length()));
      assertThat(p.path("type").asText()).as(name + " type")
          .isEqualTo(typeName(bean.getPropertyTypeDescriptor(path).getResolvableType()
              .getType()));
      Object java = bean.getPropertyValue(path);
      JsonNode meta = p.get("defaultValue");
      if (java == null || java instanceof Collection<?> c && c.isEmpty()
          || java instanceof Map<?, ?> m && m.isEmpty()) {
        assertThat(meta).as(name + " has no default, metadata says " + meta).isNull();
        continue;
      }
      assertThat(meta).as(name + " default (" + java + ") missing from the metadata").isNotNull();
      Object fromMetadata;
      if (meta.isArray()) {
        List<String> items = new ArrayList<>();
        meta.forEach(i -> items.add(i.asText()));
        fromMetadata = items;
      } else if (meta.isBoolean()) {
        fromMetadata = meta.asBoolean();
      } else {
        fromMetadata = ApplicationConversionService.getSharedInstance()
            .convert(meta.asText(), java.getClass());
      }
      assertThat(fromMetadata).as(name + " default").isEqualTo(java);
    }
    List<String> groups = new ArrayList<>();
    assertThat(listed).containsExactlyInAnyOrderElementsOf(
        leafProperties(Epp4jProperties.class, "epp4j", groups));
    List<String> listedGroups = new ArrayList<>();
    for (JsonNode g : metadata.get("groups")) {
      String name = g.get("name").asText();
      listedGroups.add(name);
      if (name.startsWith("epp4j.pools")) { // written by hand: its type must be the pool's class
        assertThat(g.path("description").asText()).as(name + " description").isNotBlank();
        Class<?> type = name.endsWith(".metrics") ? Epp4jProperties.PoolMetrics.class
            : name.endsWith(".discovery") ? Epp4jProperties.PoolDiscovery.class
            : Epp4jProperties.Pool.class;
        assertThat(g.path("type").asText()).as(name + " type").isEqualTo(type.getName());
      }
    }
    assertThat(listedGroups).containsExactlyInAnyOrderElementsOf(groups);
  }

  /** The type as the configuration processor writes it: boxed, generics without spaces. */
  private static String typeName(java.lang.reflect.Type type) {
    if (type instanceof Class<?> c && c.isPrimitive()) {
      return org.springframework.util.ClassUtils.resolvePrimitiveIfNecessary(c).getName();
    }
    return type.getTypeName().replace(", ", ",");
  }

  @Test
  void everyHintedValueStartsTheGatewayAndNamesAListedProperty() throws Exception {
    JsonNode metadata = metadata();
    List<String> listed = new ArrayList<>();
    metadata.get("properties").forEach(p -> listed.add(p.get("name").asText()));
    ApplicationContextRunner runner = new ApplicationContextRunner()
        .withConfiguration(AutoConfigurations.of(Epp4jAutoConfiguration.class))
        .withPropertyValues("epp4j.metrics.enabled=false", "epp4j.endpoints=127.0.0.1:9001",
            "epp4j.pools.llama.endpoints=127.0.0.1:9002");
    List<String> hinted = new ArrayList<>();
    for (JsonNode hint : metadata.path("hints")) {
      String name = hint.get("name").asText();
      hinted.add(name);
      assertThat(listed).as("hinted property").contains(name);
      assertThat(hint.path("values")).as(name + " values").isNotEmpty();
      // a pool's property is set on a pool of the name llama
      String property = name.replace(".*.", ".llama.");
      for (JsonNode v : hint.path("values")) {
        String value = v.get("value").asText();
        runner.withPropertyValues(property + "=" + value)
            .run(ctx -> assertThat(ctx).as(property + "=" + value).hasNotFailed());
      }
    }
    assertThat(hinted).contains("epp4j.scheme", "epp4j.preset", "epp4j.pools.*.scheme",
        "epp4j.pools.*.preset");
  }

  /**
   * Every property the metadata names for one pool ({@code epp4j.pools.*.x}) binds, with the
   * {@code *} made a pool's name: a property there that no field takes would fail startup.
   */
  @Test
  void everyPoolPropertyBindsOnANamedPool() throws Exception {
    List<String> names = new ArrayList<>();
    metadata().get("properties").forEach(p -> names.add(p.get("name").asText()));
    List<String> ofPools = names.stream().filter(n -> n.startsWith(POOL_PREFIX)).toList();
    assertThat(ofPools).contains(POOL_PREFIX + "endpoints", POOL_PREFIX + "metrics.path",
        POOL_PREFIX + "discovery.service-id");
    for (String name : ofPools) {
      String property = name.replace(".*.", ".llama.");
      org.springframework.mock.env.MockEnvironment env = new org.springframework.mock.env
          .MockEnvironment().withProperty("epp4j.pools.llama.endpoints", "127.0.0.1:9002");
      if (!name.endsWith(".endpoints")) {
        env.setProperty(property, sample(name));
      }
      Epp4jProperties bound = org.springframework.boot.context.properties.bind.Binder.get(env)
          .bind("epp4j", Epp4jProperties.class).get();
      BeanWrapper pool = PropertyAccessorFactory.forBeanPropertyAccess(
          bound.getPools().get("llama"));
      assertThat(pool.getPropertyValue(camel(name.substring(POOL_PREFIX.length()))))
          .as(property).isNotNull();
    }
  }

  /** A value of the property's kind. */
  private static String sample(String name) {
    if (name.endsWith("enabled") || name.endsWith("insecure-skip-verify")) {
      return "true";
    }
    if (name.endsWith("interval") || name.endsWith("max-age")) {
      return "5s";
    }
    if (name.endsWith("max-body-size")) {
      return "1MB";
    }
    if (name.endsWith("path")) {
      return "/metrics";
    }
    return "x";
  }

  /** The metadata the configuration processor wrote for this module (the one with epp4j). */
  private static JsonNode metadata() throws Exception {
    ObjectMapper json = new ObjectMapper();
    for (URL url : Collections.list(Epp4jPropertiesMetadataTest.class.getClassLoader()
        .getResources("META-INF/spring-configuration-metadata.json"))) {
      try (InputStream in = url.openStream()) {
        JsonNode root = json.readTree(in);
        for (JsonNode g : root.path("groups")) {
          if (g.path("name").asText().equals("epp4j")) {
            return root;
          }
        }
      }
    }
    throw new AssertionError("no metadata with the group epp4j on the class path");
  }

  /**
   * The property names of {@code type}'s fields in kebab case: nested groups of this package
   * descended into (and added to {@code groups}, {@code prefix} with them); a map of this
   * package's values (the named pools) listed as one property, as the processor does, and its
   * values' properties under {@code <map>.*}.
   */
  private static List<String> leafProperties(Class<?> type, String prefix, List<String> groups) {
    groups.add(prefix);
    List<String> out = new ArrayList<>();
    for (PropertyDescriptor d : BeanUtils.getPropertyDescriptors(type)) {
      if (d.getName().equals("class")) {
        continue;
      }
      String name = prefix + "." + kebab(d.getName());
      Class<?> t = d.getPropertyType();
      if (t.getPackageName().equals(Epp4jProperties.class.getPackageName())) {
        out.addAll(leafProperties(t, name, groups));
        continue;
      }
      out.add(name);
      if (Map.class.isAssignableFrom(t)) {
        Class<?> value = org.springframework.core.ResolvableType
            .forMethodReturnType(d.getReadMethod()).asMap().resolveGeneric(1);
        if (value != null
            && value.getPackageName().equals(Epp4jProperties.class.getPackageName())) {
          out.addAll(leafProperties(value, name + ".*", groups));
        }
      }
    }
    return out;
  }

  private static String kebab(String camel) {
    return camel.replaceAll("([a-z0-9])([A-Z])", "$1-$2").toLowerCase(java.util.Locale.ROOT);
  }

  private static String camel(String kebab) {
    StringBuilder b = new StringBuilder();
    boolean up = false;
    for (char c : kebab.toCharArray()) {
      if (c == '-') {
        up = true;
      } else {
        b.append(up ? Character.toUpperCase(c) : c);
        up = false;
      }
    }
    return b.toString();
  }
}
