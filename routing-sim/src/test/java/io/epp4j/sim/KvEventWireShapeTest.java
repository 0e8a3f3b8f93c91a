package io.epp4j.sim;

import static org.assertj.core.api.Assertions.assertThat;

import io.epp4j.kvevents.KvEvent;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.msgpack.core.MessagePack;
import org.msgpack.core.MessageUnpacker;
import org.msgpack.value.Value;

/**
 * The events' fields as vLLM's msgspec encoder writes them. In vLLM's {@code BlockStored},
 * {@code lora_id}, {@code medium} and {@code lora_name} have no default, and in
 * {@code BlockRemoved} {@code medium} has none: {@code omit_defaults} never drops them, and a
 * msgspec decoder built from vLLM's classes (vLLM's own example subscriber) refuses an event
 * without them ("Expected `array` of at least length ..." / "Object missing required field").
 */
class KvEventWireShapeTest {

  private static List<Value> events(boolean mapEncoding) throws Exception {
    int[] tokens = new int[16];
    byte[] payload = KvEventPublisher.encode(1.0, List.of(
        KvEvent.BlockStored.of(new long[] {42L}, null, tokens, 16),
        KvEvent.BlockRemoved.of(42L)), mapEncoding);
    try (MessageUnpacker u = MessagePack.newDefaultUnpacker(payload)) {
      return u.unpackValue().asArrayValue().get(1).asArrayValue().list();
    }
  }

  @Test
  void theArrayEncodingCarriesEveryFieldWithoutADefault() throws Exception {
    List<Value> events = events(false);
    List<Value> stored = events.get(0).asArrayValue().list();
    // ["BlockStored", hashes, parent, tokens, block_size, lora_id, medium, lora_name]
    assertThat(stored).hasSize(8);
    assertThat(stored.get(5).isNilValue()).as("lora_id").isTrue();
    assertThat(stored.get(6).toString()).as("medium").isEqualTo("GPU");
    assertThat(stored.get(7).isNilValue()).as("lora_name").isTrue();
    List<Value> removed = events.get(1).asArrayValue().list();
    // ["BlockRemoved", hashes, medium]
    assertThat(removed).hasSize(3);
    assertThat(removed.get(2).toString()).as("medium").isEqualTo("GPU");
  }

  @Test
  void theMapEncodingCarriesEveryFieldWithoutADefault() throws Exception {
    Map<String, Value> stored = new HashMap<>();
    for (Map.Entry<Value, Value> e : events(true).get(0).asMapValue().entrySet()) {
      stored.put(e.getKey().toString(), e.getValue());
    }
    assertThat(stored).containsKeys("lora_id", "medium", "lora_name");
    assertThat(stored.get("lora_id").isNilValue()).isTrue();
    assertThat(stored.get("lora_name").isNilValue()).isTrue();
    assertThat(stored).doesNotContainKey("extra_keys"); // its default, None, is omitted
  }
}
