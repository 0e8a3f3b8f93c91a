package io.epp4j.api;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.net.URI;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** Parsing and spelling of {@code host:port}, IPv6 in brackets. */
class EndpointTest {

  @Test
  void parsesHostPortAndBracketedIpv6() {
    Endpoint e = Endpoint.parse("10.0.0.1:8000", Map.of(Endpoint.ROLE_LABEL, "decode"));
    assertThat(e.host()).isEqualTo("10.0.0.1");
    assertThat(e.port()).isEqualTo(8000);
    assertThat(e.id()).isEqualTo("10.0.0.1:8000");
    assertThat(e.label(Endpoint.ROLE_LABEL)).isEqualTo("decode");

    Endpoint v6 = Endpoint.parse("[fd00::1]:8000");
    assertThat(v6.host()).isEqualTo("fd00::1");
    assertThat(v6.port()).isEqualTo(8000);
    assertThat(v6.id()).isEqualTo("[fd00::1]:8000");
    assertThat(Endpoint.parse(v6.id())).isEqualTo(v6);
  }

  /**
   * Without brackets an IPv6 address cannot be told from its port: {@code fd00::1} is an address
   * with no port, not host {@code fd00:} on port 1.
   */
  @Test
  void anIpv6AddressWithoutBracketsOrWithUnbalancedOnesIsRejectedNamingTheText() {
    for (String bad : List.of("::1", "fd00::1", "fd00::1:8000", "[::1", "[::1:8000", "::1]:8000",
        "[::1]", "[]:8000", "a]:8000", "[a:8000", "[[::1]]:8000")) {
      assertThatThrownBy(() -> Endpoint.parse(bad)).as(bad)
          .isInstanceOf(IllegalArgumentException.class)
          .hasMessageContaining("'" + bad + "'");
    }
  }

  @Test
  void aPortThatIsNotOneToFiveDigitsInRangeIsRejectedNamingTheText() {
    for (String bad : List.of("h:0", "h:65536", "h:70000", "h:-1", "h:+80", "h: 80",
        "h:\u0668\u0660", "h:99999999999")) {
      assertThatThrownBy(() -> Endpoint.parse(bad)).as(bad)
          .isInstanceOf(IllegalArgumentException.class)
          .hasMessageContaining("'" + bad + "'");
    }
    assertThat(Endpoint.parse("h:65535").port()).isEqualTo(65535);
    assertThat(Endpoint.parse("h:1").port()).isEqualTo(1);
  }

  /**
   * {@code URI.getHost()} gives an IPv6 address in brackets; the endpoint is the same as with the
   * bare address, not one whose id has two pairs of brackets.
   */
  @Test
  void ofTakesAnIpv6AddressWithOrWithoutBrackets() {
    String host = URI.create("http://[fd00::1]:8000/v1").getHost();
    Endpoint e = Endpoint.of(host, 8000);
    assertThat(e.host()).isEqualTo("fd00::1");
    assertThat(e.id()).isEqualTo("[fd00::1]:8000");
    assertThat(e).isEqualTo(Endpoint.of("fd00::1", 8000))
        .isEqualTo(Endpoint.parse("[fd00::1]:8000"));
    assertThat(Endpoint.parse(e.id())).isEqualTo(e);
  }

  @Test
  void aRoleAfterTheAddressBecomesTheRoleLabel() {
    Endpoint p = Endpoint.parseWithRole("10.0.0.1:8000=prefill");
    assertThat(p.id()).isEqualTo("10.0.0.1:8000");
    assertThat(p.labels()).containsExactly(java.util.Map.entry(Endpoint.ROLE_LABEL, "prefill"));
    assertThat(Endpoint.parseWithRole(" [fd00::1]:8000 = decode ").labels())
        .containsEntry(Endpoint.ROLE_LABEL, "decode");
    assertThat(Endpoint.parseWithRole("[fd00::1]:8000=decode").host()).isEqualTo("fd00::1");
    assertThat(Endpoint.parseWithRole("10.0.0.2:8000").labels()).isEmpty();
    for (String role : Endpoint.ROLES) {
      assertThat(Endpoint.parseWithRole("h:1=" + role).labels())
          .containsEntry(Endpoint.ROLE_LABEL, role);
    }
  }

