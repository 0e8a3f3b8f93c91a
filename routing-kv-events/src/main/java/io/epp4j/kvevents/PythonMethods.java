package io.epp4j.kvevents;

import java.beans.FeatureDescriptor;
import java.time.ZonedDateTime;
import java.time.format.TextStyle;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Iterator;
import java.util.List;
import java.util.Locale;
import jinjava.javax.el.ELContext;
import jinjava.javax.el.ELResolver;
import org.jspecify.annotations.Nullable;

/**
 * The Python {@code str} methods Hugging Face chat templates call on message text
 * ({@code content.strip()}, {@code .startswith(...)}, {@code .split(...)[-1]}, ...), which
 * jinjava does not offer because its strings are Java strings. Resolves method calls on strings
 * and indexing of strings ({@code role[0]}) only; everything else falls through to jinjava's
 * own resolvers.
 */
final class PythonMethods extends ELResolver {

  @Override
  public @Nullable Object invoke(ELContext context, @Nullable Object base, @Nullable Object method,
      Class<?> @Nullable [] paramTypes, Object @Nullable [] params) {
    if (!(base instanceof String s) || method == null) {
      return null;
    }
    Object[] a = params == null ? new Object[0] : params;
    Object result = call(s, method.toString(), a);
    if (result != NOT_HANDLED) {
      context.setPropertyResolved(true);
      return result;
    }
    return null;
  }

  private static final Object NOT_HANDLED = new Object();
  private static final java.util.regex.Pattern INDEX = java.util.regex.Pattern.compile("-?\\d{1,9}");

  static Object call(String s, String name, Object[] a) {
    switch (name) {
      case "strip":
        return strip(s, chars(a), true, true);
      case "lstrip":
        return strip(s, chars(a), true, false);
      case "rstrip":
        return strip(s, chars(a), false, true);
      case "startswith":
        return affix(s, a, true);
      case "endswith":
        return affix(s, a, false);
      case "find":
        return find(s, a, false);
      case "rfind":
        return find(s, a, true);
      case "index":
      case "rindex": {
        long at = find(s, a, name.equals("rindex"));
        if (at < 0) {
          throw new IllegalArgumentException("substring not found"); // Python's ValueError
        }
        return at;
      }
      case "split":
        return split(s, a.length > 0 && a[0] != null ? a[0].toString() : null,
            a.length > 1 ? ((Number) a[1]).intValue() : -1);
      case "upper":
        return s.toUpperCase(Locale.ROOT);
      case "lower":
        return lower(s);
      case "swapcase":
        return swapcase(s);
      case "title":
        return title(s);
      case "capitalize":
        return capitalize(s);
      case "replace":
        return replace(s, str(a, 0), str(a, 1), a.length > 2 ? ((Number) a[2]).intValue() : -1);
      case "count":
        return count(s, str(a, 0), start(a, s), end(a, s));
      case "join":
        return join(s, a.length > 0 ? a[0] : null);
      case "isspace":
        return !s.isEmpty() && s.codePoints().allMatch(PythonMethods::isSpace);
      case "isdecimal":
        return !s.isEmpty() && s.codePoints().allMatch(PythonMethods::isDecimal);
      case "isdigit":
        return !s.isEmpty() && s.codePoints().allMatch(PythonMethods::isDigit);
      case "isnumeric":
        return !s.isEmpty() && s.codePoints().allMatch(PythonMethods::isNumeric);
      case "isalpha":
        return !s.isEmpty() && s.codePoints().allMatch(Character::isLetter);
      case "isalnum":
        return !s.isEmpty()
            && s.codePoints().allMatch(c -> Character.isLetter(c) || isNumeric(c));
      case "isupper":
        return caseOnly(s, true);
      case "islower":
        return caseOnly(s, false);
      default:
        return NOT_HANDLED;
    }
  }

