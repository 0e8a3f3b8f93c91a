package io.epp4j.api;

import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.util.Arrays;
import java.util.HashSet;
import java.util.Set;
import org.junit.jupiter.api.Test;

/**
 * A null given to a value type's field is refused naming the field: before, these failed as a
 * NullPointerException with no message (or a message about {@code Set.copyOf}), so a gateway's
 * log did not say which field its code left null.
 */
class NullFieldsNamedTest {

  @Test
  void endpointMetricsNameANullAdapterSet() {
    assertThatThrownBy(() -> EndpointMetrics.builder().runningLoraAdapters(null).build())
        .isInstanceOf(NullPointerException.class).hasMessageContaining("runningLoraAdapters");
    assertThatThrownBy(() -> EndpointMetrics.builder().waitingLoraAdapters(null).build())
        .isInstanceOf(NullPointerException.class).hasMessageContaining("waitingLoraAdapters");
    Set<String> withNull = new HashSet<>(Arrays.asList("sql-lora", null));
    assertThatThrownBy(() -> EndpointMetrics.builder().runningLoraAdapters(withNull).build())
        .isInstanceOf(NullPointerException.class).hasMessageContaining("runningLoraAdapters");
  }

  @Test
  void inferenceRequestNamesANullField() {
    assertThatThrownBy(() -> InferenceRequest.builder().model(null))
        .isInstanceOf(NullPointerException.class).hasMessageContaining("model");
    assertThatThrownBy(() -> InferenceRequest.builder().requestId(null))
        .isInstanceOf(NullPointerException.class).hasMessageContaining("requestId");
    assertThatThrownBy(() -> InferenceRequest.builder().headers(null))
        .isInstanceOf(NullPointerException.class).hasMessageContaining("headers");
    assertThatThrownBy(() -> InferenceRequest.builder().messages(null))
        .isInstanceOf(NullPointerException.class).hasMessageContaining("messages");
    assertThatThrownBy(() -> InferenceRequest.builder()
            .messages(Arrays.asList(ChatMessage.user("hi"), null)))
        .isInstanceOf(NullPointerException.class)
        .hasMessageContaining("messages").hasMessageContaining("index 1");
    assertThatThrownBy(() -> InferenceRequest.builder().addMessage(null))
        .isInstanceOf(NullPointerException.class).hasMessageContaining("message");
  }
}
