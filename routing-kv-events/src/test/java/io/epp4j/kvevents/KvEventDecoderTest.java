package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.catchThrowable;

import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.math.BigInteger;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import org.junit.jupiter.api.Test;
import org.msgpack.core.MessageBufferPacker;
import org.msgpack.core.MessagePack;

class KvEventDecoderTest {

  static KvEvent randomEvent(Random r) {
    int kind = r.nextInt(10);
    if (kind == 0) {
      return KvEvent.AllBlocksCleared.INSTANCE;
    }
    int blocks = r.nextInt(5);
    long[] hashes = new long[blocks];
    for (int i = 0; i < blocks; i++) {
      hashes[i] = r.nextInt(4) == 0 ? -1L - r.nextInt(1000) : r.nextLong(); // many above MAX
    }
    Medium medium = r.nextBoolean() ? Medium.GPU : Medium.CPU;
    if (kind < 4) {
      return new KvEvent.BlockRemoved(hashes, medium);
    }
    int bs = 1 + r.nextInt(32);
    if (blocks == 0) {
      hashes = new long[] {r.nextLong()};
      blocks = 1;
    }
    int[] tokens = new int[blocks * bs];
    for (int i = 0; i < tokens.length; i++) {
      tokens[i] = r.nextInt(200_000);
    }
    boolean parent = r.nextBoolean();
    String lora = r.nextInt(3) == 0 ? "adapter-" + r.nextInt(5) : null;
    int loraId = lora != null ? 1 + r.nextInt(5) : -1;
    String salt = !parent && r.nextInt(3) == 0 ? "salt-" + r.nextInt(100) : null;
    return new KvEvent.BlockStored(hashes, parent, parent ? r.nextLong() : 0, tokens, bs, loraId,
        medium, lora, salt);
  }

  static KvEventBatch randomBatch(Random r) {
    List<KvEvent> events = new ArrayList<>();
    int n = r.nextInt(6);
    for (int i = 0; i < n; i++) {
      events.add(randomEvent(r));
    }
    return new KvEventBatch(1.7e9 + r.nextDouble(), events, r.nextBoolean() ? r.nextInt(8) : -1);
  }

  @Test
  void randomBatchesRoundTripInEveryShapeAndHashEncoding() throws Exception {
    Random r = new Random(42);
    for (int iter = 0; iter < 3000; iter++) {
      KvEventBatch batch = randomBatch(r);
      VllmEventEncoder.Shape shape = VllmEventEncoder.Shape.values()[iter % 2];
      boolean binary = (iter / 2) % 2 == 1;
      byte[] payload =
          new VllmEventEncoder(shape, binary, iter, iter % 3 == 0).encode(batch);
      KvEventBatch decoded = KvEventDecoder.decode(payload);
      assertThat(decoded).as("iteration %d shape %s binary %s", iter, shape, binary)
          .isEqualTo(batch);
    }
  }

  /** Writes one event into a batch {@code [ts, [event], dp_rank]}. */
  private interface EventWriter {
    void write(MessageBufferPacker p) throws IOException;
  }

