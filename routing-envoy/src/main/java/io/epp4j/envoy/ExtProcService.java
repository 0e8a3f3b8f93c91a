package io.epp4j.envoy;

import io.envoyproxy.envoy.service.ext_proc.v3.ExternalProcessorGrpc;
import io.envoyproxy.envoy.service.ext_proc.v3.ProcessingRequest;
import io.envoyproxy.envoy.service.ext_proc.v3.ProcessingResponse;
import io.grpc.stub.ServerCallStreamObserver;
import io.grpc.stub.StreamObserver;

/**
 * The {@code envoy.service.ext_proc.v3.ExternalProcessor} service: one {@link ProcessStream} per
 * {@code Process} call, counted while it lives so that a shutdown can wait for the requests in
 * flight. Thread-safe.
 */
final class ExtProcService extends ExternalProcessorGrpc.ExternalProcessorImplBase {
  private final ProcessStream.Settings settings;
  private final LiveStreams live;

  ExtProcService(ProcessStream.Settings settings, LiveStreams live) {
    this.settings = settings;
    this.live = live;
  }

  @Override
  public StreamObserver<ProcessingRequest> process(
      StreamObserver<ProcessingResponse> responseObserver) {
    ServerCallStreamObserver<ProcessingResponse> out =
        (ServerCallStreamObserver<ProcessingResponse>) responseObserver;
    // inbound messages are requested by the stream itself, one at a time (flow control)
    out.disableAutoRequest();
    ProcessStream[] self = new ProcessStream[1];
    ProcessStream stream = new ProcessStream(settings, out, () -> live.closed(self[0]));
    self[0] = stream;
    live.opened(stream);
    stream.start();
    return stream;
  }
}
