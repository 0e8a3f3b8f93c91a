package io.epp4j.scorers;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.epp4j.api.Endpoint;
import io.epp4j.core.ConfigException;
import io.epp4j.core.Router;
import java.util.List;
import org.junit.jupiter.api.Test;

/** How {@code decision-tree-filter} reads its nodes. */
class DecisionTreeFilterTest {
  static final List<Endpoint> POOL = List.of(Endpoint.parse("10.0.0.1:8000"));

  static String file(String current) {
    return """
        plugins:
        - type: low-queue-filter
        - type: least-queue-filter
        - type: decision-tree-filter
          parameters:
            current: %s
        - type: random-picker
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: decision-tree-filter
          - pluginRef: random-picker
        """.formatted(current);
  }

  /**
   * A node names its filter and nothing else: a branch written inside the node (one level too
   * deep) would otherwise be dropped without a word and the tree would route differently.
   */
  @Test
  void aNodeWithAFieldBesidesItsFilterIsRefusedNamingTheField() {
    String yaml = file("{pluginRef: low-queue-filter, nextOnFailure: {pluginRef: least-queue-filter}}");
    assertThatThrownBy(() -> Router.builder().endpoints(POOL).configYaml(yaml, "t.yaml").build())
        .isInstanceOf(ConfigException.class)
        .hasMessageContaining("current.nextOnFailure");
  }

  /**
   * The tree's own fields are all it has, at the top as at any depth: a misspelt branch
   * ({@code nextOnFailur}) would leave the tree without it, so requests the failure branch should
   * have routed would get nothing from the filter, and the file would load with a warning only.
   */
  @Test
  void aTopLevelFieldThatIsNotATreeFieldIsRefusedNamingIt() {
    String yaml = file("""
        {pluginRef: low-queue-filter}
            nextOnFailur: {pluginRef: least-queue-filter}""");
    assertThatThrownBy(() -> Router.builder().endpoints(POOL).configYaml(yaml, "t.yaml").build())
        .isInstanceOf(ConfigException.class)
        .hasMessageContaining("parameter 'nextOnFailur' is not a decision tree field; expected"
            + " current, nextOnSuccess, nextOnFailure, nextOnSuccessOrFailure");
  }

  @Test
  void aNodeWithOnlyItsFilterLoads() {
    String yaml = file("{pluginRef: low-queue-filter}");
    try (Router r = Router.builder().endpoints(POOL).configYaml(yaml, "t.yaml").build()) {
      assertThat(r.config().warnings()).isEmpty();
    }
  }
}
