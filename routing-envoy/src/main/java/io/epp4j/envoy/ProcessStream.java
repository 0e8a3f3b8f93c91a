package io.epp4j.envoy;

import com.google.protobuf.ByteString;
import io.envoyproxy.envoy.config.core.v3.HeaderMap;
import io.envoyproxy.envoy.config.core.v3.HeaderValue;
import io.envoyproxy.envoy.config.core.v3.Metadata;
import io.envoyproxy.envoy.extensions.filters.http.ext_proc.v3.ProcessingMode.BodySendMode;
import io.envoyproxy.envoy.service.ext_proc.v3.HttpBody;
import io.envoyproxy.envoy.service.ext_proc.v3.HttpHeaders;
import io.envoyproxy.envoy.service.ext_proc.v3.ProcessingRequest;
import io.envoyproxy.envoy.service.ext_proc.v3.ProcessingResponse;
import io.envoyproxy.envoy.service.ext_proc.v3.ProtocolConfiguration;
import io.epp4j.api.Rejection;
import io.epp4j.api.Endpoint;
import io.epp4j.api.RoutingDecision;
import io.epp4j.api.Usage;
import io.epp4j.api.RedactedException;
import io.epp4j.api.RepeatedHeaders;
import io.epp4j.core.Router;
import io.epp4j.core.UsageScanner;
import io.epp4j.scorers.PdProfileHandler;
import io.grpc.Status;
import io.grpc.stub.ServerCallStreamObserver;
import io.grpc.stub.StreamObserver;
import java.io.IOException;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CancellationException;
import java.util.logging.Level;
import java.util.logging.Logger;
import org.jspecify.annotations.Nullable;

/**
 * One {@code Process} stream, which is one HTTP request passing through Envoy: collects the
 * request's headers and body, routes it once the body is complete, hands the pick back in the
 * shape the body mode requires, then watches the answer and finishes the decision.
 *
 * <p>Threading: gRPC delivers every callback of one call ({@code onNext}, {@code onCompleted},
 * {@code onError}, the ready and cancel handlers) one at a time, with happens-before between
 * them, so this object's fields need no locks. Nothing here blocks: routing is CPU only, and
 * inbound messages are requested one at a time, the next only once the outbound side can take
 * more, so a slow Envoy holds the stream back instead of filling memory.
 *
 * <p>Every routed decision ends exactly once: completed when the answer ends with a 2xx status,
 * failed on another status, and failed when the stream ends any other way (Envoy cancels, the
 * client goes away, the stream closes before the answer ends, a protocol error).
 */
final class ProcessStream implements StreamObserver<ProcessingRequest> {
  private static final Logger LOG = Logger.getLogger(ProcessStream.class.getName());

  private enum Phase {
    /** Waiting for the request headers, the stream's first message. */
    REQUEST_HEADERS,
    /** Collecting the request body. */
    REQUEST_BODY,
    /** Routed and answered; waiting for the upstream's response headers. */
    AWAIT_RESPONSE,
    /** Watching the response body. */
    RESPONSE_BODY,
    /** The response ended (decision finished); only trailers or the stream's end may follow. */
    RESPONSE_DONE,
    /** The stream is over for this side: replied with a local response, failed or closed. */
    CLOSED
  }

  private final Settings settings;
  private final ServerCallStreamObserver<ProcessingResponse> out;
  private final Runnable onEnd;
  private Phase phase = Phase.REQUEST_HEADERS;
  private boolean ended;
  private boolean wantsReady;

  private BodySendMode requestMode = BodySendMode.NONE;
  private BodySendMode responseMode = BodySendMode.NONE;
  /**
   * BUFFERED_PARTIAL: Envoy sent the part of the answer its buffer held without end_of_stream;
   * the rest goes to the client unseen, so the stream's end is the answer's end.
   */
  private boolean partialResponse;

  // request
  private String path = "";
  private String method = "";
  private Map<String, String> headers = Map.of();
  private @Nullable Set<String> subset;
  /**
   * Whether Envoy sent the request's header values in {@code raw_value} (the default) rather than
   * {@code value}: the answers' header values go to the same field, the one it reads them from.
   */
  private boolean rawValues = true;
  /**
   * The client's address from the {@code source.address} request attribute, when Envoy sends it;
   * handed to the router as {@link SourceAddress#HEADER}.
   */
  private @Nullable String sourceIp;
  private @Nullable BodyCollector body;
  /** STREAMED: body chunks received and not answered yet (they are answered after the pick). */
  private int unansweredChunks;
  /** Request trailers arrived while the body was collected; answered after the body. */
  private boolean trailersPending;
  /**
   * Envoy answered the request itself: before it was routed (a local reply such as its 413 past a
   * BUFFERED limit or a 408), or after the pick instead of the endpoint (its 503 after a failed
   * connect, told by {@code response.code_details}). The answer passes through without the
   * plugins' headers, nothing of it counts as the endpoint's, and request messages are no longer
   * answered.
   */
  private boolean answeredByEnvoy;

