package io.epp4j.scorers;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import org.jspecify.annotations.Nullable;

/**
 * The blocks one endpoint is believed to hold: a set of chained block hashes with exact LRU order
 * at block granularity. Because every hash covers its whole prefix, this set is the endpoint's
 * slice of the prefix trie (a node is present iff the endpoint holds that prefix).
 *
 * <p>Storage is primitive and flat: per entry two adjacent {@code long}s, the key and its two
 * {@code int} LRU links packed together, and 2–4 {@code int} slots of an open-addressing table
 * (linear probing, backward-shift deletion), so 24–32 bytes per (block, endpoint) entry and no
 * object per entry. Key and links share a cache line, so following a chain costs one cache miss
 * per block on an index that has gone cold between requests, instead of one per array. Arrays
 * grow by doubling up to the capacity; at capacity an insert reuses the evicted entry's storage.
 *
 * <p>The set is prefix-closed, and every block is less recent than the block before it in its
 * chain: a record or touch places a chain's blocks head first at the MRU end, so whatever follows
 * a block is older than it, and eviction takes the least recent block, which therefore has no
 * successor held. So once a chain's block is missing every later block of that chain is missing
 * too, and a record inserts them without looking them up (the table probe of a key that is not
 * there reads, a third of the time, another entry's key, one more cache miss per block).
 *
 * <p>A chain holds no key twice: a chained hash differs from every earlier block of its chain
 * except by a 64-bit collision. Input that breaks this (a hint from a peer, say) cannot break
 * the list: a touch or record ends where it finds a block it has just placed, and a repeat
 * among blocks inserted without lookup is stored twice, both copies ageing out like any entry.
 * Moving a run behind an entry of that same run would otherwise cut the run out of the list.
 *
 * <p>Thread-safety: every operation that reads or changes the entries holds this object's
 * monitor. Critical sections are O(blocks of one request) and one lock covers only one endpoint.
 * A lookup on an endpoint that does not hold the chain's first block takes no lock at all: a
 * small counting filter of the first blocks held ({@code heads}, written under the monitor, read
 * without it) answers "certainly not here" for most of a large pool, so concurrent requests meet
 * only on the endpoints that hold their prefix. A count is exact until it saturates (then it stays
 * positive for good, which only costs a locked lookup), so a zero count never hides a held chain.
 */
final class EndpointBlocks {
  private static final VarHandle COUNT = MethodHandles.arrayElementVarHandle(byte[].class);
  private static final int MIN_HEAD_COUNTERS = 1024;
  private static final int MAX_HEAD_COUNTERS = 1 << 16;

  private static final int NIL = -1;
  private static final int INITIAL = 256;

  private static final long LOW = 0xFFFF_FFFFL;
  /**
   * A table slot holds {@code e + 1} in its low {@value #INDEX_BITS} bits and, above them, how
   * far the slot is from the key's home slot ({@link #FAR} for that distance or more). A probe
   * compares the distance before it reads a key: an entry at another distance has another home
   * and cannot be the key, so the probe reads no key but the one it finds, and deletion shifts
   * entries back without reading theirs. Each key read is a cache miss on a large store.
   */
  private static final int INDEX_BITS = 24;
  private static final int INDEX_MASK = (1 << INDEX_BITS) - 1;
  private static final int FAR = 0xFF;
  /** Largest number of entries: {@code e + 1} must fit the table slot's index bits. */
  static final int MAX_ENTRIES = INDEX_MASK;

  // entry e: slots[2e] = key, slots[2e + 1] = prev << 32 | next (each an entry index or NIL)
  private long[] slots = new long[0];
  private int[] table = new int[0]; // entry index + 1; 0 = empty
  private int mask = -1;
  private int head = NIL; // most recently used
  private int tail = NIL; // least recently used
  private int size;
  private int used; // entries ever handed out from the arrays (high-water mark)
  private int free = NIL; // free list threaded through the next links
  private volatile int capacity;
  private long evictions;
  // counts per filter slot of the held entries that were a chain's first block; see class doc
  private final byte[] heads;
  private final int headMask;
  private long[] headFlags = new long[0]; // bit per entry: counted in heads
  // the pool-wide directory this store also counts its first blocks in, and its column there
  private @Nullable HeadDirectory directory;
  private int directoryPosition;

