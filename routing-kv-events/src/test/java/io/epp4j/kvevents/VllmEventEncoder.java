package io.epp4j.kvevents;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.math.BigInteger;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import org.msgpack.core.MessageBufferPacker;
import org.msgpack.core.MessagePack;

/** Test-side encoder that writes batches the way vLLM's msgspec publisher does. */
final class VllmEventEncoder {

  enum Shape { TAGGED_ARRAY, MAP }

  private final Shape shape;
  private final boolean binaryHashes;
  private final Random random;
  private final boolean extraFields;

  VllmEventEncoder(Shape shape, boolean binaryHashes, long seed, boolean extraFields) {
    this.shape = shape;
    this.binaryHashes = binaryHashes;
    this.random = new Random(seed);
    this.extraFields = extraFields;
  }

  VllmEventEncoder(Shape shape, boolean binaryHashes) {
    this(shape, binaryHashes, 1, false);
  }

  byte[] encode(KvEventBatch batch) {
    try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
      p.packArrayHeader(batch.dataParallelRank() >= 0 ? 3 : 2);
      p.packDouble(batch.timestampSeconds());
      p.packArrayHeader(batch.events().size());
      for (KvEvent e : batch.events()) {
        if (shape == Shape.MAP) {
          packMap(p, e);
        } else {
          packArray(p, e);
        }
      }
      if (batch.dataParallelRank() >= 0) {
        p.packInt(batch.dataParallelRank());
      }
      return p.toByteArray();
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** A field value to pack: null packs nil. */
  private interface Value {
    void pack(MessageBufferPacker p) throws IOException;
  }

  private void packArray(MessageBufferPacker p, KvEvent e) throws IOException {
    List<Value> fields = new ArrayList<>();
    int required;
    if (e instanceof KvEvent.BlockStored s) {
      fields.add(x -> x.packString("BlockStored"));
      fields.add(x -> packHashes(x, s.blockHashes()));
      fields.add(x -> packParent(x, s));
      fields.add(x -> packTokens(x, s.tokenIds()));
      fields.add(x -> x.packInt(s.blockSize()));
      required = fields.size();
      fields.add(s.loraId() >= 0 ? x -> x.packInt(s.loraId()) : null);
      fields.add(s.medium() == Medium.CPU ? x -> x.packString("CPU") : null);
      fields.add(s.loraName() != null ? x -> x.packString(s.loraName()) : null);
      fields.add(extraKeys(s));
      if (extraFields) {
        fields.add(x -> x.packInt(0)); // group_idx
        fields.add(x -> x.packString("full_attention"));
      }
    } else if (e instanceof KvEvent.BlockRemoved r) {
      fields.add(x -> x.packString("BlockRemoved"));
      fields.add(x -> packHashes(x, r.blockHashes()));
      required = fields.size();
      fields.add(r.medium() == Medium.CPU ? x -> x.packString("CPU") : null);
      if (extraFields) {
        fields.add(x -> x.packInt(0));
      }
    } else {
      fields.add(x -> x.packString("AllBlocksCleared"));
      required = 1;
    }
    // msgspec omit_defaults drops trailing fields equal to their default; sometimes keep them
    int n = fields.size();
    if (!extraFields || random.nextBoolean()) {
      while (n > required && fields.get(n - 1) == null) {
        n--;
      }
    }
    p.packArrayHeader(n);
    for (int i = 0; i < n; i++) {
      Value v = fields.get(i);
      if (v == null) {
        p.packNil();
      } else {
        v.pack(p);
      }
    }
  }

  private void packMap(MessageBufferPacker p, KvEvent e) throws IOException {
    List<String> keys = new ArrayList<>();
    List<Value> values = new ArrayList<>();
    keys.add("type");
    if (e instanceof KvEvent.BlockStored s) {
      values.add(x -> x.packString("BlockStored"));
      keys.add("block_hashes");
      values.add(x -> packHashes(x, s.blockHashes()));
      keys.add("parent_block_hash");
      values.add(x -> packParent(x, s));
      keys.add("token_ids");
      values.add(x -> packTokens(x, s.tokenIds()));
      keys.add("block_size");
      values.add(x -> x.packInt(s.blockSize()));
      if (s.loraId() >= 0) {
        keys.add("lora_id");
        values.add(x -> x.packInt(s.loraId()));
      }
      if (s.medium() == Medium.CPU || random.nextBoolean()) {
        keys.add("medium");
        values.add(x -> x.packString(s.medium().name()));
      }
      if (s.loraName() != null) {
        keys.add("lora_name");
        values.add(x -> x.packString(s.loraName()));
      }
      Value extra = extraKeys(s);
      if (extra != null) {
        keys.add("extra_keys");
        values.add(extra);
      }
    } else if (e instanceof KvEvent.BlockRemoved r) {
      values.add(x -> x.packString("BlockRemoved"));
      keys.add("block_hashes");
      values.add(x -> packHashes(x, r.blockHashes()));
      keys.add("medium");
      values.add(x -> x.packString(r.medium().name()));
    } else {
      values.add(x -> x.packString("AllBlocksCleared"));
    }
    if (extraFields) {
      keys.add("group_idx");
      values.add(x -> x.packInt(0));
      keys.add("kv_cache_spec_kind");
      values.add(x -> x.packString("full_attention"));
    }
    // map order is not significant
    if (extraFields) {
      for (int i = keys.size() - 1; i > 0; i--) {
        int j = random.nextInt(i + 1);
        String k = keys.get(i);
        keys.set(i, keys.get(j));
        keys.set(j, k);
        Value v = values.get(i);
        values.set(i, values.get(j));
        values.set(j, v);
      }
    }
    p.packMapHeader(keys.size());
    for (int i = 0; i < keys.size(); i++) {
      p.packString(keys.get(i));
      values.get(i).pack(p);
    }
  }

  private Value extraKeys(KvEvent.BlockStored s) {
    if (s.cacheSalt() == null && s.loraName() == null) {
      return null;
    }
    return x -> {
      int blocks = s.blockHashes().length;
      x.packArrayHeader(blocks);
      for (int i = 0; i < blocks; i++) {
        List<String> keys = new ArrayList<>();
        if (s.loraName() != null) {
          keys.add(s.loraName());
        }
        if (i == 0 && s.cacheSalt() != null) {
          keys.add(s.cacheSalt());
        }
        if (keys.isEmpty()) {
          x.packNil();
        } else {
          x.packArrayHeader(keys.size());
          for (String k : keys) {
            x.packString(k);
          }
        }
      }
    };
  }

  private void packParent(MessageBufferPacker p, KvEvent.BlockStored s) throws IOException {
    if (s.hasParent()) {
      packHash(p, s.parentHash());
    } else {
      p.packNil();
    }
  }

  private void packHashes(MessageBufferPacker p, long[] hashes) throws IOException {
    p.packArrayHeader(hashes.length);
    for (long h : hashes) {
      packHash(p, h);
    }
  }

  private void packHash(MessageBufferPacker p, long h) throws IOException {
    if (binaryHashes) {
      byte[] b = digestFolding(h);
      p.packBinaryHeader(b.length);
      p.writePayload(b);
    } else if (h < 0) {
      p.packBigInteger(new BigInteger(Long.toUnsignedString(h))); // uint64 as vLLM sends it
    } else {
      p.packLong(h);
    }
  }

  /** 32 bytes whose XOR-fold is {@code h}, random otherwise. */
  private byte[] digestFolding(long h) {
    long w1 = random.nextLong();
    long w2 = random.nextLong();
    long w3 = random.nextLong();
    long w0 = h ^ w1 ^ w2 ^ w3;
    byte[] b = new byte[32];
    long[] w = {w0, w1, w2, w3};
    for (int i = 0; i < 4; i++) {
      for (int j = 0; j < 8; j++) {
        b[i * 8 + j] = (byte) (w[i] >>> (56 - 8 * j));
      }
    }
    return b;
  }

  private static void packTokens(MessageBufferPacker p, int[] tokens) throws IOException {
    p.packArrayHeader(tokens.length);
    for (int t : tokens) {
      p.packInt(t);
    }
  }
}