  // routing and response
  private @Nullable RoutingDecision decision;
  private @Nullable String destination;
  private @Nullable String served;
  private int status;
  private @Nullable UsageScanner usage;
  /** The answer's content-length, -1 when it declared none (or an unreadable one). */
  private long declaredLength = -1;
  /** Answer body bytes Envoy has shown so far. */
  private long responseBytes;
  /** The router's time when the decision was made or last renewed. */
  private long activityAt;
  /**
   * The decision while its request waits for or streams its answer, for the server's renewal
   * timer ({@link #renewWhileOpen}); null before routing and once the answer or stream ended.
   */
  private volatile @Nullable RoutingDecision awaiting;

  /**
   * What every stream of one server shares. {@code renewNanos}: how long on the router's ticker a
   * routed request goes before its decision is told it is still served. {@code refusals}: keeps
   * out of the header mutations what Envoy would refuse, and counts it.
   */
  record Settings(Router router, int maxBodyBytes, BodySendMode assumedRequestMode,
      BodySendMode assumedResponseMode, long renewNanos, boolean subsetHints,
      HeaderRefusals refusals) {}

  ProcessStream(Settings settings, ServerCallStreamObserver<ProcessingResponse> out,
      Runnable onEnd) {
    this.settings = settings;
    this.out = out;
    this.onEnd = onEnd;
  }

  /** Called once the response observer is set up: asks for the first message. */
  void start() {
    out.setOnReadyHandler(this::onReady);
    out.setOnCancelHandler(() -> {
      // Envoy ends every stream as ExternalProcessorStreamImpl::close() does: END_STREAM, then
      // RST_STREAM right behind it. gRPC drops the half-close when the cancellation overtakes it
      // (it can on an executor of the user's), so the cancel is the stream's end as much as the
      // half-close is: an answer that the stream's end ends is over
      finishIfStreamEndEndsAnswer();
      end(new CancellationException("Envoy cancelled the stream"));
    });
    out.request(1);
  }

  // ------------------------------------------------------------------------- gRPC callbacks

  @Override
  public void onNext(ProcessingRequest msg) {
    if (phase == Phase.CLOSED) {
      return; // a local reply or an error was sent; Envoy ignores this stream from here on
    }
    try {
      handle(msg);
    } catch (ExtProcMessages.MalformedMessage e) {
      fail(Status.INVALID_ARGUMENT.withDescription(e.getMessage()));
    } catch (Unsupported e) {
      fail(Status.FAILED_PRECONDITION.withDescription(e.getMessage()));
    } catch (RuntimeException e) {
      // the message may quote the request (a plugin's header ask that threw, say): the class
      // and the frames are logged, not the message
      LOG.log(Level.WARNING, "ext_proc stream failed on " + msg.getRequestCase() + ": "
          + e.getClass().getName(), RedactedException.of(e));
      fail(Status.INTERNAL.withDescription("epp4j failed on " + msg.getRequestCase() + ": "
          + e.getClass().getSimpleName()));
    }
    if (phase != Phase.CLOSED) {
      requestNext();
    }
  }

  @Override
  public void onError(Throwable t) {
    end(new CancellationException("ext_proc stream ended before the answer did: "
        + Status.fromThrowable(t).getCode()));
  }

  @Override
  public void onCompleted() {
    finishIfStreamEndEndsAnswer();
    Phase was = phase;
    if (was != Phase.CLOSED) {
      phase = Phase.CLOSED;
      out.onCompleted();
    }
    end(was == Phase.RESPONSE_DONE || was == Phase.CLOSED ? null
        : new IOException("Envoy closed the ext_proc stream in phase " + was
            + ", before the answer ended"));
  }

  /**
   * At the stream's end: when Envoy sends no body, or no more of it, or the answer's own framing
   * shows it whole (its last chunk came without end_of_stream because trailers it does not send
   * ended it), the stream's end is the answer's end.
   */
  private void finishIfStreamEndEndsAnswer() {
    if (phase == Phase.RESPONSE_BODY
        && (responseMode == BodySendMode.NONE || partialResponse || answerIsWhole())) {
      finishResponse();
    }
  }

  private void onReady() {
    if (wantsReady && out.isReady() && phase != Phase.CLOSED) {
      wantsReady = false;
      out.request(1);
    }
  }

  /** One message at a time, and the next only when what was sent can be taken. */
  private void requestNext() {
    if (out.isReady()) {
      out.request(1);
    } else {
      wantsReady = true;
    }
  }

  // ------------------------------------------------------------------------------- messages