  private static String str(Object[] a, int i) {
    if (a.length <= i || a[i] == null) {
      throw new IllegalArgumentException("missing string argument " + (i + 1));
    }
    return a[i].toString();
  }

  private static @Nullable String chars(Object[] a) {
    return a.length > 0 && a[0] != null ? a[0].toString() : null;
  }

  /** Python's {@code str.isspace} set, which {@code strip()} and {@code split()} use. */
  static boolean isSpace(int c) {
    return ChatTemplate.pythonSpace(c);
  }

  /** Python's {@code isdecimal}: the general category Nd, as Java's {@code isDigit}. */
  private static boolean isDecimal(int c) {
    return Character.getType(c) == Character.DECIMAL_DIGIT_NUMBER;
  }

  /**
   * Python's {@code isdigit}: Numeric_Type Decimal or Digit, i.e. Nd plus the superscripts,
   * subscripts and circled digits listed here (from Python 3.11's Unicode 14 data), which Java
   * has no property for.
   */
  private static boolean isDigit(int c) {
    return isDecimal(c) || inRanges(DIGIT_NOT_DECIMAL, c);
  }

  /**
   * Python's {@code isnumeric}: any Numeric_Type, i.e. the categories Nd, Nl and No plus the CJK
   * ideographs Unicode gives a numeric value (三, 百, ...), listed here.
   */
  private static boolean isNumeric(int c) {
    int t = Character.getType(c);
    return t == Character.DECIMAL_DIGIT_NUMBER || t == Character.LETTER_NUMBER
        || t == Character.OTHER_NUMBER || inRanges(NUMERIC_IDEOGRAPHS, c);
  }

  private static final int[] DIGIT_NOT_DECIMAL = {0xB2, 0xB3, 0xB9, 0xB9, 0x1369, 0x1371,
      0x19DA, 0x19DA, 0x2070, 0x2070, 0x2074, 0x2079, 0x2080, 0x2089, 0x2460, 0x2468,
      0x2474, 0x247C, 0x2488, 0x2490, 0x24EA, 0x24EA, 0x24F5, 0x24FD, 0x24FF, 0x24FF,
      0x2776, 0x277E, 0x2780, 0x2788, 0x278A, 0x2792, 0x10A40, 0x10A43, 0x10E60, 0x10E68,
      0x11052, 0x1105A, 0x1F100, 0x1F10A};

  private static final int[] NUMERIC_IDEOGRAPHS = {0x3405, 0x3405, 0x3483, 0x3483,
      0x382A, 0x382A, 0x3B4D, 0x3B4D, 0x4E00, 0x4E00, 0x4E03, 0x4E03, 0x4E07, 0x4E07,
      0x4E09, 0x4E09, 0x4E5D, 0x4E5D, 0x4E8C, 0x4E8C, 0x4E94, 0x4E94, 0x4E96, 0x4E96,
      0x4EBF, 0x4EC0, 0x4EDF, 0x4EDF, 0x4EE8, 0x4EE8, 0x4F0D, 0x4F0D, 0x4F70, 0x4F70,
      0x5104, 0x5104, 0x5146, 0x5146, 0x5169, 0x5169, 0x516B, 0x516B, 0x516D, 0x516D,
      0x5341, 0x5341, 0x5343, 0x5345, 0x534C, 0x534C, 0x53C1, 0x53C4, 0x56DB, 0x56DB,
      0x58F1, 0x58F1, 0x58F9, 0x58F9, 0x5E7A, 0x5E7A, 0x5EFE, 0x5EFF, 0x5F0C, 0x5F0E,
      0x5F10, 0x5F10, 0x62FE, 0x62FE, 0x634C, 0x634C, 0x67D2, 0x67D2, 0x6F06, 0x6F06,
      0x7396, 0x7396, 0x767E, 0x767E, 0x8086, 0x8086, 0x842C, 0x842C, 0x8CAE, 0x8CAE,
      0x8CB3, 0x8CB3, 0x8D30, 0x8D30, 0x9621, 0x9621, 0x9646, 0x9646, 0x964C, 0x964C,
      0x9678, 0x9678, 0x96F6, 0x96F6, 0xF96B, 0xF96B, 0xF973, 0xF973, 0xF978, 0xF978,
      0xF9B2, 0xF9B2, 0xF9D1, 0xF9D1, 0xF9D3, 0xF9D3, 0xF9FD, 0xF9FD, 0x20001, 0x20001,
      0x20064, 0x20064, 0x200E2, 0x200E2, 0x20121, 0x20121, 0x2092A, 0x2092A,
      0x20983, 0x20983, 0x2098C, 0x2098C, 0x2099C, 0x2099C, 0x20AEA, 0x20AEA,
      0x20AFD, 0x20AFD, 0x20B19, 0x20B19, 0x22390, 0x22390, 0x22998, 0x22998,
      0x23B1B, 0x23B1B, 0x2626D, 0x2626D, 0x2F890, 0x2F890};

