package io.epp4j.jmh;

/**
 * The JVM options of every benchmark fork: a fixed heap, touched in full before the benchmark
 * starts, on transparent huge pages.
 *
 * <p>Why: a short benchmark run otherwise keeps allocating into heap pages the process has never
 * touched, and each first touch is a page fault the kernel answers by zeroing a page. On a
 * virtual machine where a fault is expensive this dominated the 100 KB route (83–89 µs against
 * 25–32 µs pre-touched, same build, runs alternating; see {@code docs/benchmarks.md}). A
 * gateway that has run for a while has touched its heap already, so the pre-touched figure is
 * the one that describes it. Huge pages make the pre-touch itself faster (1.0–2.8 s instead of
 * 4.0–4.9 s for 2 GB on that machine); they did not change the steady-state figure measurably.
 */
final class BenchmarkJvm {
  /** Initial heap, equal to the maximum so that the heap never grows into untouched memory. */
  static final String HEAP_MIN = "-Xms2g";
  /** Maximum heap. */
  static final String HEAP_MAX = "-Xmx2g";
  /** The same for {@link PolicyRouteBenchmark}, whose indexes hold up to 64 × 40,000 blocks. */
  static final String LARGE_HEAP_MIN = "-Xms4g";
  /** Maximum heap of {@link PolicyRouteBenchmark}. */
  static final String LARGE_HEAP_MAX = "-Xmx4g";
  /** Touches every heap page at start-up. */
  static final String PRE_TOUCH = "-XX:+AlwaysPreTouch";
  /** Asks for transparent huge pages (the JVM warns and goes on where the kernel has none). */
  static final String HUGE_PAGES = "-XX:+UseTransparentHugePages";

  private BenchmarkJvm() {}
}