  private void handle(ProcessingRequest msg) {
    if (msg.getObservabilityMode()) {
      throw new Unsupported("observability_mode is on: Envoy would ignore the endpoint pick; "
          + "turn it off for the epp4j ext_proc filter");
    }
    if (sourceIp == null && decision == null && isRequestMessage(msg)) {
      // Envoy sends the request attributes with its first request message (the headers when it
      // sends them); any request message before the pick is looked at. Response messages carry
      // the response attributes, under the same key
      sourceIp = SourceAddress.of(msg);
    }
    if (phase == Phase.REQUEST_HEADERS && (msg.hasRequestBody() || msg.hasRequestTrailers())) {
      // a request body or trailers opening the stream: Envoy's filter sends the request headers
      // first unless request_header_mode is SKIP, and then passes them on to the router, which
      // picks the upstream from them before the body is seen, so no answer could carry the pick.
      // An Envoy that sends protocol_config puts it on this message; one that sends none skips
      // the headers the same way
      throw new Unsupported("request_header_mode SKIP: Envoy sent " + fieldName(msg)
          + " without the request headers, which the pick is set on; set request_header_mode:"
          + " SEND for the epp4j ext_proc filter (in its processing_mode and any route's"
          + " override of it)");
    }
    switch (msg.getRequestCase()) {
      case REQUEST_HEADERS -> requestHeaders(msg);
      case REQUEST_BODY -> requestBody(msg.getRequestBody());
      case REQUEST_TRAILERS -> requestTrailers();
      case RESPONSE_HEADERS -> responseHeaders(msg);
      case RESPONSE_BODY -> responseBody(msg);
      case RESPONSE_TRAILERS -> responseTrailers(msg);
      case REQUEST_NOT_SET -> throw new ExtProcMessages.MalformedMessage(
          "ProcessingRequest carries none of request_headers, request_body, request_trailers, "
              + "response_headers, response_body, response_trailers");
    }
  }

  private void requestHeaders(ProcessingRequest msg) {
    if (phase != Phase.REQUEST_HEADERS) {
      throw unexpected("request_headers");
    }
    modes(msg);
    HttpHeaders h = msg.getRequestHeaders();
    HeaderMap map = h.getHeaders();
    rawValues = ExtProcMessages.sendsRawValues(map);
    Map<String, String> named = new HashMap<>(Math.max(16, map.getHeadersCount() * 2));
    // Envoy sends a header the client repeated as one entry per line (it joins only the ones it
    // keeps as one, x-request-id or cookie): their values are joined in order, as Envoy joins
    // those, so the router reads neither line alone (RepeatedHeaders)
    Map<String, StringBuilder> repeated = null;
    boolean hasPath = false;
    boolean hasMethod = false;
    for (int i = 0; i < map.getHeadersCount(); i++) {
      HeaderValue hv = map.getHeaders(i);
      String name = hv.getKey().toLowerCase(Locale.ROOT);
      String value = ExtProcMessages.headerValue(hv);
      switch (name) {
        case ":path" -> {
          if (hasPath) {
            throw new ExtProcMessages.MalformedMessage("request_headers.headers has :path twice");
          }
          hasPath = true;
          path = pathOnly(value);
          // as sent, query included: hash keys and session keys may come from a query parameter
          // (query:<name>), which the plugins read from this header
          named.put(name, value);
        }
        case ":method" -> {
          if (hasMethod) {
            throw new ExtProcMessages.MalformedMessage(
                "request_headers.headers has :method twice");
          }
          hasMethod = true;
          method = value;
        }
        default -> {
          // pseudo-headers other than :path are dropped, :source-ip among them: the client's
          // address comes from Envoy's source.address attribute only, never from the client
          if (!name.startsWith(":")) {
            String earlier = named.putIfAbsent(name, value);
            if (earlier != null) {
              if (repeated == null) {
                repeated = new HashMap<>();
              }
              // joined once at the end: no string copied again for every further line
              repeated.computeIfAbsent(name, n -> new StringBuilder(earlier))
                  .append(RepeatedHeaders.separator(name)).append(value);
            }
          }
        }
      }
    }
    if (path.isEmpty()) {
      throw new ExtProcMessages.MalformedMessage("request_headers.headers has no :path");
    }
    if (repeated != null) {
      repeated.forEach((name, joined) -> named.put(name, joined.toString()));
    }
    headers = named;
    // with the hints turned off the metadata is not read at all, as upstream's
    // --disable-endpoint-subset-filter: a malformed hint is then no error either
    Set<String> hint = settings.subsetHints()
        ? ExtProcMessages.subsetHint(msg.getMetadataContext()) : null;
    subset = hint == null ? null : inRouterSpelling(hint);
    if (h.getEndOfStream()) {
      route(ByteString.EMPTY, Answer.HEADERS_ONLY);
      return;
    }
    phase = Phase.REQUEST_BODY;
    body = new BodyCollector();
    if (buffered(requestMode)) {
      // Envoy buffers the body only after the headers are answered; the pick goes on the body
      send(ExtProcMessages.continueRequestHeaders());
    }
    // STREAMED (the body is sent without waiting for this answer) and FULL_DUPLEX_STREAMED:
    // the headers are answered with the pick once the whole body is in
  }

  /**
   * The subset hint's endpoint ids as the router spells them: the proxy writes an IPv6 address
   * compressed and in lower case, which the endpoints list may spell otherwise.
   */
  private Set<String> inRouterSpelling(Set<String> ids) {
    Map<String, String> byAddress = null;
    Set<String> out = new LinkedHashSet<>();
    for (String id : ids) {
      if (!id.startsWith("[")) {
        out.add(id);
        continue;
      }
      if (byAddress == null) {
        byAddress = new HashMap<>();
        for (io.epp4j.api.Candidate c : settings.router.endpoints()) {
          String known = c.endpoint().id();
          byAddress.putIfAbsent(ExtProcMessages.addressKey(known), known);
        }
      }
      out.add(byAddress.getOrDefault(ExtProcMessages.addressKey(id), id));
    }
    return out;
  }