  /** Whether {@code c} lies in one of the inclusive, ascending {@code [from, to]} pairs. */
  private static boolean inRanges(int[] ranges, int c) {
    for (int i = 0; i < ranges.length && ranges[i] <= c; i += 2) {
      if (c <= ranges[i + 1]) {
        return true;
      }
    }
    return false;
  }

  /**
   * Python's {@code isupper} ({@code upper}) or {@code islower}: at least one cased character,
   * and none of the other case or title case.
   */
  private static boolean caseOnly(String s, boolean upper) {
    boolean cased = false;
    for (int i = 0; i < s.length(); ) {
      int c = s.codePointAt(i);
      i += Character.charCount(c);
      boolean other = upper ? Character.isLowerCase(c) : Character.isUpperCase(c);
      if (other || Character.isTitleCase(c)) {
        return false;
      }
      cased |= upper ? Character.isUpperCase(c) : Character.isLowerCase(c);
    }
    return cased;
  }

  static String strip(String s, @Nullable String chars, boolean left, boolean right) {
    int from = 0;
    int to = s.length();
    while (left && from < to && stripped(s.charAt(from), chars)) {
      from++;
    }
    while (right && to > from && stripped(s.charAt(to - 1), chars)) {
      to--;
    }
    return s.substring(from, to);
  }

  private static boolean stripped(char c, @Nullable String chars) {
    return chars == null ? isSpace(c) : chars.indexOf(c) >= 0;
  }

  /**
   * The {@code start} argument (the second) of {@code find}, {@code count}, {@code startswith}
   * ... as Python's slice rules adjust it: negative counts from the end, then at least 0. It is
   * not capped at the length, so a start beyond the end finds nothing, not even {@code ''}.
   * Positions are UTF-16 units, as jinjava's slices and {@code length} count them.
   */
  private static int start(Object[] a, String s) {
    return a.length > 1 && a[1] != null ? sliceIndex(((Number) a[1]).longValue(), s.length()) : 0;
  }

  /** The {@code end} argument (the third), adjusted as Python does and capped at the length. */
  private static int end(Object[] a, String s) {
    return a.length > 2 && a[2] != null
        ? Math.min(sliceIndex(((Number) a[2]).longValue(), s.length()), s.length()) : s.length();
  }

  private static int sliceIndex(long i, int length) {
    long adjusted = i < 0 ? Math.max(0, i + length) : i;
    return (int) Math.min(adjusted, Integer.MAX_VALUE);
  }

  /** {@code find}/{@code rfind}: the lowest/highest index of the substring within [start, end). */
  private static long find(String s, Object[] a, boolean last) {
    String sub = str(a, 0);
    int from = start(a, s);
    int to = end(a, s);
    if (to - from < sub.length()) {
      return -1;
    }
    int at = last ? s.lastIndexOf(sub, to - sub.length()) : s.indexOf(sub, from);
    return at < from || at + sub.length() > to ? -1 : at;
  }

