package io.epp4j.api;

/** Array-backed {@link PrefixHits}, built by {@link PrefixHits#of} and by combining two. */
final class PrefixHitsValue implements PrefixHits {
  private final String[] ids;
  private final int[] totals;
  private final double[] cached;
  private final int[] blockSizes;

  PrefixHitsValue(String[] ids, int[] totals, double[] cached, int[] blockSizes) {
    this.ids = ids;
    this.totals = totals;
    this.cached = cached;
    this.blockSizes = blockSizes;
  }

  /**
   * Every endpoint of {@code first}, then those of {@code second} that {@code first} does not
   * describe. {@code first} itself when {@code second} adds none: a second prefix-aware plugin
   * over the same or fewer candidates (an affinity filter's match, then the scorer's over what
   * the filter kept) allocates nothing.
   */
  static PrefixHits combine(PrefixHits first, PrefixHits second) {
    int m = second.size();
    int extra = 0;
    for (int i = 0; i < m; i++) {
      if (first.indexOf(second.endpointId(i)) < 0) {
        extra++;
      }
    }
    if (extra == 0) {
      return first;
    }
    int a = first.size();
    int n = a + extra;
    String[] ids = new String[n];
    int[] totals = new int[n];
    double[] cached = new double[n];
    int[] sizes = new int[n];
    for (int i = 0; i < a; i++) {
      ids[i] = first.endpointId(i);
      totals[i] = first.totalBlocks(i);
      cached[i] = first.cachedBlocks(i);
      sizes[i] = first.blockSizeTokens(i);
    }
    int k = a;
    for (int i = 0; i < m && k < n; i++) {
      String id = second.endpointId(i);
      if (first.indexOf(id) >= 0) {
        continue;
      }
      ids[k] = id;
      totals[k] = second.totalBlocks(i);
      cached[k] = second.cachedBlocks(i);
      sizes[k] = second.blockSizeTokens(i);
      k++;
    }
    return new PrefixHitsValue(ids, totals, cached, sizes);
  }

  @Override
  public int size() {
    return ids.length;
  }

  @Override
  public String endpointId(int i) {
    return ids[i];
  }

  @Override
  public int totalBlocks(int i) {
    return totals[i];
  }

  @Override
  public double cachedBlocks(int i) {
    return cached[i];
  }

  @Override
  public int blockSizeTokens(int i) {
    return blockSizes[i];
  }

  @Override
  public String toString() {
    StringBuilder sb = new StringBuilder("PrefixHits{");
    for (int i = 0; i < ids.length; i++) {
      sb.append(i == 0 ? "" : ", ").append(ids[i]).append('=').append(cached[i]).append('/')
          .append(totals[i]).append('x').append(blockSizes[i]);
    }
    return sb.append('}').toString();
  }
}
