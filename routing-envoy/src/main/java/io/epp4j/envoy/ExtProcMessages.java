package io.epp4j.envoy;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.google.protobuf.ByteString;
import com.google.protobuf.ListValue;
import com.google.protobuf.Struct;
import com.google.protobuf.Value;
import io.envoyproxy.envoy.config.core.v3.HeaderValue;
import io.envoyproxy.envoy.config.core.v3.HeaderValueOption;
import io.envoyproxy.envoy.config.core.v3.Metadata;
import io.envoyproxy.envoy.service.ext_proc.v3.BodyMutation;
import io.envoyproxy.envoy.service.ext_proc.v3.BodyResponse;
import io.envoyproxy.envoy.service.ext_proc.v3.CommonResponse;
import io.envoyproxy.envoy.service.ext_proc.v3.HeaderMutation;
import io.envoyproxy.envoy.service.ext_proc.v3.HeadersResponse;
import io.envoyproxy.envoy.service.ext_proc.v3.ImmediateResponse;
import io.envoyproxy.envoy.service.ext_proc.v3.ProcessingRequest;
import io.envoyproxy.envoy.service.ext_proc.v3.ProcessingResponse;
import io.envoyproxy.envoy.service.ext_proc.v3.StreamedBodyResponse;
import io.envoyproxy.envoy.service.ext_proc.v3.TrailersResponse;
import io.envoyproxy.envoy.type.v3.HttpStatus;
import io.epp4j.api.Endpoint;
import io.epp4j.api.RoutingDecision;
import io.epp4j.scorers.PdProfileHandler;
import java.net.InetAddress;
import java.net.UnknownHostException;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashSet;
import java.util.Set;
import org.jspecify.annotations.Nullable;

/**
 * The protocol's names and the {@link ProcessingResponse} messages the server sends, built in one
 * place so that every reply of a kind has the same shape. Stateless.
 */
final class ExtProcMessages {
  /** Dynamic and filter metadata namespace the proxy's load balancer reads. */
  static final String LB_NAMESPACE = "envoy.lb";
  /** Filter metadata namespace of the subset hint. */
  static final String SUBSET_HINT_NAMESPACE = "envoy.lb.subset_hint";
  /** Key of the subset hint: the endpoints this request may go to. */
  static final String SUBSET_KEY = "x-gateway-destination-endpoint-subset";
  /** Key under {@link #LB_NAMESPACE} naming the endpoint that served the request. */
  static final String SERVED_KEY = "x-gateway-destination-endpoint-served";
  /** The request header the body's length is restored in after Envoy removed it. */
  static final String CONTENT_LENGTH = "content-length";
  /** Largest body piece sent back in one message, as the protocol recommends (64 KiB). */
  static final int MAX_BODY_PIECE = 64 * 1024;

  private static final ObjectMapper JSON = new ObjectMapper();
  private static final ProcessingResponse CONTINUE_REQUEST_HEADERS = ProcessingResponse.newBuilder()
      .setRequestHeaders(HeadersResponse.getDefaultInstance()).build();
  private static final ProcessingResponse CONTINUE_RESPONSE_HEADERS = ProcessingResponse.newBuilder()
      .setResponseHeaders(HeadersResponse.getDefaultInstance()).build();
  private static final ProcessingResponse CONTINUE_REQUEST_BODY = ProcessingResponse.newBuilder()
      .setRequestBody(BodyResponse.getDefaultInstance()).build();
  private static final ProcessingResponse CONTINUE_RESPONSE_BODY = ProcessingResponse.newBuilder()
      .setResponseBody(BodyResponse.getDefaultInstance()).build();
  private static final ProcessingResponse CONTINUE_REQUEST_TRAILERS = ProcessingResponse.newBuilder()
      .setRequestTrailers(TrailersResponse.getDefaultInstance()).build();
  private static final ProcessingResponse CONTINUE_RESPONSE_TRAILERS = ProcessingResponse.newBuilder()
      .setResponseTrailers(TrailersResponse.getDefaultInstance()).build();

  private ExtProcMessages() {}

  static ProcessingResponse continueRequestHeaders() {
    return CONTINUE_REQUEST_HEADERS;
  }

  static ProcessingResponse continueResponseHeaders() {
    return CONTINUE_RESPONSE_HEADERS;
  }

  /**
   * Lets the answer's headers through with {@code set} set on them, replacing the endpoint's own
   * of the same names: the headers the routing plugins asked for
   * ({@link RoutingDecision#responseHeaders()}). {@code raw}: see {@link #header}.
   */
  static ProcessingResponse continueResponseHeaders(java.util.Map<String, String> set,
      boolean raw) {
    if (set.isEmpty()) {
      return CONTINUE_RESPONSE_HEADERS;
    }
    HeaderMutation.Builder headers = HeaderMutation.newBuilder();
    set.forEach((name, value) -> headers.addSetHeaders(header(name, value, raw)));
    return ProcessingResponse.newBuilder().setResponseHeaders(HeadersResponse.newBuilder()
        .setResponse(CommonResponse.newBuilder().setHeaderMutation(headers))).build();
  }