  private static boolean affix(String s, Object[] a, boolean prefix) {
    if (a.length == 0 || a[0] == null) {
      throw new IllegalArgumentException("missing string argument 1");
    }
    int from = start(a, s);
    int to = end(a, s);
    Iterable<?> options = a[0] instanceof Collection<?> c ? c : List.of(a[0]);
    for (Object o : options) {
      String x = String.valueOf(o);
      if (to - from >= x.length()
          && (prefix ? s.startsWith(x, from) : s.startsWith(x, to - x.length()))) {
        return true;
      }
    }
    return false;
  }

  static List<String> split(String s, @Nullable String sep, int maxsplit) {
    List<String> out = new ArrayList<>();
    if (sep == null) {
      int i = 0;
      int n = s.length();
      while (true) {
        while (i < n && isSpace(s.charAt(i))) {
          i++;
        }
        if (i == n) {
          return out;
        }
        if (maxsplit >= 0 && out.size() == maxsplit) {
          out.add(s.substring(i)); // Python keeps the rest as it is, trailing whitespace too
          return out;
        }
        int j = i;
        while (j < n && !isSpace(s.charAt(j))) {
          j++;
        }
        out.add(s.substring(i, j));
        i = j;
      }
    }
    if (sep.isEmpty()) {
      throw new IllegalArgumentException("empty separator");
    }
    int from = 0;
    int at;
    while ((maxsplit < 0 || out.size() < maxsplit) && (at = s.indexOf(sep, from)) >= 0) {
      out.add(s.substring(from, at));
      from = at + sep.length();
    }
    out.add(s.substring(from));
    return out;
  }

  /**
   * Python's {@code str.title()}: a cased character that follows another cased one is
   * lower-cased, any other is title-cased. Letters without case (CJK, for one) do not continue a
   * word, as they would if every letter counted. Both mappings are Python's full ones
   * ({@code 'ß'} becomes {@code 'Ss'}, a word-final capital sigma {@code 'ς'}).
   */
  static String title(String s) {
    StringBuilder sb = new StringBuilder(s.length());
    boolean prevCased = false;
    for (int i = 0; i < s.length(); ) {
      int c = s.codePointAt(i);
      if (prevCased) {
        appendLower(sb, s, i, c);
      } else {
        appendTitle(sb, c);
      }
      prevCased = isCased(c);
      i += Character.charCount(c);
    }
    return sb.toString();
  }

  /** Python's {@code str.capitalize()}: the first character title-cased, the rest lower-cased. */
  static String capitalize(String s) {
    if (s.isEmpty()) {
      return s;
    }
    StringBuilder sb = new StringBuilder(s.length());
    int first = s.codePointAt(0);
    appendTitle(sb, first);
    for (int i = Character.charCount(first); i < s.length(); ) {
      int c = s.codePointAt(i);
      appendLower(sb, s, i, c);
      i += Character.charCount(c);
    }
    return sb.toString();
  }

  /**
   * Python's {@code str.lower()}. Java's {@code toLowerCase} maps every character as Python
   * does, but decides a capital sigma's final form by word boundaries, where Python looks only at
   * the nearest characters that are not case-ignorable ({@code 'A1Σ'} ends in {@code 'σ'}).
   */
  static String lower(String s) {
    if (s.indexOf(CAPITAL_SIGMA) < 0) {
      return s.toLowerCase(Locale.ROOT);
    }
    StringBuilder sb = new StringBuilder(s.length());
    for (int i = 0; i < s.length(); ) {
      int c = s.codePointAt(i);
      appendLower(sb, s, i, c);
      i += Character.charCount(c);
    }
    return sb.toString();
  }