  private void requestBody(HttpBody chunk) {
    if (answeredByEnvoy) {
      return; // the request is over for Envoy; an answer would be a spurious message to it
    }
    BodyCollector b = body;
    if (phase != Phase.REQUEST_BODY || b == null) {
      throw unexpected("request_body");
    }
    if (!b.add(chunk.getBody(), settings.maxBodyBytes)) {
      reject(413, "request_too_large",
          "request body is above the limit of " + settings.maxBodyBytes + " bytes");
      return;
    }
    if (requestMode == BodySendMode.STREAMED) {
      unansweredChunks++;
    }
    if (buffered(requestMode)) {
      route(b.bytes(), Answer.BUFFERED_BODY); // the whole body, in one message
    } else if (chunk.getEndOfStream()) {
      route(b.bytes(), Answer.AFTER_BODY);
    }
  }

  private void requestTrailers() {
    if (answeredByEnvoy) {
      return;
    }
    if (phase == Phase.REQUEST_BODY && buffered(requestMode)) {
      // BUFFERED with no body: the headers were answered at once and Envoy sends these trailers
      // instead of a body message, so the pick can no longer be put on the request; let through,
      // it would go wherever the client's own x-gateway-destination-endpoint points
      reject(400, "routing_invalid_request", "a request with trailers and no body cannot be "
          + "routed with request_body_mode: " + requestMode);
      return;
    }
    if (phase == Phase.REQUEST_BODY) {
      // trailers end the body (FULL_DUPLEX_STREAMED and STREAMED send no end_of_stream then)
      trailersPending = true;
      BodyCollector b = body;
      route(b == null ? ByteString.EMPTY : b.bytes(), Answer.AFTER_BODY);
      return;
    }
    if (phase == Phase.AWAIT_RESPONSE) { // after a BUFFERED body was answered
      send(ExtProcMessages.continueRequestTrailers());
      return;
    }
    throw unexpected("request_trailers");
  }

  private void responseHeaders(ProcessingRequest msg) {
    if (phase == Phase.REQUEST_HEADERS) {
      // Envoy replied itself before the request reached this filter (a filter ahead of it refused
      // it: a rate limit's 429, an authorization's 403; or Envoy could not read the request): the
      // reply runs through every filter's response path, this one's too, so its headers open the
      // stream, with the body modes. Let through as below
      modes(msg);
      answeredByEnvoy = true;
    } else if (phase == Phase.REQUEST_BODY) {
      // Envoy replied itself while the body was still coming (its 413 when a BUFFERED body passes
      // its buffer limit, a 408, another filter's reply): the reply runs through this filter's
      // response path like any answer. Nothing was routed, so nothing is reported; the answer is
      // let through, as refusing it would turn Envoy's reply into a 500
      answeredByEnvoy = true;
      body = null;
      unansweredChunks = 0;
      trailersPending = false;
    } else if (phase != Phase.AWAIT_RESPONSE) {
      throw unexpected("response_headers");
    }
    String details = ExtProcMessages.codeDetails(msg);
    // after the pick, Envoy may still answer itself (a 503 when the connection to the endpoint
    // failed, a 504 when it timed out, another filter's reply): the answer's attributes tell,
    // when the filter asks for response.code_details. Such a reply is not the endpoint's answer
    boolean envoysReply = details != null && !details.equals(ExtProcMessages.VIA_UPSTREAM);
    if (envoysReply) {
      answeredByEnvoy = true;
    }
    renewIfDue();
    noteServed(msg.getMetadataContext());
    HeaderMap map = msg.getResponseHeaders().getHeaders();
    String contentType = null;
    String contentEncoding = null;
    String statusText = null;
    String length = null;
    for (int i = 0; i < map.getHeadersCount(); i++) {
      HeaderValue hv = map.getHeaders(i);
      String name = hv.getKey().toLowerCase(Locale.ROOT);
      if (name.equals(":status")) {
        statusText = ExtProcMessages.headerValue(hv);
      } else if (name.equals("content-type") && contentType == null) {
        contentType = ExtProcMessages.headerValue(hv);
      } else if (name.equals("content-encoding")) {
        // two header lines are a list of codings, applied one after another
        String v = ExtProcMessages.headerValue(hv);
        contentEncoding = contentEncoding == null ? v : contentEncoding + ", " + v;
      } else if (name.equals("content-length") && length == null) {
        length = ExtProcMessages.headerValue(hv);
      }
    }
    declaredLength = parseLength(length);
    status = parseStatus(statusText);
    RoutingDecision d = decision;
    // the headers the routing plugins asked for go on answers an endpoint served, not on
    // Envoy's own replies
    send(d != null && !answeredByEnvoy
        ? ExtProcMessages.continueResponseHeaders(settings.refusals.settable(
            askedResponseHeaders(d), io.epp4j.api.HeaderChecks.Refusals.Kind.RESPONSE_SET), rawValues)
        : ExtProcMessages.continueResponseHeaders());
    if (envoysReply && d != null) {
      // the endpoint did not serve the request, whatever the status: the decision fails
      d.onFailure(new IOException("Envoy replied " + (status == 0 ? "without a valid :status"
          : String.valueOf(status)) + " itself (" + details + ") instead of an answer from "
          + (served != null ? served : destination)));
    } else if (RoutingDecision.endpointFailed(status) && d != null) {
      d.onFailure(new IOException((served != null ? served : "the endpoint") + " answered "
          + (status == 0 ? "without a valid :status" : String.valueOf(status))));
    }
    usage = success() && d != null && !answeredByEnvoy
        ? new UsageScanner(contentType, contentEncoding) : null;
    phase = Phase.RESPONSE_BODY;
    if (msg.getResponseHeaders().getEndOfStream()) {
      finishResponse();
    }
  }