  @Test
  void labelsAfterTheAddressBecomeLabelsBesideTheRole() {
    Endpoint e = Endpoint.parseWithRole(
        "10.0.0.1:8000=decode; topology.kubernetes.io/zone = a;"
        + "llm-d.ai/context-length-range=0-2048");
    assertThat(e.id()).isEqualTo("10.0.0.1:8000");
    assertThat(e.labels()).containsExactlyInAnyOrderEntriesOf(java.util.Map.of(
        Endpoint.ROLE_LABEL, "decode", "topology.kubernetes.io/zone", "a",
        "llm-d.ai/context-length-range", "0-2048"));
    assertThat(Endpoint.parseWithRole("10.0.0.2:8000=zone=b").labels())
        .containsExactly(java.util.Map.entry("zone", "b"));
    assertThat(Endpoint.parseWithRole("10.0.0.3:8000=llm-d.ai/role=prefill").labels())
        .containsExactly(java.util.Map.entry(Endpoint.ROLE_LABEL, "prefill"));
    assertThatThrownBy(() -> Endpoint.parseWithRole("10.0.0.1:8000=prefill;decode"))
        .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("two roles");
    assertThatThrownBy(() -> Endpoint.parseWithRole("10.0.0.1:8000=zone=a;"))
        .isInstanceOf(IllegalArgumentException.class);
  }

  @Test
  void aLabelGivenTwiceIsRejectedNotOverwritten() {
    assertThatThrownBy(() -> Endpoint.parseWithRole("10.0.0.1:8000=decode;zone=a;zone=b"))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("label 'zone' twice").hasMessageContaining("'a'")
        .hasMessageContaining("'b'");
  }

  @Test
  void anEmptyItemIsReportedAsSuchNotAsARole() {
    // a stray ';' is not a second role, nor an empty one
    for (String spec : java.util.List.of("10.0.0.1:8000=decode;", "10.0.0.1:8000=zone=a;",
        "10.0.0.1:8000=;decode", "10.0.0.1:8000=decode;;zone=a", "10.0.0.1:8000=decode; ")) {
      assertThatThrownBy(() -> Endpoint.parseWithRole(spec))
          .isInstanceOf(IllegalArgumentException.class)
          .hasMessageContaining("empty item").hasMessageContaining("'" + spec + "'")
          .hasMessageNotContaining("two roles").hasMessageNotContaining("role must be");
    }
    assertThatThrownBy(() -> Endpoint.parseWithRole("10.0.0.1:8000=zone="))
        .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("'zone='");
    assertThatThrownBy(() -> Endpoint.parseWithRole("10.0.0.1:8000=llm-d.ai/role=prefil"))
        .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("'prefil'");
  }

  @Test
  void anUnknownOrEmptyRoleIsRejectedNamingIt() {
    assertThatThrownBy(() -> Endpoint.parseWithRole("10.0.0.1:8000=prefil"))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("'prefil'").hasMessageContaining("10.0.0.1:8000=prefil")
        .hasMessageContaining("prefill");
    assertThatThrownBy(() -> Endpoint.parseWithRole("10.0.0.1:8000="))
        .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("''");
    assertThatThrownBy(() -> Endpoint.parseWithRole("10.0.0.1=prefill"))
        .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("host:port");
  }

  /**
   * A control character in an address is never part of it, and the id goes into the destination
   * header, where a proxy refuses it (Envoy answers 500), and into log lines: refused at once,
   * the field named, through every way of making an endpoint.
   */
  @Test
  void anIdOrHostHoldingAControlCharacterIsRefusedNamingTheField() {
    for (String host : List.of("10.0.0.9\r", "10.0.0.9\n", "a\u0000b", "a\u007fb", "a\u0085b",
        "a\u2028b", "a\tb")) {
      assertThatThrownBy(() -> Endpoint.of(host, 8000))
          .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("endpoint host")
          .hasMessageContaining("control character");
      assertThatThrownBy(() -> Endpoint.parse(host + ":8000"))
          .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("control character");
      assertThatThrownBy(() -> Endpoint.parseWithRole(host + ":8000=decode"))
          .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("control character");
      assertThatThrownBy(() -> new Endpoint("10.0.0.9:8000", host, 8000, Map.of()))
          .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("endpoint host")
          .hasMessageContaining("control character");
    }
    assertThatThrownBy(() -> new Endpoint("10.0.0.9:8000\r\nx-evil: 1", "10.0.0.9", 8000,
        Map.of())).hasMessageContaining("endpoint id holds a control character (U+000D) at index 13");
    // the message names the character, never repeats the text
    assertThatThrownBy(() -> Endpoint.of("a\nsecret", 8000)).hasMessageNotContaining("secret");
    // an id is otherwise free: long, with spaces, with any printable character
    assertThat(new Endpoint("pod a/b \u00e9", "10.0.0.9", 8000, Map.of()).id())
        .isEqualTo("pod a/b \u00e9");
  }
}
