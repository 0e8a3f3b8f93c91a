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
 * {@link Epp4jProperties} with the default its field starts with.
 */
class Epp4jPropertiesMetadataTest {
  private static final String PREFIX = "epp4j.";

  @Test
  void everyPropertyIsListedWithADescriptionAndTheDefaultItsFieldHas() throws Exception {
    JsonNode metadata = metadata();
    BeanWrapper defaults = PropertyAccessorFactory.forBeanPropertyAccess(new Epp4jProperties());
    List<String> listed = new ArrayList<>();
    for (JsonNode p : metadata.get("properties")) {
      String name = p.get("name").asText();
      listed.add(name);
      assertThat(p.path("description").asText()).as(name + " description").isNotBlank();
      Object java = defaults.getPropertyValue(camel(name.substring(PREFIX.length())));
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
    assertThat(listed).containsExactlyInAnyOrderElementsOf(
        leafProperties(Epp4jProperties.class, "epp4j"));
  }

  @Test
  void everyHintedValueStartsTheGatewayAndNamesAListedProperty() throws Exception {
    JsonNode metadata = metadata();
    List<String> listed = new ArrayList<>();
    metadata.get("properties").forEach(p -> listed.add(p.get("name").asText()));
    ApplicationContextRunner runner = new ApplicationContextRunner()
        .withConfiguration(AutoConfigurations.of(Epp4jAutoConfiguration.class))
        .withPropertyValues("epp4j.metrics.enabled=false", "epp4j.endpoints=127.0.0.1:9001");
    List<String> hinted = new ArrayList<>();
    for (JsonNode hint : metadata.path("hints")) {
      String name = hint.get("name").asText();
      hinted.add(name);
      assertThat(listed).as("hinted property").contains(name);
      assertThat(hint.path("values")).as(name + " values").isNotEmpty();
      for (JsonNode v : hint.path("values")) {
        String value = v.get("value").asText();
        runner.withPropertyValues(name + "=" + value)
            .run(ctx -> assertThat(ctx).as(name + "=" + value).hasNotFailed());
      }
    }
    assertThat(hinted).contains("epp4j.scheme", "epp4j.preset");
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
   * descended into, maps (the named pools) listed as one property, as the processor does.
   */
  private static List<String> leafProperties(Class<?> type, String prefix) {
    List<String> out = new ArrayList<>();
    for (PropertyDescriptor d : BeanUtils.getPropertyDescriptors(type)) {
      if (d.getName().equals("class")) {
        continue;
      }
      String name = prefix + "." + kebab(d.getName());
      Class<?> t = d.getPropertyType();
      if (t.getPackageName().equals(Epp4jProperties.class.getPackageName())) {
        out.addAll(leafProperties(t, name));
      } else {
        out.add(name);
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