  /**
   * The headers the routing plugins asked for on the answer; none when asking throws. The
   * endpoint has served the request by now: failing the stream over a plugin's header would
   * throw its answer away (Envoy replies 500 instead), so the answer goes out without them, as
   * the Spring Cloud Gateway filter sends it. Logged with the exception's class and frames, not
   * its message, which may quote the prompt.
   */
  private static Map<String, String> askedResponseHeaders(RoutingDecision d) {
    try {
      return d.responseHeaders();
    } catch (RuntimeException e) {
      LOG.log(Level.WARNING, "a response header a routing plugin asked for threw "
          + e.getClass().getName() + "; the answer goes out without the plugins' headers",
          RedactedException.of(e));
      return Map.of();
    }
  }

  private void responseBody(ProcessingRequest msg) {
    if (beforeResponseHeaders()) {
      throw responseHeadersSkipped("response_body");
    }
    if (phase != Phase.RESPONSE_BODY) {
      throw unexpected("response_body");
    }
    renewIfDue();
    noteServed(msg.getMetadataContext());
    HttpBody chunk = msg.getResponseBody();
    ByteString bytes = chunk.getBody();
    responseBytes += bytes.size();
    if (responseMode == BodySendMode.FULL_DUPLEX_STREAMED) {
      send(ExtProcMessages.streamedResponseBody(bytes, chunk.getEndOfStream()));
    } else {
      send(ExtProcMessages.continueResponseBody());
    }
    RoutingDecision d = decision;
    if (success() && !bytes.isEmpty() && d != null && !answeredByEnvoy) {
      d.onFirstToken(); // counts once
    }
    UsageScanner u = usage;
    if (u != null) {
      u.feed(bytes.asReadOnlyByteBuffer());
    }
    if (chunk.getEndOfStream() || responseMode == BodySendMode.BUFFERED) {
      // BUFFERED: Envoy sends the body once it is whole; without end_of_stream only when trailers
      // end the answer, and those are not sent with response_trailer_mode SKIP (the default)
      finishResponse();
    } else if (responseMode == BodySendMode.BUFFERED_PARTIAL) {
      partialResponse = true; // one message only: the answer went past Envoy's buffer limit
    }
  }

  private void responseTrailers(ProcessingRequest msg) {
    if (beforeResponseHeaders()) {
      throw responseHeadersSkipped("response_trailers");
    }
    if (phase != Phase.RESPONSE_BODY && phase != Phase.RESPONSE_DONE) {
      throw unexpected("response_trailers");
    }
    noteServed(msg.getMetadataContext());
    send(ExtProcMessages.continueResponseTrailers());
    finishResponse(); // trailers come after the last body chunk
  }

  // -------------------------------------------------------------------------------- routing

  /** Which message of Envoy's the pick answers. */
  private enum Answer {
    /** The request had no body: the headers. */
    HEADERS_ONLY,
    /** BUFFERED: the one body message (the headers were answered already). */
    BUFFERED_BODY,
    /** FULL_DUPLEX_STREAMED and STREAMED: the held headers, then the body chunks. */
    AFTER_BODY
  }