  EndpointBlocks(int capacity) {
    this.capacity = Math.min(MAX_ENTRIES, Math.max(1, capacity));
    int counters = Integer.highestOneBit(
        Math.max(MIN_HEAD_COUNTERS, Math.min(MAX_HEAD_COUNTERS, this.capacity / 8)) * 2 - 1);
    this.heads = new byte[counters];
    this.headMask = counters - 1;
  }

  private int headSlot(long key) {
    return (int) (key >>> 40) & headMask; // other bits than the table's home slot
  }

  /**
   * Whether the endpoint may hold a chain that starts with {@code first}; {@code false} means it
   * certainly does not. Lock-free.
   */
  boolean mayHoldFirst(long first) {
    return (byte) COUNT.getAcquire(heads, headSlot(first)) != 0;
  }


  /** Counts entry {@code e} as a first block, once. Under the monitor. */
  private void markHead(int e) {
    int w = e >>> 6;
    long bit = 1L << e;
    if ((headFlags[w] & bit) != 0) {
      return;
    }
    headFlags[w] |= bit;
    long key = key(e);
    int slot = headSlot(key);
    int c = heads[slot] & 0xFF;
    if (c < 0xFF) {
      COUNT.setRelease(heads, slot, (byte) (c + 1));
    }
    HeadDirectory d = directory;
    if (d != null) {
      d.increment(key, directoryPosition);
    }
  }

  /** Forgets entry {@code e} as a first block when it leaves. Under the monitor. */
  private void unmarkHead(int e) {
    int w = e >>> 6;
    long bit = 1L << e;
    if ((headFlags[w] & bit) == 0) {
      return;
    }
    headFlags[w] &= ~bit;
    long key = key(e);
    int slot = headSlot(key);
    int c = heads[slot] & 0xFF;
    if (c < 0xFF) { // a saturated count no longer knows its size; it stays
      COUNT.setRelease(heads, slot, (byte) (c - 1));
    }
    HeadDirectory d = directory;
    if (d != null) {
      d.decrement(key, directoryPosition);
    }
  }

  /**
   * From now on counts this store's first blocks in column {@code position} of {@code d} too,
   * starting with the ones it holds, and no longer in the directory it counted in before.
   */
  synchronized void attach(HeadDirectory d, int position) {
    directory = d;
    directoryPosition = position;
    long[] flags = headFlags;
    for (int w = 0; w < flags.length; w++) {
      long f = flags[w];
      while (f != 0) {
        int e = (w << 6) + Long.numberOfTrailingZeros(f);
        d.increment(key(e), position);
        f &= f - 1;
      }
    }
  }

  /** Stops counting in {@code d}, unless this store has been attached elsewhere since. */
  synchronized void detach(HeadDirectory d) {
    if (directory == d) {
      directory = null;
    }
  }

  /** The capacity in blocks (readable without the lock). */
  int capacity() {
    return capacity;
  }

  synchronized int size() {
    return size;
  }

  synchronized long evictions() {
    return evictions;
  }

  /** Changes the capacity; shrinking evicts from the LRU end at once. */
  synchronized void setCapacity(int newCapacity) {
    int c = Math.min(MAX_ENTRIES, Math.max(1, newCapacity));
    if (c == capacity) {
      return;
    }
    capacity = c;
    while (size > capacity) {
      evictTail();
    }
    if (entries() > 2 * INITIAL && entries() > 2L * capacity) {
      rebuild(Math.max(INITIAL, capacity));
    }
  }

  synchronized boolean contains(long key) {
    return find(key) >= 0;
  }

  /** Counts how many of {@code hashes[0..n)} this endpoint holds consecutively from the first. */
  int match(long[] hashes, int n) {
    return n > 0 && mayHoldFirst(hashes[0]) ? matchLocked(hashes, n) : 0;
  }

  private synchronized int matchLocked(long[] hashes, int n) {
    int m = 0;
    int hint = NIL;
    while (m < n) {
      int e = find(hashes[m], hint);
      if (e < 0) {
        break;
      }
      hint = next(e);
      m++;
    }
    return m;
  }

  /**
   * Counts how many of {@code hashes[0..n)} this endpoint holds consecutively from the first,
   * and marks those as most recently used, the first one most recent (so that the tail of the
   * chain stays the first to go, as in vLLM).
   */
  int matchAndTouch(long[] hashes, int n) {
    return n > 0 && mayHoldFirst(hashes[0]) ? matchAndTouchLocked(hashes, n) : 0;
  }

