package io.epp4j.kvevents;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.zeromq.SocketType;
import org.zeromq.ZContext;
import org.zeromq.ZMQ;

/**
 * The replay read-ahead holds at most its bound in bytes, weighed as the heap the replies take:
 * their frames and the objects that hold them. A reply whose frames are empty or tiny takes far
 * more heap than its bytes, so a peer answering with a stream of them must not fill the heap.
 */
@Timeout(60)
class ReplayReadAheadTest {
  /** A read-ahead bound of the smallest {@code receiveBufferBytes} allowed, plus 2 MiB. */
  private static final long BOUND = KvEventDecoder.MAX_PAYLOAD_BYTES + (2L << 20);

  /**
   * The least heap a held reply takes besides its frames' bytes on a 64-bit JVM with compressed
   * pointers: its list (24 bytes) and the list's array of four slots (32), and 16 bytes of
   * header for each frame's array.
   */
  static long leastHeap(List<byte[]> reply) {
    long n = 24 + 32;
    for (byte[] f : reply) {
      n += 16 + f.length;
    }
    return n;
  }

  @Test
  void aStreamOfEmptyRepliesStopsAtTheBound() {
    // 400,000 replies that are only an envelope delimiter: before, each counted 0 bytes, and
    // all of them were read ahead as one flowing answer, some 22 MB of lists against a bound
    // of 18 MiB (and any number of them, had the peer gone on sending)
    assertHeldWithinTheBound(400_000, new byte[0][]);
  }

  @Test
  void aStreamOfRepliesWithEmptyPayloadsStopsAtTheBound() {
    // [seq, ""]: before, each counted its 8-byte seq, so the 2 MiB above one largest message
    // held 262,144 of them, 25 MB of heap; at the default bound of 256 MiB, 3 GB
    assertHeldWithinTheBound(300_000, new byte[][] {new byte[8], new byte[0]});
  }

  /**
   * Queues {@code count} replies of {@code frames} (after an envelope delimiter), has the
   * read-ahead take what it takes in one go, and checks the heap of what it holds.
   */
  private static void assertHeldWithinTheBound(int count, byte[][] frames) {
    try (ZContext ctx = new ZContext(1)) {
      ZMQ.Socket in = ctx.createSocket(SocketType.PAIR);
      ZMQ.Socket out = ctx.createSocket(SocketType.PAIR);
      in.setRcvHWM(0);
      out.setSndHWM(0);
      in.bind("inproc://read-ahead");
      out.connect("inproc://read-ahead");
      for (int i = 0; i < count; i++) {
        if (frames.length == 0) {
          out.send(new byte[0]);
        } else {
          out.sendMore(new byte[0]);
          for (int f = 0; f < frames.length; f++) {
            if (f + 1 < frames.length) {
              out.sendMore(frames[f]);
            } else {
              out.send(frames[f]);
            }
          }
        }
      }
      EndpointStream.ReadAhead readAhead = new EndpointStream.ReadAhead(BOUND);
      readAhead.fill(in);
      long heap = 0;
      int held = 0;
      for (List<byte[]> reply; (reply = readAhead.poll()) != null; held++) {
        heap += leastHeap(reply);
      }
      assertThat(held).as("replies read ahead").isPositive();
      assertThat(heap).as("heap of the %d replies read ahead", held).isLessThanOrEqualTo(BOUND);
    }
  }
}