  /** Python's {@code str.swapcase()}; title-case letters ({@code 'ǅ'}) stay as they are. */
  private static String swapcase(String s) {
    StringBuilder sb = new StringBuilder(s.length());
    for (int i = 0; i < s.length(); ) {
      int c = s.codePointAt(i);
      if (Character.isUpperCase(c)) {
        appendLower(sb, s, i, c);
      } else if (Character.isLowerCase(c)) {
        sb.append(new String(Character.toChars(c)).toUpperCase(Locale.ROOT));
      } else {
        sb.appendCodePoint(c);
      }
      i += Character.charCount(c);
    }
    return sb.toString();
  }

  private static final char CAPITAL_SIGMA = '\u03a3';

  /** The full lower-case mapping of {@code c}, found at {@code i} in {@code s}. */
  private static void appendLower(StringBuilder sb, String s, int i, int c) {
    if (c == CAPITAL_SIGMA) {
      sb.append(finalSigma(s, i) ? '\u03c2' : '\u03c3');
    } else {
      sb.append(new String(Character.toChars(c)).toLowerCase(Locale.ROOT));
    }
  }

  /**
   * Unicode's Final_Sigma as Python tests it: a cased character before, skipping
   * case-ignorable ones, and none after.
   */
  private static boolean finalSigma(String s, int i) {
    int j = i;
    int c = 0;
    while (j > 0) {
      c = s.codePointBefore(j);
      j -= Character.charCount(c);
      if (!isCaseIgnorable(c)) {
        break;
      }
    }
    if (j == i || isCaseIgnorable(c) || !isCased(c)) {
      return false;
    }
    for (j = i + 1; j < s.length(); ) {
      c = s.codePointAt(j);
      j += Character.charCount(c);
      if (!isCaseIgnorable(c)) {
        return !isCased(c);
      }
    }
    return true;
  }

  /**
   * Unicode's Case_Ignorable: marks, format characters, modifier letters and symbols, and the
   * word-internal punctuation (apostrophes, full stop, colon, middle dot).
   */
  private static boolean isCaseIgnorable(int c) {
    switch (Character.getType(c)) {
      case Character.NON_SPACING_MARK, Character.ENCLOSING_MARK, Character.FORMAT,
          Character.MODIFIER_LETTER, Character.MODIFIER_SYMBOL -> {
        return true;
      }
      default -> {
        return c == 0x27 || c == 0x2E || c == 0x3A || c == 0xB7 || c == 0x387 || c == 0x55F
            || c == 0x5F4 || c == 0x2018 || c == 0x2019 || c == 0x2024 || c == 0x2027
            || c == 0xFE13 || c == 0xFE52 || c == 0xFE55 || c == 0xFF07 || c == 0xFF0E
            || c == 0xFF1A;
      }
    }
  }

  /**
   * The full title-case mapping of {@code c}: Java knows only the one-character mappings, so
   * the characters whose title case is longer (from Unicode's SpecialCasing, as Python 3.11
   * prints them) are listed.
   */
  private static void appendTitle(StringBuilder sb, int c) {
    String special = c <= 0xFFFF ? LONG_TITLES.get((char) c) : null;
    if (special != null) {
      sb.append(special);
    } else {
      sb.appendCodePoint(Character.toTitleCase(c));
    }
  }