  private synchronized int matchAndTouchLocked(long[] hashes, int n) {
    // The matched blocks are moved in runs: blocks that follow one another in the LRU list as
    // they follow one another in the chain are spliced together once the run ends, so a chain
    // stored in one piece costs one move however long it is, where moving block by block wrote
    // the links of three entries per block. The resulting order is the same.
    int last = NIL; // the last block placed, which the next run goes behind
    int first = NIL; // the run not placed yet: first .. end, linked in LRU order
    int end = NIL;
    int m = 0;
    while (m < n) {
      long key = hashes[m];
      int hint = end == NIL ? NIL : next(end);
      if (hint != NIL && hint != last && key(hint) == key) {
        end = hint; // the run goes on
      } else {
        int e = find(key);
        if (e < 0) {
          break;
        }
        if (first != NIL) {
          moveRun(first, end, last);
          last = end;
          first = NIL;
        }
        if (e == last) {
          break; // the chain repeats a key (class doc)
        }
        first = e;
        end = e;
      }
      m++;
    }
    if (first != NIL) {
      moveRun(first, end, last);
    }
    return m;
  }

  /**
   * Moves the entries {@code first .. end} (linked in that order) to the MRU end
   * ({@code after == NIL}) or right behind {@code after}, which is not one of them.
   */
  private void moveRun(int first, int end, int after) {
    if (after == NIL ? head == first : next(after) == first) {
      return; // in place already
    }
    detach(first, end);
    attach(first, end, after);
  }

  /** Takes the entries {@code first .. end} (linked in that order) out of the LRU list. */
  private void detach(int first, int end) {
    int p = prev(first);
    int q = next(end);
    if (p == NIL) {
      head = q;
    } else {
      setNext(p, q);
    }
    if (q == NIL) {
      tail = p;
    } else {
      setPrev(q, p);
    }
  }

  /**
   * Links the entries {@code first .. end} (linked in that order, not in the list) in at the
   * MRU end ({@code after == NIL}) or right behind {@code after}.
   */
  private void attach(int first, int end, int after) {
    int n = after == NIL ? head : next(after);
    if (after == NIL) {
      head = first;
    } else {
      setNext(after, first);
    }
    setPrev(first, after);
    setNext(end, n);
    if (n == NIL) {
      tail = end;
    } else {
      setPrev(n, end);
    }
  }


  /**
   * Records that the endpoint now holds {@code hashes[0..n)}: inserts the missing ones and
   * orders the chain head-first at the MRU end. When the chain alone exceeds the capacity only
   * its first {@code capacity} blocks are kept, which is what inserting tail-first would leave.
   */
  synchronized void record(long[] hashes, int n) {
    int limit = Math.min(n, capacity);
    int last = NIL;
    boolean absent = false; // a block was missing, so the rest are (prefix-closed, class doc)
    // present blocks move in runs, as in matchAndTouchLocked: first .. end is not placed yet
    int first = NIL;
    int end = NIL;
    for (int i = 0; i < limit; i++) {
      long key = hashes[i];
      int hint = end == NIL ? NIL : next(end);
      if (hint != NIL && hint != last && key(hint) == key) {
        end = hint;
        continue;
      }
      int e = absent ? -1 : find(key);
      if (first != NIL) {
        moveRun(first, end, last);
        last = end;
        first = NIL;
        end = NIL;
      }
      if (e >= 0 && e == last) {
        break; // the chain repeats a key (class doc)
      }
      if (e < 0) {
        absent = true;
        // The chain placed so far occupies the i most recent positions and i < capacity, so
        // the entry evicted here is never part of it.
        if (size >= capacity) {
          evictTail();
        }
        e = allocate();
        slots[e << 1] = key;
        insertIntoTable(e);
        size++;
        setLinks(e, NIL, NIL);
        linkAfter(e, last);
        last = e;
      } else {
        first = e;
        end = e;
      }
      if (i == 0) {
        markHead(e);
      }
    }
    if (first != NIL) {
      moveRun(first, end, last);
    }
  }