  /**
   * Routes the complete request and answers Envoy: with a local reply when rejected, else with the
   * pick in the messages the body mode calls for.
   */
  private void route(ByteString bodyBytes, Answer answer) {
    body = null;
    RoutingDecision d = decide(bodyBytes);
    Rejection r = d.rejection();
    if (r != null) {
      reject(r.httpStatus(), "routing_" + r.reason().name().toLowerCase(Locale.ROOT), r.message());
      return;
    }
    String dest = d.destinationHeaderValue();
    Endpoint prefill = PdProfileHandler.prefillEndpoint(d);
    String prefiller = prefill == null ? null : prefill.id();
    // an endpoint id never holds a character Envoy refuses in a header value: Endpoint refuses
    // control characters, so the destination and prefill headers always go out
    decision = d;
    awaiting = d;
    activityAt = settings.router.ticker().nanos();
    destination = dest;
    phase = Phase.AWAIT_RESPONSE;
    // what the plugins asked for, less what Envoy would refuse (reported by the refusals)
    Map<String, String> set = settings.refusals.settable(d.requestHeaders(),
        io.epp4j.api.HeaderChecks.Refusals.Kind.REQUEST_SET);
    Set<String> remove = settings.refusals.removable(d.removedRequestHeaders());
    // FULL_DUPLEX_STREAMED and STREAMED: Envoy removed the request's content-length when it sent
    // the headers, as the processor might change the body; the body goes on whole and unchanged,
    // so its length is set again, as upstream's endpoint picker does, and an HTTP/1.1 replica
    // gets the request as the client sent it instead of chunked. Not with trailers, which need
    // chunked transfer on HTTP/1.1; BUFFERED keeps the header and a request without body has none
    long length = answer == Answer.AFTER_BODY && !trailersPending ? bodyBytes.size() : -1;
    send(ExtProcMessages.routed(dest, prefiller, set, remove,
        answer == Answer.BUFFERED_BODY, length, rawValues));
    if (answer != Answer.AFTER_BODY) {
      return; // the body, if any, passes through as Envoy holds it
    }
    if (requestMode == BodySendMode.FULL_DUPLEX_STREAMED) {
      // the processor owns the body in this mode: it goes back in pieces, the last one marked
      // as the end unless trailers end the request
      int n = bodyBytes.size();
      boolean eos = !trailersPending;
      if (n == 0 && eos) {
        send(ExtProcMessages.streamedRequestBody(ByteString.EMPTY, true));
      }
      for (int from = 0; from < n; from += ExtProcMessages.MAX_BODY_PIECE) {
        int to = Math.min(n, from + ExtProcMessages.MAX_BODY_PIECE);
        send(ExtProcMessages.streamedRequestBody(bodyBytes.substring(from, to), eos && to == n));
      }
    }
    for (; unansweredChunks > 0; unansweredChunks--) {
      send(ExtProcMessages.continueRequestBody()); // STREAMED: each chunk, unchanged
    }
    if (trailersPending) {
      trailersPending = false;
      send(ExtProcMessages.continueRequestTrailers());
    }
  }

  private RoutingDecision decide(ByteString bodyBytes) {
    Router router = settings.router;
    String ip = sourceIp;
    if (ip != null) {
      headers.put(SourceAddress.HEADER, ip); // read by source-ip keys before x-forwarded-for
    }
    if (!"POST".equals(method) || bodyBytes.isEmpty()) {
      // GET /v1/models and the like carry no prompt, nor do POSTs without a body (vLLM's
      // /reset_prefix_cache, /sleep): any replica can answer, picked by load; no body is parsed,
      // but the headers count as a POST's do (priority, so shedding and 400 for a malformed one;
      // session key; request id)
      Set<String> s = subset;
      return s == null ? router.routeHeaders(headers) : router.routeHeaders(headers, s);
    }
    byte[] bytes = bodyBytes.toByteArray();
    Set<String> s = subset;
    return s == null ? router.route(path, headers, bytes) : router.route(path, headers, bytes, s);
  }

  private void reject(int httpStatus, String type, String message) {
    body = null;
    send(ExtProcMessages.immediate(httpStatus, type, message, rawValues));
    phase = Phase.CLOSED;
    out.onCompleted();
    end(null);
  }

  // ------------------------------------------------------------------------------- response

  private boolean success() {
    return status >= 200 && status < 300;
  }

  /**
   * Whether the answer's own framing shows that all of it went by: a server-sent stream that
   * reached {@code data: [DONE]} (where clients stop reading), or a body of its declared
   * {@code content-length}. Used when the stream ends without the body's {@code end_of_stream}:
   * in STREAMED mode trailers end the answer without it, and Envoy sends no trailers with
   * {@code response_trailer_mode: SKIP}, then closes the stream as it closes a cut one.
   */
  private boolean answerIsWhole() {
    if (declaredLength >= 0 && responseBytes == declaredLength) {
      return true;
    }
    UsageScanner u = usage;
    if (u == null) {
      return false;
    }
    u.finish(); // asked when the stream has ended: its last line ends here, line end or not
    return u.sawDone();
  }

  /**
   * An answer that streams for longer than the router's {@code inFlightMaxAge} is still being
   * served: its decision hears so every {@link Settings#renewNanos}, so that the router does not
   * release it as a decision nobody finished and count its replica idler than it is.
   */
  private void renewIfDue() {
    RoutingDecision d = decision;
    if (d == null) {
      return;
    }
    long now = settings.router.ticker().nanos();
    if (now - activityAt >= settings.renewNanos) {
      activityAt = now;
      d.onActivity(); // ignored once the decision is finished
    }
  }

  /**
   * Called by the server's timer every {@link Settings#renewNanos} of wall time: a request whose
   * stream is open is still being served, though Envoy shows nothing of an answer that is not
   * streamed (a completion with {@code stream: false} arrives whole at its end, a BUFFERED
   * answer too), so the router must not release its decision at {@code inFlightMaxAge}. Any
   * thread; a decision already finished ignores it.
   */
  void renewWhileOpen() {
    RoutingDecision d = awaiting;
    if (d != null) {
      d.onActivity();
    }
  }

