package io.epp4j.core;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;
import org.jspecify.annotations.Nullable;

/**
 * Strict UTF-8 validation (RFC 3629) of request bodies and config files. Jackson decodes only
 * the strings it reads and accepts overlong forms, surrogates and code points above U+10FFFF;
 * checking every byte up front makes a body valid or invalid as a whole, whichever fields the
 * parser skips. ASCII, nearly all of a typical body, is checked eight bytes at a time.
 */
final class Utf8Validator {
  private static final VarHandle LONGS =
      MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.LITTLE_ENDIAN);
  private static final long HIGH_BITS = 0x8080808080808080L;

  private Utf8Validator() {}

  /** Offset of the first byte that does not start a well-formed sequence, or -1. */
  static int firstInvalid(byte[] b) {
    int n = b.length;
    int i = 0;
    while (i < n) {
      if (b[i] >= 0) {
        // ASCII runs, 32 then 8 bytes per step: for ASCII text this is all of the check's cost;
        // text in other scripts goes from sequence to sequence without coming back here
        while (i <= n - 32 && (((long) LONGS.get(b, i) | (long) LONGS.get(b, i + 8)
            | (long) LONGS.get(b, i + 16) | (long) LONGS.get(b, i + 24)) & HIGH_BITS) == 0) {
          i += 32;
        }
        while (i <= n - 8 && ((long) LONGS.get(b, i) & HIGH_BITS) == 0) {
          i += 8;
        }
        if (i == n) {
          break;
        }
        if (b[i] >= 0) {
          i++;
          continue;
        }
      }
      int lead = b[i] & 0xFF;
      // the ranges of RFC 3629, section 4; problem() says which rule a failing sequence broke
      if (lead >= 0xC2 && lead <= 0xDF) {
        if (i + 1 < n && (b[i + 1] & 0xC0) == 0x80) {
          i += 2;
          continue;
        }
        return i;
      }
      if (lead >= 0xE0 && lead <= 0xEF) {
        if (i + 2 < n && (b[i + 2] & 0xC0) == 0x80) {
          int second = b[i + 1] & 0xFF;
          int lo = lead == 0xE0 ? 0xA0 : 0x80;
          int hi = lead == 0xED ? 0x9F : 0xBF;
          if (second >= lo && second <= hi) {
            i += 3;
            continue;
          }
        }
        return i;
      }
      if (lead >= 0xF0 && lead <= 0xF4) {
        if (i + 3 < n && (b[i + 2] & 0xC0) == 0x80 && (b[i + 3] & 0xC0) == 0x80) {
          int second = b[i + 1] & 0xFF;
          int lo = lead == 0xF0 ? 0x90 : 0x80;
          int hi = lead == 0xF4 ? 0x8F : 0xBF;
          if (second >= lo && second <= hi) {
            i += 4;
            continue;
          }
        }
        return i;
      }
      return i;
    }
    return -1;
  }

  /**
   * Why the sequence at {@code i} is ill-formed, or null when it is well-formed. The second byte
   * decides the overlong, surrogate and above-U+10FFFF cases of three- and four-byte sequences
   * (the table in RFC 3629, section 4).
   */
  static @Nullable String problem(byte[] b, int i) {
    int lead = b[i] & 0xFF;
    if (lead < 0x80) {
      return null;
    }
    if (lead < 0xC0) {
      return "unexpected continuation byte";
    }
    if (lead < 0xC2) {
      return "overlong encoding";
    }
    if (lead > 0xF7) {
      return "invalid byte";
    }
    if (lead > 0xF4) {
      return "code point above U+10FFFF";
    }
    int len = lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
    if (i + len > b.length) {
      return "truncated sequence";
    }
    for (int k = 1; k < len; k++) {
      if ((b[i + k] & 0xC0) != 0x80) {
        return "truncated sequence";
      }
    }
    int second = b[i + 1] & 0xFF;
    if ((lead == 0xE0 && second < 0xA0) || (lead == 0xF0 && second < 0x90)) {
      return "overlong encoding";
    }
    if (lead == 0xED && second >= 0xA0) {
      return "surrogate code point";
    }
    if (lead == 0xF4 && second >= 0x90) {
      return "code point above U+10FFFF";
    }
    return null;
  }

  /** {@code line L, column C (byte offset B)}; lines and columns count from 1, columns in bytes. */
  static String position(byte[] b, int offset) {
    int line = 1;
    int lineStart = 0;
    for (int i = 0; i < offset && i < b.length; i++) {
      if (b[i] == '\n') {
        line++;
        lineStart = i + 1;
      }
    }
    return position(line, offset - lineStart + 1, offset);
  }

  static String position(long line, long column, long offset) {
    return "line " + line + ", column " + column + " (byte offset " + offset + ")";
  }
}