  /** Lets a body chunk through unchanged (every mode but FULL_DUPLEX_STREAMED). */
  static ProcessingResponse continueRequestBody() {
    return CONTINUE_REQUEST_BODY;
  }

  static ProcessingResponse continueResponseBody() {
    return CONTINUE_RESPONSE_BODY;
  }

  static ProcessingResponse continueRequestTrailers() {
    return CONTINUE_REQUEST_TRAILERS;
  }

  static ProcessingResponse continueResponseTrailers() {
    return CONTINUE_RESPONSE_TRAILERS;
  }

  /**
   * The pick: the destination header on the request (replacing any the client sent), the same
   * value as dynamic metadata, and a cleared route cache so that routes matching on the header see
   * it. With prefill/decode disaggregation, {@code prefiller} (the prefill pick, {@code ip:port})
   * goes in {@link PdProfileHandler#PREFILLER_HEADER} for the decode server's sidecar; without
   * one a header of that name the client sent is removed, so that no client picks where its
   * request is prefilled. {@code set} and {@code remove}: the headers the routing plugins asked
   * for ({@link RoutingDecision#requestHeaders()}, {@link RoutingDecision#removedRequestHeaders()}).
   * {@code onBody}: as the answer to a body message (BUFFERED), else to the headers.
   * {@code contentLength}: the request body's length, set as {@code content-length} when not
   * negative; Envoy removes that header in the FULL_DUPLEX_STREAMED and STREAMED body modes (the
   * processor could change the body), so without it an HTTP/1.1 replica gets the request chunked.
   * {@code raw}: see {@link #header}.
   */
  static ProcessingResponse routed(String destination, @Nullable String prefiller,
      java.util.Map<String, String> set, java.util.Set<String> remove, boolean onBody,
      long contentLength, boolean raw) {
    HeaderMutation.Builder headers = HeaderMutation.newBuilder()
        .addSetHeaders(header(RoutingDecision.DESTINATION_HEADER, destination, raw));
    if (contentLength >= 0) {
      headers.addSetHeaders(header(CONTENT_LENGTH, Long.toString(contentLength), raw));
    }
    if (prefiller != null) {
      headers.addSetHeaders(header(PdProfileHandler.PREFILLER_HEADER, prefiller, raw));
    } else {
      headers.addRemoveHeaders(PdProfileHandler.PREFILLER_HEADER);
    }
    remove.forEach(headers::addRemoveHeaders);
    set.forEach((name, value) -> headers.addSetHeaders(header(name, value, raw)));
    CommonResponse common = CommonResponse.newBuilder()
        .setHeaderMutation(headers)
        .setClearRouteCache(true)
        .build();
    ProcessingResponse.Builder b = ProcessingResponse.newBuilder()
        .setDynamicMetadata(destinationMetadata(destination));
    if (onBody) {
      b.setRequestBody(BodyResponse.newBuilder().setResponse(common));
    } else {
      b.setRequestHeaders(HeadersResponse.newBuilder().setResponse(common));
    }
    return b.build();
  }

  /** {@code {"envoy.lb": {"x-gateway-destination-endpoint": destination}}}. */
  static Struct destinationMetadata(String destination) {
    return Struct.newBuilder()
        .putFields(LB_NAMESPACE, Value.newBuilder().setStructValue(Struct.newBuilder()
            .putFields(RoutingDecision.DESTINATION_HEADER,
                Value.newBuilder().setStringValue(destination).build())).build())
        .build();
  }

  /** One piece of a body the server owns (FULL_DUPLEX_STREAMED), request direction. */
  static ProcessingResponse streamedRequestBody(ByteString piece, boolean endOfStream) {
    return ProcessingResponse.newBuilder()
        .setRequestBody(BodyResponse.newBuilder().setResponse(streamed(piece, endOfStream)))
        .build();
  }

  /** One piece of a body the server owns (FULL_DUPLEX_STREAMED), response direction. */
  static ProcessingResponse streamedResponseBody(ByteString piece, boolean endOfStream) {
    return ProcessingResponse.newBuilder()
        .setResponseBody(BodyResponse.newBuilder().setResponse(streamed(piece, endOfStream)))
        .build();
  }

  private static CommonResponse streamed(ByteString piece, boolean endOfStream) {
    return CommonResponse.newBuilder()
        .setBodyMutation(BodyMutation.newBuilder().setStreamedResponse(
            StreamedBodyResponse.newBuilder().setBody(piece).setEndOfStream(endOfStream)))
        .build();
  }

