#!/usr/bin/python3
"""Numaflow containers as the Python SDK (pynumaflow) builds them.

Each is a gRPC server of grpcio, that is grpc C-core's HTTP/2 rather than
grpc-go's, on a Unix socket, with the SDK's server-info file written once
it listens, serving its protocol the way pynumaflow's synchronous servers
do:

sink         sink.v1.Sink: a handshake first, then per batch the requests
             up to the end-of-transmission marker, the user's handler under
             a lock (one batch at a time, as a handler that holds one sees
             it), one response with every result, then an
             end-of-transmission response. Every message the handler
             accepts is appended to RECORD as one JSON line; a value
             starting with "fail" gets a FAILURE result.
transformer  sourcetransformer.v1.SourceTransform: a handshake first, then
             each request handled in a pool of four threads, its response
             (carrying its id) sent as it is done, in any order. The
             value "drop" is dropped, "fanout" comes back three times,
             anything else once, as it came (RECORD is not used).

The message classes come from the descriptors numaflow-go's generated code
carries (the Go test writes them), so both sides speak the same proto
without protoc.

Usage: pycontainer.py KIND DESCRIPTORS SOCKET SERVER_INFO RECORD
"""

import base64
import json
import os
import queue
import signal
import sys
import threading
from concurrent import futures

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf import empty_pb2, timestamp_pb2  # noqa: F401  (the pool needs them for the protos' imports)

MAX_MESSAGE_SIZE = 64 * 1024 * 1024  # pynumaflow's default
DROP = "U+005C__DROP__"


def message_classes(path):
    with open(path, "rb") as f:
        fds = descriptor_pb2.FileDescriptorSet.FromString(f.read())
    pool = descriptor_pool.Default()
    for fd in fds.file:  # imports first, as the test writes them
        pool.Add(fd)

    def cls(name):
        desc = pool.FindMessageTypeByName(name)
        if hasattr(message_factory, "GetMessageClass"):
            return message_factory.GetMessageClass(desc)
        return message_factory.MessageFactory(pool).GetPrototype(desc)

    return cls


def handshake_first(requests, context, what):
    first = next(requests, None)
    if first is None or not first.HasField("handshake") or not first.handshake.sot:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, what + ": the first request must be the handshake")


def sink(cls, record):
    Response = cls("sink.v1.SinkResponse")
    Result = cls("sink.v1.SinkResponse.Result")
    Handshake = cls("sink.v1.Handshake")
    Status = cls("sink.v1.TransmissionStatus")
    lock = threading.Lock()
    out = open(record, "a")
    success, failure = 0, 1

    def handle(batch):
        results = []
        with lock:
            for r in batch:
                if r.value.startswith(b"fail"):
                    results.append(Result(id=r.id, status=failure, err_msg="refused by the Python sink"))
                    continue
                out.write(json.dumps({
                    "id": r.id,
                    "keys": list(r.keys),
                    "value": base64.b64encode(r.value).decode(),
                    "event_time_ms": r.event_time.ToMilliseconds(),
                    "headers": dict(r.headers),
                }) + "\n")
                results.append(Result(id=r.id, status=success))
            out.flush()
        return results

    def sink_fn(requests, context):
        handshake_first(requests, context, "SinkFn")
        yield Response(handshake=Handshake(sot=True))
        batch = []
        for req in requests:
            if req.HasField("status") and req.status.eot:
                yield Response(results=handle(batch))
                yield Response(status=Status(eot=True))
                batch = []
            else:
                batch.append(req.request)

    return "sink.v1.Sink", "SinkFn", sink_fn, cls("sink.v1.SinkRequest"), Response, cls("sink.v1.ReadyResponse")


def transformer(cls, _record):
    Response = cls("sourcetransformer.v1.SourceTransformResponse")
    Result = cls("sourcetransformer.v1.SourceTransformResponse.Result")
    Handshake = cls("sourcetransformer.v1.Handshake")

    def handle(r):
        if r.value == b"drop":
            return [Result(event_time=r.event_time, tags=[DROP])]
        n = 3 if r.value == b"fanout" else 1
        return [Result(keys=r.keys, value=r.value, event_time=r.event_time) for _ in range(n)]

    def transform_fn(requests, context):
        handshake_first(requests, context, "SourceTransformFn")
        yield Response(handshake=Handshake(sot=True))
        # As pynumaflow's synchronous transformer: a thread reads the
        # requests into a pool, and answers go out as they are done.
        answers = queue.Queue()
        pool = futures.ThreadPoolExecutor(max_workers=4)

        def answer(r):
            try:
                answers.put(Response(id=r.id, results=handle(r)))
            except Exception as e:  # noqa: BLE001  (ends the call with why)
                answers.put(e)

        def read():
            try:
                for req in requests:
                    pool.submit(answer, req.request)
            except Exception as e:  # noqa: BLE001  (the stream failed)
                answers.put(e)
            finally:
                pool.shutdown(wait=True)
                answers.put(None)

        threading.Thread(target=read, daemon=True).start()
        while True:
            a = answers.get()
            if a is None:
                return
            if isinstance(a, Exception):
                context.abort(grpc.StatusCode.INTERNAL, "SourceTransformFn: " + repr(a))
            yield a

    return ("sourcetransformer.v1.SourceTransform", "SourceTransformFn", transform_fn,
            cls("sourcetransformer.v1.SourceTransformRequest"), Response, cls("sourcetransformer.v1.ReadyResponse"))


def main():
    kind, descriptors, sock, server_info, record = sys.argv[1:6]
    cls = message_classes(descriptors)
    service, method, fn, Request, Response, Ready = {"sink": sink, "transformer": transformer}[kind](cls, record)
    handler = grpc.method_handlers_generic_handler(service, {
        method: grpc.stream_stream_rpc_method_handler(
            fn, request_deserializer=Request.FromString, response_serializer=Response.SerializeToString),
        "IsReady": grpc.unary_unary_rpc_method_handler(
            lambda _req, _ctx: Ready(ready=True),
            request_deserializer=empty_pb2.Empty.FromString, response_serializer=Ready.SerializeToString),
    })
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=[
        ("grpc.max_send_message_length", MAX_MESSAGE_SIZE),
        ("grpc.max_receive_message_length", MAX_MESSAGE_SIZE),
    ])
    server.add_generic_rpc_handlers((handler,))
    if os.path.exists(sock):
        os.remove(sock)
    server.add_insecure_port("unix://" + sock)
    server.start()
    with open(server_info, "w") as f:
        f.write(json.dumps({
            "protocol": "uds",
            "language": "python",
            "minimum_numaflow_version": "1.4.0-z",
            "version": "0.10.0",
            "metadata": {},
        }) + "U+005C__END__")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    server.stop(5).wait()


if __name__ == "__main__":
    main()
