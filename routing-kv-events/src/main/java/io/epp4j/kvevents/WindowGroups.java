package io.epp4j.kvevents;

import java.util.Arrays;

/**
 * The sliding-window KV-cache groups of one endpoint's engine, as its {@code BlockStored} events
 * declare them ({@code kv_cache_spec_kind} {@code sliding_window}, with the window), and which
 * keys each holds on GPU. vLLM serves a prefix hit only where every group can: a sliding-window
 * group needs the blocks of its window before the hit's end, which it evicts long before the
 * full-attention group evicts its copies (it frees them as soon as they leave the window). The
 * index's holder bits say whether any group holds a block; these tables say whether the window
 * groups do. Immutable but for the tables, which are written under the index's write lock and
 * read lock-free; a group added makes a new instance.
 */
final class WindowGroups {
  final int[] groups;
  /** Window in tokens of each group of {@link #groups}. */
  final int[] windows;
  /** Per group of {@link #groups}: key → 1 while the group holds it on GPU. */
  final HolderTable[] held;

  private WindowGroups(int[] groups, int[] windows, HolderTable[] held) {
    this.groups = groups;
    this.windows = windows;
    this.held = held;
  }

  /** The position of {@code group} in {@link #groups}, or -1. */
  int indexOf(int group) {
    for (int i = 0; i < groups.length; i++) {
      if (groups[i] == group) {
        return i;
      }
    }
    return -1;
  }

  /**
   * {@code w} (null for none) with {@code group} declared a window group of {@code window}
   * tokens; a group declared before with another window starts over with an empty table.
   */
  static WindowGroups with(@org.jspecify.annotations.Nullable WindowGroups w, int group,
      int window) {
    if (w == null) {
      return new WindowGroups(new int[] {group}, new int[] {window},
          new HolderTable[] {new HolderTable()});
    }
    int i = w.indexOf(group);
    int[] groups = i < 0 ? Arrays.copyOf(w.groups, w.groups.length + 1) : w.groups.clone();
    int[] windows = i < 0 ? Arrays.copyOf(w.windows, w.windows.length + 1) : w.windows.clone();
    HolderTable[] held = i < 0 ? Arrays.copyOf(w.held, w.held.length + 1) : w.held.clone();
    int at = i < 0 ? groups.length - 1 : i;
    groups[at] = group;
    windows[at] = window;
    held[at] = new HolderTable();
    return new WindowGroups(groups, windows, held);
  }

  /** Whether every window group holds {@code key} on GPU. Lock-free. */
  boolean allHold(long key) {
    for (HolderTable t : held) {
      if ((t.get(key) & 1) == 0) {
        return false;
      }
    }
    return true;
  }
}