  /**
   * A local reply: {@code status} with an OpenAI-style JSON error, as the Spring Cloud Gateway
   * filter writes it; {@code Retry-After: 1} on 429 and 503. {@code message} must not hold prompt
   * text (the router's rejection messages never do). {@code raw}: see {@link #header}.
   */
  static ProcessingResponse immediate(int status, String type, String message, boolean raw) {
    ObjectNode body = JSON.createObjectNode();
    body.putObject("error").put("message", message).put("type", type).put("code", status);
    HeaderMutation.Builder headers = HeaderMutation.newBuilder()
        .addSetHeaders(header("content-type", "application/json", raw));
    if (status == 429 || status == 503) {
      headers.addSetHeaders(header("retry-after", "1", raw));
    }
    return ProcessingResponse.newBuilder()
        .setImmediateResponse(ImmediateResponse.newBuilder()
            .setStatus(HttpStatus.newBuilder().setCodeValue(status))
            .setHeaders(headers)
            .setBody(ByteString.copyFromUtf8(body.toString()))
            .setDetails("epp4j_" + type))
        .build();
  }

  /**
   * A header set over any of its name, its value's UTF-8 bytes in {@code raw_value} when
   * {@code raw}, else in {@code value}, never both (Envoy refuses a header that has both). Envoy
   * reads a mutation's values from the field it writes the request's headers to: from
   * {@code raw_value} with its runtime guard {@code envoy.reloadable_features.send_header_raw_value}
   * on (the default), from {@code value} with it off, where a value sent in {@code raw_value}
   * would set the header empty ({@link #sendsRawValues}).
   */
  private static HeaderValueOption header(String name, String value, boolean raw) {
    HeaderValue.Builder h = HeaderValue.newBuilder().setKey(name);
    if (raw) {
      h.setRawValue(ByteString.copyFrom(value, StandardCharsets.UTF_8));
    } else {
      h.setValue(value);
    }
    return HeaderValueOption.newBuilder().setHeader(h)
        .setAppendAction(HeaderValueOption.HeaderAppendAction.OVERWRITE_IF_EXISTS_OR_ADD)
        .build();
  }

  /**
   * Whether the Envoy that sent {@code headers} writes header values to {@code raw_value}, and so
   * reads a mutation's from there: true unless no header has a {@code raw_value} and one has a
   * {@code value} (its {@code send_header_raw_value} guard is off), also when no header has a
   * value at all.
   */
  static boolean sendsRawValues(io.envoyproxy.envoy.config.core.v3.HeaderMap headers) {
    boolean anyValue = false;
    for (int i = 0; i < headers.getHeadersCount(); i++) {
      HeaderValue h = headers.getHeaders(i);
      if (!h.getRawValue().isEmpty()) {
        return true;
      }
      anyValue |= !h.getValueBytes().isEmpty();
    }
    return !anyValue;
  }

  /**
   * A header's value: the bytes of {@code raw_value} when Envoy sent it (it does), else those of
   * {@code value}, one character per byte (ISO-8859-1). HTTP field values are octets (RFC 9110
   * section 5.5 takes bytes above 0x7F as opaque obs-text), and Envoy passes them on unchecked:
   * read as UTF-8, every byte that is not valid UTF-8 became U+FFFD, so that two session tokens
   * differing only in such bytes were one key. One character per byte keeps every value apart,
   * as the upstream picker (a Go string holds the bytes) does, and gives the string the JDK's
   * HTTP server, Netty (Spring Cloud Gateway) and Tomcat give for the same bytes, so a request
   * has the same keys whichever epp4j gateway it passes. {@code value} is read the same way, so
   * that an Envoy sending it (with {@code send_header_raw_value} off) gives the same string.
   */
  static String headerValue(HeaderValue h) {
    ByteString raw = h.getRawValue();
    return (raw.isEmpty() ? h.getValueBytes() : raw).toString(StandardCharsets.ISO_8859_1);
  }

  /**
   * The subset hint of a request, or {@code null} when the proxy sent none: endpoint ids as the
   * router names them ({@code ip:port}, IPv6 as {@code [addr]:port}). A list of strings is the
   * protocol's form; one comma-separated string is taken too.
   *
   * @throws MalformedMessage when the hint is neither, naming the field
   */
  static @Nullable Set<String> subsetHint(Metadata metadata) {
    Struct hint = metadata.getFilterMetadataMap().get(SUBSET_HINT_NAMESPACE);
    if (hint == null) {
      return null;
    }
    Value v = hint.getFieldsMap().get(SUBSET_KEY);
    if (v == null) {
      return null;
    }
    Set<String> ids = new LinkedHashSet<>();
    switch (v.getKindCase()) {
      case LIST_VALUE -> {
        ListValue list = v.getListValue();
        for (int i = 0; i < list.getValuesCount(); i++) {
          Value e = list.getValues(i);
          if (e.getKindCase() != Value.KindCase.STRING_VALUE) {
            throw new MalformedMessage(subsetField() + "[" + i + "] must be an \"ip:port\" string, got "
                + kindName(e));
          }
          addId(ids, e.getStringValue());
        }
      }
      case STRING_VALUE -> {
        for (String s : v.getStringValue().split(",", -1)) {
          addId(ids, s);
        }
      }
      default -> throw new MalformedMessage(subsetField()
          + " must be a list of \"ip:port\" strings, got " + kindName(v));
    }
    return ids;
  }