  /**
   * Called by the server's {@code close()} for a stream it cut that has not ended yet (its
   * cancellation waits for the callbacks' executor): fails the decision while the request waits
   * for or streams its answer. Any thread; the stream's own end later finds it finished.
   */
  void abandon() {
    RoutingDecision d = awaiting;
    if (d != null) {
      d.onFailure(new CancellationException(
          "the ext_proc server stopped before the answer ended"));
    }
  }

  private void finishResponse() {
    if (phase == Phase.RESPONSE_DONE) {
      return;
    }
    phase = Phase.RESPONSE_DONE;
    awaiting = null;
    RoutingDecision d = decision;
    UsageScanner u = usage;
    usage = null;
    if (d != null && !RoutingDecision.endpointFailed(status)) {
      d.onComplete(u == null ? Usage.NONE : u.finish());
    }
  }

  /**
   * Notes the endpoint Envoy reports as having served the request; when that is one of the
   * decision's fallbacks, the decision hears it, so the router counts the request there.
   */
  private void noteServed(Metadata metadata) {
    String s = ExtProcMessages.servedEndpoint(metadata);
    if (s == null || s.equals(served)) {
      return;
    }
    served = s;
    RoutingDecision d = decision;
    String key = ExtProcMessages.addressKey(s); // an IPv6 address may be spelled otherwise
    if (d == null || !d.isRouted() || ExtProcMessages.addressKey(d.servedBy().id()).equals(key)) {
      return;
    }
    for (Endpoint e : d.endpoints()) {
      if (ExtProcMessages.addressKey(e.id()).equals(key)) {
        d.onFallback(e); // ignored once the first token has come
        return;
      }
    }
  }

  /** The endpoint Envoy reports as having served the request, when it reported one. */
  @Nullable String served() {
    return served;
  }

  @Nullable String destination() {
    return destination;
  }

  // ------------------------------------------------------------------------------ lifecycle

  private void modes(ProcessingRequest first) {
    if (first.hasProtocolConfig()) {
      ProtocolConfiguration pc = first.getProtocolConfig();
      // by number: a mode newer than this server's Envoy API (GRPC, say) reads as UNRECOGNIZED,
      // and the refusal must name it as the filter's configuration spells it
      int requestValue = pc.getRequestBodyModeValue();
      int responseValue = pc.getResponseBodyModeValue();
      requestMode = known(requestValue, "request_body_mode", REQUEST_MODES);
      responseMode = known(responseValue, "response_body_mode", RESPONSE_MODES);
      if (requestMode == BodySendMode.STREAMED && !pc.getSendBodyWithoutWaitingForHeaderResponse()) {
        throw new Unsupported("request_body_mode: STREAMED needs "
            + "send_body_without_waiting_for_header_response: true (the pick depends on the body, "
            + "so the headers are answered after it); or use FULL_DUPLEX_STREAMED or BUFFERED");
      }
    } else {
      requestMode = settings.assumedRequestMode;
      responseMode = settings.assumedResponseMode;
    }
    if (requestMode == BodySendMode.NONE) {
      throw new Unsupported("request_body_mode: NONE (Envoy's default when the setting is "
          + "absent): the pick depends on the request body; use FULL_DUPLEX_STREAMED, BUFFERED or "
          + "STREAMED");
    }
  }

  /** The body modes served, as Envoy's configuration spells them. */
  static final String REQUEST_MODES = "FULL_DUPLEX_STREAMED, BUFFERED or STREAMED";
  static final String RESPONSE_MODES =
      "FULL_DUPLEX_STREAMED, STREAMED, BUFFERED, BUFFERED_PARTIAL or NONE";

  /** Upstream's GRPC body mode (Envoy 1.37), newer than the Envoy API classes in use here. */
  static final int GRPC_BODY_MODE = 5;

  /**
   * The body mode of {@code value}, one this server serves; otherwise the stream is refused
   * naming {@code setting} and the mode as Envoy's configuration spells it.
   */
  private static BodySendMode known(int value, String setting, String served) {
    BodySendMode mode = BodySendMode.forNumber(value);
    if (mode != null) {
      return mode;
    }
    if (value == GRPC_BODY_MODE) {
      // the body as gRPC messages of the proxied call: an OpenAI request is JSON over HTTP
      throw new Unsupported(setting + ": GRPC is not supported: the server reads the body as "
          + "the HTTP request's JSON; use " + served);
    }
    throw new Unsupported(setting + ": the mode numbered " + value + " is unknown to this "
        + "server; use " + served);
  }

  private void send(ProcessingResponse r) {
    out.onNext(r);
  }

  private void fail(Status s) {
    phase = Phase.CLOSED;
    body = null;
    out.onError(s.asRuntimeException());
    end(new IOException("ext_proc stream failed: " + s.getCode() + ": " + s.getDescription()));
  }

