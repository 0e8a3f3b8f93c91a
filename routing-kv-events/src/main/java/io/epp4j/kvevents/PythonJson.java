package io.epp4j.kvevents;

import java.lang.reflect.Array;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.jspecify.annotations.Nullable;

/**
 * Python's {@code json.dumps(x, ensure_ascii=False)} layout ({@code ", "} and {@code ": "}
 * between items, non-ASCII kept; {@code indent}, {@code separators}, {@code sort_keys} and
 * {@code ensure_ascii} on request), which chat templates print tool schemas with. The bytes
 * matter: they become tokens and so block keys.
 */
final class PythonJson {
  private PythonJson() {}

  static String dumps(@Nullable Object value, @Nullable Integer indent, boolean sortKeys) {
    return dumps(value, indent == null ? null : " ".repeat(Math.max(0, indent)), null, null,
        sortKeys, false);
  }

  /**
   * {@code json.dumps} with its layout arguments.
   *
   * @param indent        the text of one level of indentation ({@code indent=2} is two
   *                      spaces), or {@code null} for everything on one line
   * @param itemSeparator {@code separators[0]}; {@code null} for Python's default, which is
   *                      {@code ", "} without indent and {@code ","} with one
   * @param keySeparator  {@code separators[1]}; {@code null} for {@code ": "}
   */
  static String dumps(@Nullable Object value, @Nullable String indent,
      @Nullable String itemSeparator, @Nullable String keySeparator, boolean sortKeys,
      boolean ensureAscii) {
    Layout layout = new Layout(indent,
        itemSeparator != null ? itemSeparator : indent == null ? ", " : ",",
        keySeparator != null ? keySeparator : ": ", sortKeys, ensureAscii);
    StringBuilder sb = new StringBuilder();
    write(sb, value, layout, 0);
    return sb.toString();
  }

  private record Layout(@Nullable String indent, String itemSeparator, String keySeparator,
      boolean sortKeys, boolean ensureAscii) {}

  private static void write(StringBuilder sb, @Nullable Object v, Layout layout, int depth) {
    if (v == null) {
      sb.append("null");
    } else if (v instanceof CharSequence || v instanceof Character) {
      string(sb, v.toString(), layout.ensureAscii());
    } else if (v instanceof Boolean b) {
      sb.append(b ? "true" : "false");
    } else if (v instanceof Double || v instanceof Float) {
      sb.append(pythonFloat(((Number) v).doubleValue()));
    } else if (v instanceof BigDecimal d) {
      sb.append(pythonFloat(d.doubleValue()));
    } else if (v instanceof Number n) {
      sb.append(n instanceof BigInteger ? n.toString() : Long.toString(n.longValue()));
    } else if (v instanceof Map<?, ?> m) {
      Map<?, ?> map = layout.sortKeys() ? new TreeMap<>(m) : m;
      if (map.isEmpty()) {
        sb.append("{}");
        return;
      }
      sb.append('{');
      boolean first = true;
      for (Map.Entry<?, ?> e : map.entrySet()) {
        separator(sb, first, layout, depth + 1);
        first = false;
        string(sb, String.valueOf(e.getKey()), layout.ensureAscii());
        sb.append(layout.keySeparator());
        write(sb, e.getValue(), layout, depth + 1);
      }
      close(sb, layout, depth, '}');
    } else if (v instanceof Iterable<?> || v.getClass().isArray()) {
      List<Object> items = new ArrayList<>();
      if (v instanceof Iterable<?> it) {
        it.forEach(items::add);
      } else {
        for (int i = 0, n = Array.getLength(v); i < n; i++) {
          items.add(Array.get(v, i));
        }
      }
      if (items.isEmpty()) {
        sb.append("[]");
        return;
      }
      sb.append('[');
      boolean first = true;
      for (Object o : items) {
        separator(sb, first, layout, depth + 1);
        first = false;
        write(sb, o, layout, depth + 1);
      }
      close(sb, layout, depth, ']');
    } else {
      string(sb, v.toString(), layout.ensureAscii());
    }
  }

  private static void separator(StringBuilder sb, boolean first, Layout layout, int depth) {
    if (!first) {
      sb.append(layout.itemSeparator());
    }
    if (layout.indent() != null) {
      sb.append('\n').append(layout.indent().repeat(depth));
    }
  }

  private static void close(StringBuilder sb, Layout layout, int depth, char c) {
    if (layout.indent() != null) {
      sb.append('\n').append(layout.indent().repeat(depth));
    }
    sb.append(c);
  }

  /** Python's {@code repr(float)}: shortest round trip, {@code 1.0}, {@code 1e-05}. */
  static String pythonFloat(double d) {
    if (Double.isNaN(d)) {
      return "NaN";
    }
    if (Double.isInfinite(d)) {
      return d > 0 ? "Infinity" : "-Infinity";
    }
    if (d == 0) {
      return 1 / d < 0 ? "-0.0" : "0.0"; // BigDecimal has no negative zero
    }
    BigDecimal exact = new BigDecimal(Double.toString(d)).stripTrailingZeros();
    int exponent = exact.precision() - exact.scale() - 1;
    if (exponent >= 16 || exponent < -4) {
      String digits = exact.unscaledValue().abs().toString();
      String mantissa = digits.length() == 1 ? digits : digits.charAt(0) + "." + digits.substring(1);
      return (d < 0 ? "-" : "") + mantissa + "e" + (exponent < 0 ? "-" : "+")
          + (Math.abs(exponent) < 10 ? "0" : "") + Math.abs(exponent);
    }
    String plain = exact.toPlainString();
    return plain.contains(".") ? plain : plain + ".0";
  }

  private static void string(StringBuilder sb, String s, boolean ensureAscii) {
    sb.append('"');
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      switch (c) {
        case '"' -> sb.append("\\\"");
        case '\\' -> sb.append("\\\\");
        case '\n' -> sb.append("\\n");
        case '\r' -> sb.append("\\r");
        case '\t' -> sb.append("\\t");
        case '\b' -> sb.append("\\b");
        case '\f' -> sb.append("\\f");
        default -> {
          if (c < 0x20 || (ensureAscii && c > 0x7e)) {
            sb.append(String.format("\\u%04x", (int) c));
          } else {
            sb.append(c);
          }
        }
      }
    }
    sb.append('"');
  }
}
