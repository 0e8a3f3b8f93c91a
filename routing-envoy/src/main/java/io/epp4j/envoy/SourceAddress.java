package io.epp4j.envoy;

import com.google.protobuf.Struct;
import com.google.protobuf.Value;
import io.envoyproxy.envoy.service.ext_proc.v3.ProcessingRequest;
import java.net.InetAddress;
import java.net.UnknownHostException;
import java.util.Map;
import org.jspecify.annotations.Nullable;

/**
 * The client's address as Envoy's downstream connection shows it, read from the ext_proc filter's
 * {@code source.address} request attribute ({@code request_attributes: [source.address]}), for
 * {@code source-ip} hash and session keys. Envoy sends the request attributes once, on the first
 * request message, in {@code ProcessingRequest.attributes} under the filter's name
 * ({@code envoy.filters.http.ext_proc}); the value is Envoy's text for the address, {@code ip:port}
 * or {@code [ipv6]:port}. The router gets it in the {@code :source-ip} pseudo-header, which
 * {@code source-ip} keys read before {@code x-forwarded-for}. Stateless.
 */
final class SourceAddress {
  /** The attribute's name, and its key in the attributes' struct. */
  static final String ATTRIBUTE = "source.address";
  /**
   * The pseudo-header {@code source-ip} keys read first (routing-scorers' {@code HashKeySource});
   * only this server sets it: a client's own pseudo-headers are dropped with the request headers.
   */
  static final String HEADER = ":source-ip";

  /** Longest text taken as an address: a bracketed IPv6 address with a zone and a port. */
  private static final int MAX_LENGTH = 128;

  private SourceAddress() {}

  /**
   * The client's IP address the message's attributes carry, or {@code null} when none carries a
   * readable one. Every entry of the attributes map is looked at, not only the filter's own name,
   * so that a filter configured under another name is read as well.
   */
  static @Nullable String of(ProcessingRequest msg) {
    if (msg.getAttributesCount() == 0) {
      return null;
    }
    for (Map.Entry<String, Struct> e : msg.getAttributesMap().entrySet()) {
      Value v = e.getValue().getFieldsMap().get(ATTRIBUTE);
      if (v != null && v.getKindCase() == Value.KindCase.STRING_VALUE) {
        String ip = ip(v.getStringValue());
        if (ip != null) {
          return ip;
        }
      }
    }
    return null;
  }

  /**
   * The IP address of Envoy's text for an address: {@code 192.0.2.7:51234},
   * {@code [2001:db8::7]:443}, or an address without a port; written as the JDK writes it
   * ({@link InetAddress#getHostAddress()}, as the Spring Cloud Gateway filter hands it over), an
   * IPv4-mapped IPv6 address as its IPv4 address, an IPv6 zone left out. {@code null} for anything
   * else (a Unix socket path, an internal listener's name, a host name, a malformed port), which is
   * never resolved.
   */
  static @Nullable String ip(String text) {
    String s = text.strip();
    if (s.isEmpty() || s.length() > MAX_LENGTH) {
      return null;
    }
    String host;
    if (s.charAt(0) == '[') {
      int close = s.indexOf(']');
      if (close < 0 || !portOrNothing(s, close + 1)) {
        return null;
      }
      host = s.substring(1, close);
      if (host.indexOf(':') < 0) {
        return null; // brackets hold an IPv6 address only
      }
    } else {
      int colon = s.indexOf(':');
      if (colon >= 0 && colon == s.lastIndexOf(':')) {
        if (!portOrNothing(s, colon) || colon == s.length() - 1) {
          return null;
        }
        host = s.substring(0, colon); // ipv4:port
      } else {
        host = s; // an IPv4 address, or an IPv6 address without brackets (so without a port)
      }
    }
    byte[] v4 = ipv4(host);
    if (v4 != null) {
      return hostAddress(v4);
    }
    return ipv6(host);
  }

  /** Whether {@code s} ends at {@code from} or goes on with {@code :} and a port. */
  private static boolean portOrNothing(String s, int from) {
    if (from == s.length()) {
      return true;
    }
    int digits = s.length() - from - 1;
    if (s.charAt(from) != ':' || digits < 1 || digits > 5) {
      return false;
    }
    int port = 0;
    for (int i = from + 1; i < s.length(); i++) {
      char c = s.charAt(i);
      if (c < '0' || c > '9') {
        return false;
      }
      port = port * 10 + (c - '0');
    }
    return port <= 65_535;
  }

  /** Four decimal octets, or {@code null}. */
  private static byte @Nullable [] ipv4(String host) {
    byte[] out = new byte[4];
    int part = 0;
    int value = 0;
    int digits = 0;
    for (int i = 0; i <= host.length(); i++) {
      char c = i < host.length() ? host.charAt(i) : '.';
      if (c >= '0' && c <= '9') {
        value = value * 10 + (c - '0');
        if (++digits > 3 || value > 255) {
          return null;
        }
      } else if (c == '.' && digits > 0 && part < 4) {
        out[part++] = (byte) value;
        value = 0;
        digits = 0;
      } else {
        return null;
      }
    }
    return part == 4 ? out : null;
  }

  /**
   * An IPv6 address in any of its textual forms (an IPv4 tail included), or {@code null}. Only
   * hex digits, colons and dots get to the JDK's parser, which takes a text of those that contains
   * a colon and starts with a hex digit or a colon as a literal and never resolves it.
   */
  private static @Nullable String ipv6(String host) {
    int zone = host.indexOf('%');
    String h = zone < 0 ? host : host.substring(0, zone);
    if (h.indexOf(':') < 0 || (!hexDigit(h.charAt(0)) && h.charAt(0) != ':')) {
      return null;
    }
    for (int i = 0; i < h.length(); i++) {
      char c = h.charAt(i);
      if (!hexDigit(c) && c != ':' && c != '.') {
        return null;
      }
    }
    try {
      return InetAddress.getByName(h).getHostAddress();
    } catch (UnknownHostException e) {
      return null; // not a valid literal
    }
  }

  /** An ASCII hex digit (Character.digit takes other scripts' digits too). */
  private static boolean hexDigit(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  }

  private static String hostAddress(byte[] v4) {
    try {
      return InetAddress.getByAddress(v4).getHostAddress();
    } catch (UnknownHostException e) {
      throw new AssertionError(e); // only for a length other than 4 or 16
    }
  }
}