  /**
   * Frees the stream, once: an unfinished decision fails with {@code cause} ({@code null}: the
   * stream ended normally, so only a decision still open fails).
   */
  private void end(@Nullable Throwable cause) {
    if (ended) {
      return;
    }
    ended = true;
    phase = Phase.CLOSED;
    body = null;
    usage = null;
    RoutingDecision d = decision;
    if (d != null) {
      // a finished decision ignores this; an open one must not stay in flight
      d.onFailure(cause != null ? cause : new IOException("ext_proc stream ended before the answer"));
    }
    awaiting = null;
    onEnd.run();
  }

  /**
   * A message that breaks the order of the protocol. Only called once the stream's first message
   * set the body modes: a request body or trailers opening the stream are refused as
   * request_header_mode SKIP, a response body or trailers before the response headers as
   * response_header_mode SKIP, and request or response headers are taken in that phase, so the
   * mode named is always one Envoy announced or the server assumed.
   */
  private ExtProcMessages.MalformedMessage unexpected(String what) {
    return new ExtProcMessages.MalformedMessage(what + " is not expected in phase " + phase
        + " (request_body_mode: " + requestMode + ")");
  }

  /** No response headers came yet: a response message now means Envoy skips them. */
  private boolean beforeResponseHeaders() {
    return phase == Phase.REQUEST_HEADERS || phase == Phase.REQUEST_BODY
        || phase == Phase.AWAIT_RESPONSE;
  }

  /**
   * Envoy's filter sends an answer's body or trailers without its headers only with
   * response_header_mode SKIP (it then closes the stream after the request when it sends no body
   * either, which cannot be told from an answer cut short). Without the headers the answer's
   * status is unknown, so the decision cannot be ended as what the answer was.
   */
  private static Unsupported responseHeadersSkipped(String what) {
    return new Unsupported("response_header_mode SKIP: Envoy sent " + what + " without the "
        + "response headers, whose status ends the pick (a 2xx completes it, a 5xx or 429 fails "
        + "it); set response_header_mode: SEND for the epp4j ext_proc filter");
  }

  private static String fieldName(ProcessingRequest msg) {
    return switch (msg.getRequestCase()) {
      case REQUEST_BODY -> "request_body";
      case REQUEST_TRAILERS -> "request_trailers";
      default -> msg.getRequestCase().name().toLowerCase(Locale.ROOT);
    };
  }

  private static boolean isRequestMessage(ProcessingRequest msg) {
    return switch (msg.getRequestCase()) {
      case REQUEST_HEADERS, REQUEST_BODY, REQUEST_TRAILERS -> true;
      default -> false;
    };
  }

  private static boolean buffered(BodySendMode mode) {
    return mode == BodySendMode.BUFFERED || mode == BodySendMode.BUFFERED_PARTIAL;
  }

  /** The answer's status code, 0 when it has none or one that is not 100-999 in ASCII digits. */
  private static int parseStatus(@Nullable String text) {
    long s = asciiNumber(text);
    return s >= 100 && s <= 999 ? (int) s : 0;
  }

  /** The answer's declared length, -1 when it has none or an unreadable one. */
  private static long parseLength(@Nullable String text) {
    return asciiNumber(text);
  }

  /**
   * {@code text} as a number when it is the ASCII digits 0-9 (with blanks around them), as HTTP
   * writes a status code and a content-length; -1 otherwise, also past {@code Long.MAX_VALUE}.
   * Long.parseLong alone also takes a sign and the digits of other scripts ("٢٠٠" read as 200),
   * which no HTTP peer writes.
   */
  private static long asciiNumber(@Nullable String text) {
    if (text == null) {
      return -1;
    }
    int from = 0;
    int to = text.length();
    while (from < to && (text.charAt(from) == ' ' || text.charAt(from) == '\t')) {
      from++;
    }
    while (to > from && (text.charAt(to - 1) == ' ' || text.charAt(to - 1) == '\t')) {
      to--;
    }
    if (from == to) {
      return -1;
    }
    long n = 0;
    for (int i = from; i < to; i++) {
      char c = text.charAt(i);
      if (c < '0' || c > '9' || n > (Long.MAX_VALUE - (c - '0')) / 10) {
        return -1;
      }
      n = n * 10 + (c - '0');
    }
    return n;
  }

  private static String pathOnly(String pathAndQuery) {
    int q = pathAndQuery.indexOf('?');
    return q < 0 ? pathAndQuery : pathAndQuery.substring(0, q);
  }

  /** A protocol setting this server cannot work with; the stream ends with FAILED_PRECONDITION. */
  static final class Unsupported extends RuntimeException {
    private static final long serialVersionUID = 1L;

    Unsupported(String message) {
      super(message, null, false, false);
    }
  }

  /** The request body so far, bounded; the chunks are kept as they came, joined without copying. */
  private static final class BodyCollector {
    private ByteString bytes = ByteString.EMPTY;

    /** Adds a chunk; false when that takes the body past {@code max} bytes. */
    boolean add(ByteString chunk, int max) {
      if ((long) bytes.size() + chunk.size() > max) {
        bytes = ByteString.EMPTY;
        return false;
      }
      bytes = bytes.concat(chunk);
      return true;
    }

    ByteString bytes() {
      return bytes;
    }
  }
}
