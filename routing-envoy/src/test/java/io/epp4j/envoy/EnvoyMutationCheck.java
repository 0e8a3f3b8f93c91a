package io.epp4j.envoy;

import com.google.protobuf.ByteString;
import io.envoyproxy.envoy.config.core.v3.HeaderValueOption;
import io.envoyproxy.envoy.service.ext_proc.v3.HeaderMutation;
import java.util.ArrayList;
import java.util.List;

/**
 * The checks Envoy's ext_proc filter makes on a header mutation before applying it
 * ({@code MutationUtils::applyHeaderMutations}): a name that is not an HTTP token
 * ({@code HeaderUtility::headerNameIsValid}, a pseudo-header's ':' aside), a value holding a
 * byte other than HTAB, SP, VCHAR or obs-text ({@code HeaderUtility::headerValueIsValid}: NUL,
 * CR, LF, the other controls, DEL), or both {@code value} and {@code raw_value} set. One of them
 * fails the whole message, and Envoy then replies 500 in place of the request or the answer.
 * Written from Envoy's source, independently of the server's own checks, as the oracle the tests
 * hold its answers to.
 */
final class EnvoyMutationCheck {
  private static final String TCHAR_SYMBOLS = "!#$%&'*+-.^_`|~";

  private EnvoyMutationCheck() {}

  /** What Envoy would refuse in {@code m}, one line each; empty when it applies it. */
  static List<String> refusals(HeaderMutation m) {
    List<String> out = new ArrayList<>();
    for (String name : m.getRemoveHeadersList()) {
      if (!nameIsValid(name)) {
        out.add("remove_headers: invalid name " + escaped(name));
      }
    }
    for (HeaderValueOption o : m.getSetHeadersList()) {
      String name = o.getHeader().getKey();
      if (!nameIsValid(name)) {
        out.add("set_headers: invalid name " + escaped(name));
      }
      if (!o.getHeader().getValue().isEmpty() && !o.getHeader().getRawValue().isEmpty()) {
        out.add("set_headers " + escaped(name) + ": both value and raw_value");
      }
      // Envoy reads raw_value or value as its send_header_raw_value guard says: both are checked
      if (!valueIsValid(o.getHeader().getRawValue())
          || !valueIsValid(o.getHeader().getValueBytes())) {
        out.add("set_headers " + escaped(name) + ": invalid value");
      }
    }
    return out;
  }

  static boolean nameIsValid(String name) {
    String token = name.startsWith(":") ? name.substring(1) : name;
    if (token.isEmpty()) {
      return !name.startsWith(":"); // Envoy's loop takes an empty name; ":" alone it refuses
    }
    for (int i = 0; i < token.length(); i++) {
      char c = token.charAt(i);
      boolean tchar = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
          || TCHAR_SYMBOLS.indexOf(c) >= 0;
      if (!tchar) {
        return false;
      }
    }
    return true;
  }

  static boolean valueIsValid(ByteString value) {
    for (int i = 0; i < value.size(); i++) {
      int b = value.byteAt(i) & 0xFF;
      if (b != '\t' && (b < 0x20 || b == 0x7F)) {
        return false;
      }
    }
    return true;
  }

  private static String escaped(String s) {
    StringBuilder b = new StringBuilder("'");
    for (char c : s.toCharArray()) {
      b.append(c < 0x20 || c == 0x7F ? String.format("\\x%02x", (int) c) : String.valueOf(c));
    }
    return b.append('\'').toString();
  }
}