  private static final java.util.Map<Character, String> LONG_TITLES = longTitles(
      "\u00DF\u0053\u0073", "\u0149\u02BC\u004E", "\u01F0\u004A\u030C",
      "\u0390\u0399\u0308\u0301", "\u03B0\u03A5\u0308\u0301", "\u0587\u0535\u0582",
      "\u1E96\u0048\u0331", "\u1E97\u0054\u0308", "\u1E98\u0057\u030A", "\u1E99\u0059\u030A",
      "\u1E9A\u0041\u02BE", "\u1F50\u03A5\u0313", "\u1F52\u03A5\u0313\u0300",
      "\u1F54\u03A5\u0313\u0301", "\u1F56\u03A5\u0313\u0342", "\u1FB2\u1FBA\u0345",
      "\u1FB4\u0386\u0345", "\u1FB6\u0391\u0342", "\u1FB7\u0391\u0342\u0345",
      "\u1FC2\u1FCA\u0345", "\u1FC4\u0389\u0345", "\u1FC6\u0397\u0342",
      "\u1FC7\u0397\u0342\u0345", "\u1FD2\u0399\u0308\u0300", "\u1FD3\u0399\u0308\u0301",
      "\u1FD6\u0399\u0342", "\u1FD7\u0399\u0308\u0342", "\u1FE2\u03A5\u0308\u0300",
      "\u1FE3\u03A5\u0308\u0301", "\u1FE4\u03A1\u0313", "\u1FE6\u03A5\u0342",
      "\u1FE7\u03A5\u0308\u0342", "\u1FF2\u1FFA\u0345", "\u1FF4\u038F\u0345",
      "\u1FF6\u03A9\u0342", "\u1FF7\u03A9\u0342\u0345", "\uFB00\u0046\u0066",
      "\uFB01\u0046\u0069", "\uFB02\u0046\u006C", "\uFB03\u0046\u0066\u0069",
      "\uFB04\u0046\u0066\u006C", "\uFB05\u0053\u0074", "\uFB06\u0053\u0074",
      "\uFB13\u0544\u0576", "\uFB14\u0544\u0565", "\uFB15\u0544\u056B", "\uFB16\u054E\u0576",
      "\uFB17\u0544\u056D");

  private static java.util.Map<Character, String> longTitles(String... entries) {
    java.util.Map<Character, String> m = new java.util.HashMap<>();
    for (String e : entries) {
      m.put(e.charAt(0), e.substring(1));
    }
    return java.util.Map.copyOf(m);
  }

  /**
   * jinja2's {@code title} filter, which is not {@code str.title()}: words start after
   * whitespace and {@code -([{<}, and each word is its first character upper-cased followed by
   * the rest lower-cased.
   */
  static String jinjaTitle(String s) {
    StringBuilder sb = new StringBuilder(s.length());
    int i = 0;
    while (i < s.length()) {
      int j = i;
      boolean separators = wordSeparator(s.codePointAt(i));
      while (j < s.length() && wordSeparator(s.codePointAt(j)) == separators) {
        j += Character.charCount(s.codePointAt(j));
      }
      if (separators) {
        sb.append(s, i, j);
      } else {
        int first = s.codePointAt(i);
        int rest = i + Character.charCount(first);
        sb.append(new String(Character.toChars(first)).toUpperCase(Locale.ROOT))
            .append(lower(s.substring(rest, j)));
      }
      i = j;
    }
    return sb.toString();
  }

  private static boolean wordSeparator(int c) {
    return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || isSpace(c);
  }

  private static boolean isCased(int c) {
    return Character.isUpperCase(c) || Character.isLowerCase(c) || Character.isTitleCase(c);
  }

  private static String replace(String s, String old, String with, int count) {
    if (count < 0) {
      return s.replace(old, with);
    }
    StringBuilder sb = new StringBuilder();
    int from = 0;
    int at;
    int done = 0;
    while (done < count && (at = s.indexOf(old, from)) >= 0) {
      sb.append(s, from, at).append(with);
      from = at + old.length();
      done++;
      if (old.isEmpty()) {
        if (from < s.length()) {
          sb.append(s.charAt(from));
        }
        from++;
      }
    }
    return from <= s.length() ? sb.append(s.substring(from)).toString() : sb.toString();
  }

  /** Non-overlapping occurrences within [from, to); {@code ''} occurs at every position. */
  private static long count(String s, String sub, int from, int to) {
    if (to - from < sub.length()) {
      return 0;
    }
    if (sub.isEmpty()) {
      return to - from + 1L;
    }
    long n = 0;
    for (int at = s.indexOf(sub, from); at >= 0 && at + sub.length() <= to;
        at = s.indexOf(sub, at + sub.length())) {
      n++;
    }
    return n;
  }