  private static byte[] batchOf(EventWriter event) throws IOException {
    try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
      p.packArrayHeader(3).packDouble(1.7e9).packArrayHeader(1);
      event.write(p);
      p.packInt(0);
      return p.toByteArray();
    }
  }

  /**
   * Each event type in both of vLLM's shapes, with every optional field newer engines send
   * (LoRA, medium, extra keys, KV-cache group, spec kind and window, binary hashes, a field no
   * engine sends yet) and without them: cut short at every byte, with each byte overwritten
   * by format markers and length prefixes, or with bytes after it. Each either decodes, and
   * then applies to an index without an exception, or is refused as malformed with a message:
   * nothing else escapes that the subscriber would have to report as a failed handling.
   */
  @Test
  void everyEventTypeWithAndWithoutItsOptionalFieldsDecodesOrIsMalformedWhenDamaged()
      throws Exception {
    int[] tokens = new int[32];
    for (int i = 0; i < 32; i++) {
      tokens[i] = 100 + i;
    }
    List<byte[]> valid = List.of(
        batchOf(p -> {
          p.packArrayHeader(12).packString("BlockStored").packArrayHeader(2).packLong(1)
              .packLong(2).packNil().packArrayHeader(32);
          for (int t : tokens) {
            p.packInt(t);
          }
          p.packInt(16).packInt(3).packString("CPU").packString("lora-a").packArrayHeader(2)
              .packArrayHeader(1).packString("salt").packNil().packInt(1)
              .packString("sliding_window").packInt(64);
        }),
        batchOf(p -> {
          p.packArrayHeader(5).packString("BlockStored").packArrayHeader(1).packLong(7).packNil()
              .packArrayHeader(16);
          for (int i = 0; i < 16; i++) {
            p.packInt(tokens[i]);
          }
          p.packInt(16);
        }),
        batchOf(p -> {
          p.packMapHeader(13).packString("type").packString("BlockStored")
              .packString("block_hashes").packArrayHeader(2).packBinaryHeader(32)
              .writePayload(new byte[32]).packBinaryHeader(32).writePayload(new byte[32])
              .packString("parent_block_hash").packNil().packString("token_ids")
              .packArrayHeader(32);
          for (int t : tokens) {
            p.packInt(t);
          }
          p.packString("block_size").packInt(16).packString("lora_id").packNil()
              .packString("medium").packString("GPU").packString("lora_name").packNil()
              .packString("extra_keys").packNil().packString("group_idx").packInt(2)
              .packString("kv_cache_spec_kind").packString("mamba")
              .packString("kv_cache_spec_sliding_window").packNil()
              .packString("a_later_field").packMapHeader(1).packString("x").packInt(1);
        }),
        batchOf(p -> p.packArrayHeader(4).packString("BlockRemoved").packArrayHeader(2)
            .packLong(1).packLong(-5).packString("CPU").packInt(1)),
        batchOf(p -> p.packArrayHeader(2).packString("BlockRemoved").packArrayHeader(1)
            .packLong(2)),
        batchOf(p -> p.packMapHeader(4).packString("type").packString("BlockRemoved")
            .packString("block_hashes").packArrayHeader(1).packLong(1).packString("medium")
            .packNil().packString("group_idx").packNil()),
        batchOf(p -> p.packArrayHeader(1).packString("AllBlocksCleared")),
        batchOf(p -> p.packMapHeader(1).packString("type").packString("AllBlocksCleared")));
    KvEventBatch stored = KvEventDecoder.decode(valid.get(0));
    int[] markers = {0x00, 0x7f, 0x81, 0x91, 0xc0, 0xc1, 0xc2, 0xca, 0xcf, 0xd3, 0xdd, 0xdf, 0xff};
    int decoded = 0;
    int malformed = 0;
    for (byte[] v : valid) {
      assertThat(KvEventDecoder.decode(v).events()).hasSize(1);
      List<byte[]> damaged = new ArrayList<>();
      for (int cut = 0; cut < v.length; cut++) {
        damaged.add(java.util.Arrays.copyOf(v, cut));
      }
      for (int i = 0; i < v.length; i++) {
        for (int b : markers) {
          byte[] c = v.clone();
          c[i] = (byte) b;
          damaged.add(c);
        }
      }
      damaged.add(java.util.Arrays.copyOf(v, v.length + 1000));
      for (byte[] d : damaged) {
        KvEventBatch batch;
        try {
          batch = KvEventDecoder.decode(d);
        } catch (MalformedKvEventException e) {
          assertThat(e.getMessage()).isNotBlank();
          malformed++;
          continue;
        }
        KvBlockIndex index = KvBlockIndex.create();
        index.apply("e", stored);
        index.apply("e", batch); // throws nothing
        decoded++;
      }
    }
    // both outcomes are reached: the damage is neither all harmless nor all fatal
    assertThat(decoded).isGreaterThan(1000);
    assertThat(malformed).isGreaterThan(1000);
  }

  @Test
  void hashesAboveLongMaxKeepTheirBits() throws Exception {
    BigInteger big = new BigInteger("18446744073709551557"); // 2^64 - 59
    byte[] payload;
    try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
      p.packArrayHeader(2).packDouble(1.0).packArrayHeader(1);
      p.packArrayHeader(2).packString("BlockRemoved").packArrayHeader(1).packBigInteger(big);
      payload = p.toByteArray();
    }
    KvEvent.BlockRemoved e = (KvEvent.BlockRemoved) KvEventDecoder.decode(payload).events().get(0);
    assertThat(Long.toUnsignedString(e.blockHashes()[0])).isEqualTo(big.toString());
    assertThat(e.medium()).isEqualTo(Medium.GPU);
  }

  @Test
  void olderTaggedArrayWithoutOptionalTrailingFieldsDecodes() throws Exception {
    byte[] payload;
    try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
      p.packArrayHeader(2).packDouble(1.5).packArrayHeader(1);
      // ["BlockStored", [7], nil, [1,2], 2]  -- vLLM 0.8-style, no lora_id/medium
      p.packArrayHeader(5).packString("BlockStored").packArrayHeader(1).packLong(7).packNil()
          .packArrayHeader(2).packInt(1).packInt(2).packInt(2);
      payload = p.toByteArray();
    }
    KvEventBatch b = KvEventDecoder.decode(payload);
    assertThat(b.dataParallelRank()).isEqualTo(-1);
    assertThat(b.events()).containsExactly(
        KvEvent.BlockStored.of(new long[] {7}, null, new int[] {1, 2}, 2));
  }

  @Test
  void unknownEventTypesAreSkipped() throws Exception {
    byte[] payload;
    try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
      p.packArrayHeader(2).packDouble(1.5).packArrayHeader(3);
      p.packArrayHeader(2).packString("SomethingNew").packInt(3);
      p.packMapHeader(1).packString("type").packString("AlsoNew");
      p.packArrayHeader(1).packString("AllBlocksCleared");
      payload = p.toByteArray();
    }
    assertThat(KvEventDecoder.decode(payload).events())
        .containsExactly(KvEvent.AllBlocksCleared.INSTANCE);
  }

  @Test
  void blockHashesDecodeInEveryIntegerEncoding() throws Exception {
    long[] hashes = {0, 127, 200, 40_000, 70_000, 5_000_000_000L, -1, -100, -40_000,
        -3_000_000_000L, Long.MIN_VALUE, Long.MAX_VALUE, -2 /* as uint64 */};
    byte[] payload;
    try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
      p.packArrayHeader(2).packDouble(1.5).packArrayHeader(1);
      p.packArrayHeader(3).packString("BlockRemoved").packArrayHeader(hashes.length);
      for (int i = 0; i < hashes.length - 1; i++) {
        p.packLong(hashes[i]);
      }
      p.packBigInteger(new BigInteger(Long.toUnsignedString(-2L)));
      p.packString("GPU");
      payload = p.toByteArray();
    }
    KvEvent.BlockRemoved r = (KvEvent.BlockRemoved) KvEventDecoder.decode(payload).events().get(0);
    assertThat(r.blockHashes()).containsExactly(hashes);
  }

  @Test
  void tokenIdsDecodeInEveryIntegerEncodingAndOutOfRangeValuesAreMalformed() throws Exception {
    // 0..127 fixint, uint8, uint16, uint32, negative fixint, int8/16/32, and the same values
    // written in wider formats than needed, as some writers do
    int[] tokens = {0, 127, 128, 255, 256, 65_535, 65_536, Integer.MAX_VALUE, -1, -32, -33,
        -129, -40_000, Integer.MIN_VALUE, 5, 300, 70_000, -2};
    byte[] payload;
    try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
      p.packArrayHeader(2).packDouble(1.5).packArrayHeader(1);
      p.packArrayHeader(5).packString("BlockStored").packArrayHeader(1).packLong(7).packNil()
          .packArrayHeader(tokens.length);
      for (int i = 0; i < tokens.length - 4; i++) {
        p.packInt(tokens[i]);
      }
      p.addPayload(new byte[] {(byte) 0xd2, 0, 0, 0, 5}); // int32 holding 5
      p.addPayload(new byte[] {(byte) 0xce, 0, 0, 1, 44}); // uint32 holding 300
      p.addPayload(new byte[] {(byte) 0xd3, 0, 0, 0, 0, 0, 1, 17, 112}); // int64 holding 70,000
      p.addPayload(new byte[] {(byte) 0xd1, (byte) 0xff, (byte) 0xfe}); // int16 holding -2
      p.packInt(tokens.length);
      payload = p.toByteArray();
    }
    KvEvent.BlockStored s = (KvEvent.BlockStored) KvEventDecoder.decode(payload).events().get(0);
    assertThat(s.tokenIds()).containsExactly(tokens);
    assertThat(s.blockSize()).isEqualTo(tokens.length);

    for (long bad : new long[] {1L + Integer.MAX_VALUE, Integer.MIN_VALUE - 1L}) {
      byte[] badPayload;
      try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
        p.packArrayHeader(2).packDouble(1.5).packArrayHeader(1);
        p.packArrayHeader(5).packString("BlockStored").packArrayHeader(1).packLong(7).packNil()
            .packArrayHeader(2).packInt(1).packLong(bad).packInt(2);
        badPayload = p.toByteArray();
      }
      assertThatThrownBy(() -> KvEventDecoder.decode(badPayload))
          .isInstanceOf(MalformedKvEventException.class).hasMessageContaining("token_ids");
    }
  }

  /**
   * Integers too large for the field that holds them (a corrupt or hostile payload) are
   * malformed, and the message names the field, as for any other bad value.
   */
  @Test
  void integersOutOfRangeNameTheirField() throws IOException {
    long tooBig = 1L + Integer.MAX_VALUE;
    Map<String, byte[]> cases = new LinkedHashMap<>();
    for (String field : new String[] {"block_size", "lora_id"}) {
      try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
        p.packArrayHeader(2).packDouble(1.5).packArrayHeader(1);
        p.packArrayHeader(6).packString("BlockStored").packArrayHeader(1).packLong(7).packNil()
            .packArrayHeader(2).packInt(1).packInt(2)
            .packLong(field.equals("block_size") ? tooBig : 2)
            .packLong(field.equals("lora_id") ? tooBig : -1);
        cases.put(field, p.toByteArray());
      }
    }
    try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
      p.packArrayHeader(3).packDouble(1.5).packArrayHeader(0).packLong(tooBig);
      cases.put("data_parallel_rank", p.toByteArray());
    }
    try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
      // a uint64 beyond Long.MAX_VALUE where the step's time belongs
      p.packArrayHeader(2).packBigInteger(java.math.BigInteger.ONE.shiftLeft(64).subtract(
          java.math.BigInteger.ONE)).packArrayHeader(0);
      cases.put("ts", p.toByteArray());
    }
    for (Map.Entry<String, byte[]> c : cases.entrySet()) {
      assertThatThrownBy(() -> KvEventDecoder.decode(c.getValue())).as(c.getKey())
          .isInstanceOf(MalformedKvEventException.class).hasMessageContaining(c.getKey());
    }
  }

  /**
   * vLLM's data_parallel_rank is a rank (0 or more) or nil. A negative one is malformed and
   * named, in both batch shapes; before, it was read as "no rank", and so a batch that no engine
   * core could have sent passed the rank check of every endpoint.
   */
  @Test
  void aNegativeDataParallelRankIsMalformedInBothBatchShapes() throws Exception {
    for (long rank : new long[] {-1, -2, Integer.MIN_VALUE}) {
      byte[] array;
      try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
        p.packArrayHeader(3).packDouble(1.5).packArrayHeader(0).packLong(rank);
        array = p.toByteArray();
      }
      byte[] map;
      try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
        p.packMapHeader(3).packString("ts").packDouble(1.5).packString("events")
            .packArrayHeader(0).packString("data_parallel_rank").packLong(rank);
        map = p.toByteArray();
      }
      for (byte[] payload : List.of(array, map)) {
        assertThatThrownBy(() -> KvEventDecoder.decode(payload)).as("rank %d", rank)
            .isInstanceOf(MalformedKvEventException.class)
            .hasMessageContaining("data_parallel_rank").hasMessageContaining(String.valueOf(rank));
      }
    }
    // nil is "no rank", and rank 0 is a rank
    for (boolean nil : new boolean[] {true, false}) {
      byte[] array;
      byte[] map;
      try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
        p.packArrayHeader(3).packDouble(1.5).packArrayHeader(0);
        if (nil) {
          p.packNil();
        } else {
          p.packInt(0);
        }
        array = p.toByteArray();
      }
      try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
        p.packMapHeader(3).packString("ts").packDouble(1.5).packString("events")
            .packArrayHeader(0).packString("data_parallel_rank");
        if (nil) {
          p.packNil();
        } else {
          p.packInt(0);
        }
        map = p.toByteArray();
      }
      for (byte[] payload : List.of(array, map)) {
        assertThat(KvEventDecoder.decode(payload).dataParallelRank()).isEqualTo(nil ? -1 : 0);
      }
    }
  }

  /**
   * BlockStored's block_size and lora_id are 0 or more, or nil. A negative one is malformed and
   * named, in both event shapes; before, it was read as absent: the block size was then taken
   * from the tokens, and a LoRA's blocks were keyed as the base model's.
   */
  @Test
  void aNegativeBlockSizeOrLoraIdIsMalformedNotAbsent() throws Exception {
    for (String field : new String[] {"block_size", "lora_id"}) {
      for (int bad : new int[] {-1, -16, Integer.MIN_VALUE}) {
        int blockSize = field.equals("block_size") ? bad : 2;
        int loraId = field.equals("lora_id") ? bad : 3;
        byte[] array;
        try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
          p.packArrayHeader(2).packDouble(1.5).packArrayHeader(1);
          p.packArrayHeader(6).packString("BlockStored").packArrayHeader(1).packLong(7).packNil()
              .packArrayHeader(2).packInt(1).packInt(2).packInt(blockSize).packInt(loraId);
          array = p.toByteArray();
        }
        byte[] map;
        try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
          p.packArrayHeader(2).packDouble(1.5).packArrayHeader(1);
          p.packMapHeader(6).packString("type").packString("BlockStored")
              .packString("block_hashes").packArrayHeader(1).packLong(7)
              .packString("parent_block_hash").packNil()
              .packString("token_ids").packArrayHeader(2).packInt(1).packInt(2)
              .packString("block_size").packInt(blockSize)
              .packString("lora_id").packInt(loraId);
          map = p.toByteArray();
        }
        for (byte[] payload : List.of(array, map)) {
          assertThatThrownBy(() -> KvEventDecoder.decode(payload)).as("%s %d", field, bad)
              .isInstanceOf(MalformedKvEventException.class).hasMessageContaining(field)
              .hasMessageContaining(String.valueOf(bad));
        }
      }
    }
    // nil is absent, and 0 is a value (block_size 0: a store vLLM cannot describe)
    byte[] payload;
    try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
      p.packArrayHeader(2).packDouble(1.5).packArrayHeader(2);
      p.packArrayHeader(6).packString("BlockStored").packArrayHeader(1).packLong(7).packNil()
          .packArrayHeader(2).packInt(1).packInt(2).packNil().packNil();
      p.packArrayHeader(6).packString("BlockStored").packArrayHeader(1).packLong(8).packNil()
          .packArrayHeader(2).packInt(1).packInt(2).packInt(0).packInt(0);
      payload = p.toByteArray();
    }
    List<KvEvent> events = KvEventDecoder.decode(payload).events();
    assertThat(events).hasSize(2);
    assertThat(((KvEvent.BlockStored) events.get(0)).loraId()).isEqualTo(-1);
    assertThat(((KvEvent.BlockStored) events.get(0)).blockSize()).isEqualTo(2);
    assertThat(((KvEvent.BlockStored) events.get(1)).loraId()).isZero();
    assertThat(((KvEvent.BlockStored) events.get(1)).blockSize()).isEqualTo(2);
  }

  @Test
  void tokenCountThatDoesNotMatchTheBlocksIsMalformed() throws IOException {
    byte[] payload;
    try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
      p.packArrayHeader(2).packDouble(1.5).packArrayHeader(1);
      p.packArrayHeader(5).packString("BlockStored").packArrayHeader(2).packLong(7).packLong(8)
          .packNil().packArrayHeader(3).packInt(1).packInt(2).packInt(3).packInt(2);
      payload = p.toByteArray();
    }
    assertThatThrownBy(() -> KvEventDecoder.decode(payload))
        .isInstanceOf(MalformedKvEventException.class).hasMessageContaining("token_ids");
  }

  @Test
  void corruptedPayloadsOnlyEverFailWithMalformedKvEventException() {
    Random r = new Random(7);
    int malformed = 0;
    for (int iter = 0; iter < 5000; iter++) {
      byte[] payload = new VllmEventEncoder(VllmEventEncoder.Shape.values()[iter % 2],
          iter % 4 >= 2).encode(randomBatch(r));
      byte[] bad;
      switch (iter % 3) {
        case 0 -> bad = java.util.Arrays.copyOf(payload, r.nextInt(payload.length));
        case 1 -> {
          bad = payload.clone();
          for (int k = 0; k < 3; k++) {
            bad[r.nextInt(bad.length)] = (byte) r.nextInt(256);
          }
        }
        default -> {
          bad = new byte[r.nextInt(64)];
          r.nextBytes(bad);
        }
      }
      try {
        KvEventDecoder.decode(bad);
      } catch (MalformedKvEventException e) {
        malformed++;
        assertThat(e.getMessage()).isNotBlank();
      }
    }
    assertThat(malformed).isGreaterThan(2000);
  }

  /** Bytes the calling thread allocates while {@code r} runs (HotSpot counts them exactly). */
  static long allocatedBytes(Runnable r) {
    com.sun.management.ThreadMXBean mx =
        (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();
    long before = mx.getCurrentThreadAllocatedBytes();
    r.run();
    return mx.getCurrentThreadAllocatedBytes() - before;
  }

  static byte[] hex(String spaced) {
    return HexFormat.of().parseHex(spaced.replace(" ", ""));
  }

  static String str(String s) {
    return HexFormat.of().formatHex(new byte[] {(byte) (0xa0 | s.length())})
        + HexFormat.of().formatHex(s.getBytes(java.nio.charset.StandardCharsets.US_ASCII));
  }

  /**
   * Headers that promise far more elements or bytes than the payload holds, in every place the
   * decoder reads a length. None may be believed: each is a malformed payload, found without
   * allocating anything near the promised size.
   */
  @Test
  void lengthsBeyondTheRemainingBytesAreMalformedAndNeverAllocated() {
    String stored = str("BlockStored");
    String removed = str("BlockRemoved");
    Map<String, byte[]> hostile = new LinkedHashMap<>();
    hostile.put("events: array32 of 2^31-1", hex("92 00 dd 7f ff ff ff"));
    hostile.put("batch: array32 of 2^26", hex("dd 04 00 00 00"));
    hostile.put("batch: map32 of 2^31-1", hex("df 7f ff ff ff"));
    hostile.put("block_hashes: array32 of 2^26", hex("92 00 91 92" + removed + "dd 04 00 00 00"));
    hostile.put("block_hashes: array16 of 65535", hex("92 00 91 92" + removed + "dc ff ff"));
    hostile.put("token_ids: array32 of 2^31-1",
        hex("92 00 91 95" + stored + "91 01 c0 dd 7f ff ff ff"));
    hostile.put("binary hash: bin32 of 2^31-1",
        hex("92 00 91 92" + removed + "91 c6 7f ff ff ff"));
    hostile.put("event tag: str32 of 2^31-1", hex("92 00 91 91 db 7f ff ff ff"));
    hostile.put("event tag: bin32 of 2^31-1", hex("92 00 91 91 c6 7f ff ff ff"));
    hostile.put("map key: str32 of 2^31-1", hex("92 00 91 81 db 7f ff ff ff"));
    hostile.put("event map: map32 of 2^31-1", hex("92 00 91 df 7f ff ff ff"));
    hostile.put("extra_keys first block: array32 of 2^31-1", hex("92 00 91 82" + str("type")
        + stored + str("extra_keys") + "91 dd 7f ff ff ff"));
    hostile.put("medium: str32 of 2^31-1", hex("92 00 91 93" + removed + "90 db 7f ff ff ff"));
    for (Map.Entry<String, byte[]> e : hostile.entrySet()) {
      Throwable[] thrown = new Throwable[1];
      long allocated = allocatedBytes(() -> thrown[0] = catchThrowable(
          () -> KvEventDecoder.decode(e.getValue())));
      assertThat(thrown[0]).as(e.getKey()).isInstanceOf(MalformedKvEventException.class);
      assertThat(allocated).as("bytes allocated decoding %s", e.getKey())
          .isLessThan(64 * 1024);
    }
  }

  @Test
  void payloadsAboveTheCapAreMalformedBeforeAnyDecoding() throws Exception {
    byte[] valid = new VllmEventEncoder(VllmEventEncoder.Shape.TAGGED_ARRAY, false)
        .encode(randomBatch(new Random(3)));
    byte[] huge = java.util.Arrays.copyOf(valid, KvEventDecoder.MAX_PAYLOAD_BYTES + 1);
    assertThatThrownBy(() -> KvEventDecoder.decode(huge))
        .isInstanceOf(MalformedKvEventException.class)
        .hasMessageContaining(String.valueOf(KvEventDecoder.MAX_PAYLOAD_BYTES));
    assertThat(KvEventDecoder.decode(valid).events()).isNotNull();
  }

  @Test
  void binaryDigestsFoldDeterministically() {
    byte[] d = new byte[32];
    for (int i = 0; i < 32; i++) {
      d[i] = (byte) i;
    }
    long a = KvEventDecoder.foldDigest(d);
    assertThat(KvEventDecoder.foldDigest(d.clone())).isEqualTo(a);
    d[31] ^= 1;
    assertThat(KvEventDecoder.foldDigest(d)).isEqualTo(a ^ 1);
  }
}