  private static String subsetField() {
    return "metadata_context.filter_metadata[\"" + SUBSET_HINT_NAMESPACE + "\"]." + SUBSET_KEY;
  }

  private static void addId(Set<String> ids, String text) {
    String s = text.strip();
    if (s.isEmpty()) {
      return;
    }
    try {
      ids.add(Endpoint.parse(s).id()); // the router's spelling, e.g. of an IPv6 address
    } catch (IllegalArgumentException e) {
      ids.add(s); // matches no endpoint: the request is limited to nothing it can reach
    }
  }

  /**
   * A key under which two spellings of one endpoint id are equal: an IPv6 address in brackets is
   * written as the JDK writes it, so that {@code [2001:DB8::1]:8000} and
   * {@code [2001:db8:0:0:0:0:0:1]:8000} (the router's endpoints as configured) and
   * {@code [2001:db8::1]:8000} (as the proxy writes an address) are one endpoint. Any other id is
   * its own key.
   */
  static String addressKey(String id) {
    int close = id.indexOf(']');
    if (id.isEmpty() || id.charAt(0) != '[' || close < 0) {
      return id;
    }
    try {
      // in brackets the JDK takes the text as an IPv6 literal or refuses it, never looking it up
      return "[" + InetAddress.getByName(id.substring(0, close + 1)).getHostAddress() + "]"
          + id.substring(close + 1);
    } catch (UnknownHostException e) {
      return id;
    }
  }

  /**
   * The response attribute that tells a replica's answer from Envoy's own reply
   * ({@code response_attributes: [response.code_details]}): {@link #VIA_UPSTREAM} when the
   * upstream produced the response headers, Envoy's reason otherwise (a local reply such as
   * {@code upstream_reset_before_response_started{connection_failure}} for a 503 after a
   * connect failure, {@code no_healthy_upstream}, {@code upstream_response_timeout}).
   */
  static final String CODE_DETAILS = "response.code_details";
  /** {@link #CODE_DETAILS} of a response the upstream produced. */
  static final String VIA_UPSTREAM = "via_upstream";
  /** Longest code details quoted in a failure's message; Envoy's own are far shorter. */
  private static final int MAX_DETAILS = 128;

  /**
   * The {@code response.code_details} attribute a response message carries (Envoy sends the
   * response attributes with its first response message, under the filter's name; every entry
   * is looked at, as for {@code source.address}), at most {@value #MAX_DETAILS} characters;
   * {@code null} when none is there (the filter does not ask for it).
   */
  static @Nullable String codeDetails(ProcessingRequest msg) {
    if (msg.getAttributesCount() == 0) {
      return null;
    }
    for (Struct s : msg.getAttributesMap().values()) {
      Value v = s.getFieldsMap().get(CODE_DETAILS);
      if (v != null && v.getKindCase() == Value.KindCase.STRING_VALUE) {
        String d = v.getStringValue().strip();
        return d.length() > MAX_DETAILS ? d.substring(0, MAX_DETAILS) : d;
      }
    }
    return null;
  }

  /** The endpoint the proxy reports as having served the request, or {@code null}. */
  static @Nullable String servedEndpoint(Metadata metadata) {
    Struct lb = metadata.getFilterMetadataMap().get(LB_NAMESPACE);
    if (lb == null) {
      return null;
    }
    Value v = lb.getFieldsMap().get(SERVED_KEY);
    return v == null || v.getKindCase() != Value.KindCase.STRING_VALUE || v.getStringValue().isBlank()
        ? null : v.getStringValue().strip();
  }

  private static String kindName(Value v) {
    return switch (v.getKindCase()) {
      case NULL_VALUE -> "null";
      case NUMBER_VALUE -> "a number";
      case STRING_VALUE -> "a string";
      case BOOL_VALUE -> "a boolean";
      case STRUCT_VALUE -> "an object";
      case LIST_VALUE -> "a list";
      case KIND_NOT_SET -> "no value";
    };
  }

  /** A message Envoy sent that breaks the protocol; the stream ends with INVALID_ARGUMENT. */
  static final class MalformedMessage extends RuntimeException {
    private static final long serialVersionUID = 1L;

    MalformedMessage(String message) {
      super(message, null, false, false);
    }
  }
}