  private static String join(String sep, @Nullable Object items) {
    if (!(items instanceof Iterable<?> it)) {
      throw new IllegalArgumentException("join needs a list");
    }
    StringBuilder sb = new StringBuilder();
    boolean first = true;
    for (Object o : it) {
      if (!first) {
        sb.append(sep);
      }
      first = false;
      sb.append(o);
    }
    return sb.toString();
  }

  /** Python's {@code strftime} for the codes chat templates use ({@code %d %b %Y}, ...). */
  static String strftime(ZonedDateTime t, String format) {
    StringBuilder sb = new StringBuilder();
    for (int i = 0; i < format.length(); i++) {
      char c = format.charAt(i);
      if (c != '%' || i + 1 == format.length()) {
        sb.append(c);
        continue;
      }
      char f = format.charAt(++i);
      boolean noPad = f == '-' && i + 1 < format.length();
      if (noPad) {
        f = format.charAt(++i);
      }
      switch (f) {
        case 'Y' -> sb.append(t.getYear());
        case 'y' -> pad(sb, t.getYear() % 100, noPad);
        case 'm' -> pad(sb, t.getMonthValue(), noPad);
        case 'd' -> pad(sb, t.getDayOfMonth(), noPad);
        case 'H' -> pad(sb, t.getHour(), noPad);
        case 'I' -> pad(sb, t.getHour() % 12 == 0 ? 12 : t.getHour() % 12, noPad);
        case 'M' -> pad(sb, t.getMinute(), noPad);
        case 'S' -> pad(sb, t.getSecond(), noPad);
        case 'p' -> sb.append(t.getHour() < 12 ? "AM" : "PM");
        case 'B' -> sb.append(t.getMonth().getDisplayName(TextStyle.FULL, Locale.ENGLISH));
        case 'b' -> sb.append(t.getMonth().getDisplayName(TextStyle.SHORT, Locale.ENGLISH));
        case 'A' -> sb.append(t.getDayOfWeek().getDisplayName(TextStyle.FULL, Locale.ENGLISH));
        case 'a' -> sb.append(t.getDayOfWeek().getDisplayName(TextStyle.SHORT, Locale.ENGLISH));
        case 'j' -> sb.append(noPad ? Integer.toString(t.getDayOfYear())
            : String.format(Locale.ROOT, "%03d", t.getDayOfYear()));
        case '%' -> sb.append('%');
        default -> sb.append('%').append(f);
      }
    }
    return sb.toString();
  }

  private static void pad(StringBuilder sb, int v, boolean noPad) {
    if (v < 10 && !noPad) {
      sb.append('0');
    }
    sb.append(v);
  }

  @Override
  public @Nullable Class<?> getCommonPropertyType(ELContext context, @Nullable Object base) {
    return null;
  }

  @Override
  public @Nullable Iterator<FeatureDescriptor> getFeatureDescriptors(ELContext context,
      @Nullable Object base) {
    return null;
  }

  @Override
  public @Nullable Class<?> getType(ELContext context, @Nullable Object base,
      @Nullable Object property) {
    return null;
  }

  /** {@code s[i]} on a string, negative {@code i} counting from the end, as in Python. */
  @Override
  public @Nullable Object getValue(ELContext context, @Nullable Object base,
      @Nullable Object property) {
    // jinjava hands the index over as text
    if (base instanceof String s && property != null
        && INDEX.matcher(property.toString()).matches()) {
      long i = Long.parseLong(property.toString());
      if (i < 0) {
        i += s.length();
      }
      context.setPropertyResolved(true);
      return i < 0 || i >= s.length() ? null : String.valueOf(s.charAt((int) i));
    }
    return null;
  }

  @Override
  public boolean isReadOnly(ELContext context, @Nullable Object base, @Nullable Object property) {
    return false;
  }

  @Override
  public void setValue(ELContext context, @Nullable Object base, @Nullable Object property,
      @Nullable Object value) {}
}