  /**
   * Completes a {@link #record} after {@link #matchAndTouch} of the same chain returned
   * {@code matched}: blocks {@code [0, matched)} are already present and ordered head first, so
   * only the rest is placed behind block {@code matched - 1}. The result is what
   * {@code record(hashes, n)} gives when nothing touched this endpoint in between; if the chain
   * changed meanwhile (its anchor or last block was evicted, or eviction would reach the anchor),
   * this falls back to a full {@code record}. Saves the lookups of the matched blocks, which are
   * most of a record in steady state.
   */
  synchronized void recordAfterMatch(long[] hashes, int n, int matched) {
    int limit = Math.min(n, capacity);
    if (matched <= 0) {
      record(hashes, n);
      return;
    }
    if (matched >= limit) {
      if (find(hashes[limit - 1]) < 0) {
        record(hashes, n); // evicted since the lookup
      }
      return;
    }
    int last = find(hashes[matched - 1]);
    if (last < 0) {
      record(hashes, n);
      return;
    }
    int hint = next(last);
    boolean absent = false; // a block was missing, so the rest are (prefix-closed, class doc)
    for (int i = matched; i < limit; i++) {
      long key = hashes[i];
      int e = absent ? -1 : find(key, hint);
      if (e < 0) {
        hint = NIL;
        absent = true;
        if (size >= capacity) {
          if (tail == last) {
            record(hashes, n); // the anchor itself would be evicted
            return;
          }
          evictTail();
        }
        e = allocate();
        slots[e << 1] = key;
        insertIntoTable(e);
        size++;
        setLinks(e, NIL, NIL);
        linkAfter(e, last);
      } else {
        if (e == last) {
          return; // the chain repeats a key (class doc)
        }
        hint = next(e);
        place(e, last);
      }
      last = e;
    }
  }

  /** Moves {@code e} to the MRU end ({@code after == NIL}) or right behind {@code after}. */
  private void place(int e, int after) {
    if (after == NIL) {
      if (head != e) {
        unlink(e);
        linkAfter(e, NIL);
      }
    } else if (next(after) != e) {
      unlink(e);
      linkAfter(e, after);
    }
  }

  private long key(int e) {
    return slots[e << 1];
  }

  private int next(int e) {
    return (int) slots[(e << 1) + 1];
  }

  private int prev(int e) {
    return (int) (slots[(e << 1) + 1] >>> 32);
  }

  private void setLinks(int e, int p, int n) {
    slots[(e << 1) + 1] = ((long) p << 32) | (n & LOW);
  }

  private void setNext(int e, int n) {
    int i = (e << 1) + 1;
    slots[i] = (slots[i] & ~LOW) | (n & LOW);
  }

  private void setPrev(int e, int p) {
    int i = (e << 1) + 1;
    slots[i] = ((long) p << 32) | (slots[i] & LOW);
  }

  private void unlink(int e) {
    detach(e, e);
    setLinks(e, NIL, NIL);
  }

  private void linkAfter(int e, int after) {
    attach(e, e, after);
  }


  private void evictTail() {
    int e = tail;
    if (e == NIL) {
      return;
    }
    unlink(e);
    removeFromTable(e);
    unmarkHead(e);
    size--;
    evictions++;
    setLinks(e, NIL, free);
    free = e;
  }

  private int allocate() {
    if (free != NIL) {
      int e = free;
      free = next(e);
      return e;
    }
    if (used == entries()) {
      int grown = (int) Math.min(Math.min(capacity, MAX_ENTRIES),
          Math.max(INITIAL, 2L * entries()));
      grow(Math.max(grown, used + 1));
    }
    return used++;
  }

  /** Enlarges the arrays keeping every entry's index (callers may hold indices). */
  private void grow(int length) {
    slots = java.util.Arrays.copyOf(slots, 2 * length);
    headFlags = java.util.Arrays.copyOf(headFlags, (length + 63) >>> 6);
    newTable(length);
    for (int e = head; e != NIL; e = next(e)) {
      insertIntoTable(e);
    }
  }

  /** Entries the arrays can hold now. */
  private int entries() {
    return slots.length >> 1;
  }

  private void newTable(int entries) {
    int tableSize = Integer.highestOneBit(Math.max(4, entries * 2 - 1)) << 1;
    table = new int[tableSize];
    mask = tableSize - 1;
  }

  /** Reallocates arrays for {@code length} entries, compacting live entries (renumbers them). */
  private void rebuild(int length) {
    long[] old = slots;
    long[] oldFlags = headFlags;
    int oldHead = head;
    slots = new long[2 * length];
    headFlags = new long[(length + 63) >>> 6];
    newTable(length);
    head = NIL;
    tail = NIL;
    free = NIL;
    int n = 0;
    int last = NIL;
    for (int e = oldHead; e != NIL && n < length; e = (int) old[(e << 1) + 1]) {
      slots[n << 1] = old[e << 1];
      if ((oldFlags[e >>> 6] & (1L << e)) != 0) {
        headFlags[n >>> 6] |= 1L << n; // still counted in heads
      }
      insertIntoTable(n);
      linkAfter(n, last);
      last = n;
      n++;
    }
    used = n;
    size = n;
  }

  private static int home(long key) {
    // keys are XXH3 outputs, already well mixed
    return (int) (key ^ (key >>> 32));
  }

  /**
   * {@link #find(long)}, trying {@code hint} first. Chains are stored head first, so the entry
   * after a block in LRU order is usually the chain's next block: one comparison instead of a
   * probe of the table. {@code hint} must be {@link #NIL} or a live entry.
   */
  private int find(long key, int hint) {
    return hint != NIL && slots[hint << 1] == key ? hint : find(key);
  }

  private int find(long key) {
    int[] t = table;
    if (t.length == 0) {
      return -1;
    }
    int m = mask;
    int slot = home(key) & m;
    int v;
    for (int d = 0; (v = t[slot]) != 0; d++) {
      if (v >>> INDEX_BITS == Math.min(d, FAR)) {
        int e = (v & INDEX_MASK) - 1;
        if (slots[e << 1] == key) {
          return e;
        }
      }
      slot = (slot + 1) & m;
    }
    return -1;
  }

  private void insertIntoTable(int e) {
    int slot = home(key(e)) & mask;
    int d = 0;
    while (table[slot] != 0) {
      slot = (slot + 1) & mask;
      d++;
    }
    table[slot] = tableValue(e, d);
  }

  private static int tableValue(int e, int distance) {
    return Math.min(distance, FAR) << INDEX_BITS | (e + 1);
  }

  private void removeFromTable(int e) {
    int m = mask;
    int slot = home(key(e)) & m;
    while ((table[slot] & INDEX_MASK) != e + 1) {
      slot = (slot + 1) & m;
    }
    table[slot] = 0;
    // backward-shift deletion keeps probe chains intact without tombstones
    int j = slot;
    while (true) {
      j = (j + 1) & m;
      int v = table[j];
      if (v == 0) {
        return;
      }
      int d = v >>> INDEX_BITS;
      int idx = v & INDEX_MASK;
      if (d == FAR) {
        d = (j - (home(key(idx - 1)) & m)) & m;
      }
      int gap = (j - slot) & m;
      if (d >= gap) {
        table[slot] = tableValue(idx - 1, d - gap);
        table[j] = 0;
        slot = j;
      }
    }
  }

  /**
   * Checks the list and the table against each other and throws {@link IllegalStateException}
   * naming the first inconsistency; for tests.
   */
  synchronized void checkIntegrity() {
    int n = 0;
    int prev = NIL;
    for (int e = head; e != NIL; e = next(e)) {
      if (++n > size || prev(e) != prev) {
        throw new IllegalStateException("list broken at entry " + e + " (position " + n + ")");
      }
      if (find(key(e)) < 0) {
        throw new IllegalStateException("entry " + e + " is in the list but not in the table");
      }
      prev = e;
    }
    if (n != size || prev != tail || size > capacity) {
      throw new IllegalStateException("list of " + n + " entries ending at " + prev + ", size "
          + size + ", tail " + tail + ", capacity " + capacity);
    }
    int inTable = 0;
    for (int v : table) {
      inTable += v != 0 ? 1 : 0;
    }
    if (inTable != size) {
      throw new IllegalStateException(inTable + " table slots for " + size + " entries");
    }
  }

  /** Whether an entry sits {@link #FAR} or more slots from its home; for tests. */
  synchronized boolean holdsAFarEntry() {
    for (int v : table) {
      if (v >>> INDEX_BITS == FAR) {
        return true;
      }
    }
    return false;
  }

  /** The keys from most to least recently used; for tests. */
  synchronized long[] keysMostRecentFirst() {
    long[] out = new long[size];
    int i = 0;
    for (int e = head; e != NIL; e = next(e)) {
      out[i++] = key(e);
    }
    return out;
  }

  /** Approximate heap bytes of the arrays, for tests and diagnostics. */
  synchronized long footprintBytes() {
    return 8L * slots.length + 4L * table.length + heads.length + 8L * headFlags.length;
  }
}
