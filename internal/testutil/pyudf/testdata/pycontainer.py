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
             starting with "fail" gets a FAILURE result, one starting
             with "fallback" a FALLBACK result. A batch with a value
             starting with "hold" is written, then not answered until
             RECORD + ".release" exists.
fallback     the sink as a fallback sink serves it: the same, but it
             takes the values starting with "fallback".
transformer  sourcetransformer.v1.SourceTransform: a handshake first, then
             each request handled in a pool of four threads, its response
             (carrying its id) sent as it is done, in any order. A value
             starting with "drop" is dropped, one with "fanout" comes
             back three times, anything else once, as it came (RECORD is
             not used).
map          map.v1.Map in unary mode: as the transformer, a pool of four
             threads answering in any order, with map.v1's DROP tag.
batchmap     map.v1.Map in batch mode, as pynumaflow's batch mapper: the
             requests up to the client's end-of-transmission marker, one
             response per request (its id) once the whole batch is
             handled, then an end-of-transmission response.
source       source.v1.Source over a spool file, RECORD, that the test
             appends messages to (one JSON line each, its value in
             base64); message n is offset str(n) on partition 0. Read,
             ack and nack follow the broker rules the Go SDK test store
             follows: nacked messages come back at once, unacked ones
             after ACK_TIMEOUT seconds ($PYUDF_ACK_TIMEOUT, default 3);
             a nack's delay is not kept. Each acked number is appended to
             RECORD + ".acked", and an ack of offsets never read to
             RECORD + ".never-read-acks". The read handler is not safe to
             call concurrently, like many a user's: a second read while
             one runs is a violation. Its server-info says version
             0.11.0, pynumaflow's first with NackFn.

The sink, the batch map and the source write a line to VIOLATIONS
(RECORD + ".violations") for any concurrency Numaflow would not give them:
a second live sink stream, batch map stream or read while one is open.
The test fails on any. (Requests pipelined on one stream before an EOT
are not seen: each stream is read one request at a time.)

Where these are kinder than pynumaflow: its synchronous transformer and
map share one executor that the first stream to end shuts down, so a
second stream fails, while here each stream has its own pool; its
synchronous servers have four gRPC threads, and its source and batch map
are asyncio servers, while here every kind is a synchronous server with
eight threads, so that the tests' many short-lived clients are served.

The message classes come from the descriptors numaflow-go's generated code
carries (the Go test writes them), so both sides speak the same proto
without protoc.

Usage: pycontainer.py KIND DESCRIPTORS SOCKET SERVER_INFO RECORD

KIND is sink, fallback, transformer, map, batchmap or source.
"""

import base64
import json
import os
import queue
import signal
import sys
import threading
import time
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


def unary(fn, Request, Response):
    return grpc.unary_unary_rpc_method_handler(
        fn, request_deserializer=Request.FromString, response_serializer=Response.SerializeToString)


def stream(fn, Request, Response):
    return grpc.stream_stream_rpc_method_handler(
        fn, request_deserializer=Request.FromString, response_serializer=Response.SerializeToString)


class Exclusive:
    """A section Numaflow never enters twice at once for live streams. An
    entry while a call of another live stream is inside, or waiting to
    be, is written to VIOLATIONS (and still waits its turn, so the test
    sees it rather than a hang); one behind a call whose stream has
    already ended just waits, as a container may finish a cancelled call
    late."""

    def __init__(self, violations, what):
        self.turn = threading.Lock()
        self.state = threading.Lock()  # guards entrants
        self.entrants = []  # contexts of the calls inside or waiting
        self.violations = violations
        self.what = what

    def enter(self, context):
        with self.state:
            if any(other.is_active() for other in self.entrants):
                with open(self.violations, "a") as f:
                    f.write("%s entered while another stream's was open\n" % self.what)
            self.entrants.append(context)
        self.turn.acquire()
        return _Inside(self, context)


class _Inside:
    def __init__(self, ex, context):
        self.ex, self.context = ex, context

    def __enter__(self):
        return self

    def __exit__(self, *_):
        with self.ex.state:
            self.ex.entrants.remove(self.context)
        self.ex.turn.release()


def handshake_first(requests, context, what):
    first = next(requests, None)
    if first is None or not first.HasField("handshake") or not first.handshake.sot:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, what + ": the first request must be the handshake")


def batches(requests):
    """The requests of a batch protocol (sink, batch map) as lists, one per
    end-of-transmission marker of the client."""
    batch = []
    for req in requests:
        if req.HasField("status") and req.status.eot:
            yield batch
            batch = []
        else:
            batch.append(req)


def drop_partial_line(path):
    """Cuts a line a killed sink left half written: its batch was never
    answered, so it comes again."""
    try:
        with open(path, "rb+") as f:
            data = f.read()
            f.truncate(data.rfind(b"\n") + 1)
    except FileNotFoundError:
        pass


def fallback_sink(cls, record, violations):
    return sink(cls, record, violations, answers_fallback=False)


def sink(cls, record, violations, answers_fallback=True):
    Response = cls("sink.v1.SinkResponse")
    Result = cls("sink.v1.SinkResponse.Result")
    Handshake = cls("sink.v1.Handshake")
    Status = cls("sink.v1.TransmissionStatus")
    lock = threading.Lock()
    one_stream = Exclusive(violations, "SinkFn")
    drop_partial_line(record)
    out = open(record, "a")
    success, failure, fallback = 0, 1, 2

    def handle(batch):
        results, lines = [], []
        with lock:
            for r in batch:
                if r.value.startswith(b"fail"):
                    results.append(Result(id=r.id, status=failure, err_msg="refused by the Python sink"))
                    continue
                if answers_fallback and r.value.startswith(b"fallback"):
                    results.append(Result(id=r.id, status=fallback))
                    continue
                lines.append(json.dumps({
                    "id": r.id,
                    "keys": list(r.keys),
                    "value": base64.b64encode(r.value).decode(),
                    "event_time_ms": r.event_time.ToMilliseconds(),
                    "headers": dict(r.headers),
                }) + "\n")
                results.append(Result(id=r.id, status=success))
            out.write("".join(lines))
            out.flush()
            # A batch holding a value that starts with "hold" is written but
            # not answered until RECORD + ".release" exists: a test kills
            # the sink in the middle of a batch for certain.
            if any(r.value.startswith(b"hold") for r in batch):
                while not os.path.exists(record + ".release"):
                    time.sleep(0.01)
        return results

    def sink_fn(requests, context):
        handshake_first(requests, context, "SinkFn")
        yield Response(handshake=Handshake(sot=True))
        with one_stream.enter(context):
            for batch in batches(requests):
                yield Response(results=handle([req.request for req in batch]))
                yield Response(status=Status(eot=True))

    return "sink.v1.Sink", {"SinkFn": stream(sink_fn, cls("sink.v1.SinkRequest"), Response)}, cls("sink.v1.ReadyResponse")


def pooled(Response, handle, ident):
    """A stream function the way pynumaflow's synchronous transformer and
    mapper serve theirs: a thread reads the requests into a pool of four,
    and each answer (the request's id, handle's results) goes out as it is
    done."""

    def fn(requests, context):
        answers = queue.Queue()
        pool = futures.ThreadPoolExecutor(max_workers=4)

        def answer(req):
            try:
                answers.put(Response(id=ident(req), results=handle(req.request)))
            except Exception as e:  # noqa: BLE001  (ends the call with why)
                answers.put(e)

        def read():
            try:
                for req in requests:
                    pool.submit(answer, req)
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
                context.abort(grpc.StatusCode.INTERNAL, repr(a))
            yield a

    return fn


def reference(Result, r, with_event_time):
    """The results the Go SDK reference handlers give: a value starting
    with "drop" dropped, with "fanout" three times, anything else once, as
    it came."""
    extra = {"event_time": r.event_time} if with_event_time else {}
    if r.value.startswith(b"drop"):
        return [Result(tags=[DROP], **extra)]
    n = 3 if r.value.startswith(b"fanout") else 1
    return [Result(keys=r.keys, value=r.value, **extra) for _ in range(n)]


def transformer(cls, _record, _violations):
    Response = cls("sourcetransformer.v1.SourceTransformResponse")
    Result = cls("sourcetransformer.v1.SourceTransformResponse.Result")
    Handshake = cls("sourcetransformer.v1.Handshake")
    serve = pooled(Response, lambda r: reference(Result, r, True), lambda req: req.request.id)

    def transform_fn(requests, context):
        handshake_first(requests, context, "SourceTransformFn")
        yield Response(handshake=Handshake(sot=True))
        yield from serve(requests, context)

    return ("sourcetransformer.v1.SourceTransform",
            {"SourceTransformFn": stream(transform_fn, cls("sourcetransformer.v1.SourceTransformRequest"), Response)},
            cls("sourcetransformer.v1.ReadyResponse"))


def map_unary(cls, _record, _violations):
    Response = cls("map.v1.MapResponse")
    Result = cls("map.v1.MapResponse.Result")
    Handshake = cls("map.v1.Handshake")
    serve = pooled(Response, lambda r: reference(Result, r, False), lambda req: req.id)

    def map_fn(requests, context):
        handshake_first(requests, context, "MapFn")
        yield Response(handshake=Handshake(sot=True))
        yield from serve(requests, context)

    return "map.v1.Map", {"MapFn": stream(map_fn, cls("map.v1.MapRequest"), Response)}, cls("map.v1.ReadyResponse")


def map_batch(cls, _record, violations):
    Response = cls("map.v1.MapResponse")
    Result = cls("map.v1.MapResponse.Result")
    Handshake = cls("map.v1.Handshake")
    Status = cls("map.v1.TransmissionStatus")
    one_stream = Exclusive(violations, "MapFn (batch)")

    def map_fn(requests, context):
        handshake_first(requests, context, "MapFn")
        yield Response(handshake=Handshake(sot=True))
        with one_stream.enter(context):
            for batch in batches(requests):
                for req in batch:
                    yield Response(id=req.id, results=reference(Result, req.request, False))
                yield Response(status=Status(eot=True))

    return "map.v1.Map", {"MapFn": stream(map_fn, cls("map.v1.MapRequest"), Response)}, cls("map.v1.ReadyResponse")


# Seconds an unacked message waits before it is read again.
ACK_TIMEOUT = float(os.environ.get("PYUDF_ACK_TIMEOUT", "3"))
EPOCH_MS = 1_700_000_000_000


class Spool:
    """The source's store: messages the test appends to a file, with a
    broker's redelivery rules."""

    def __init__(self, path):
        self.path = path
        self.read_bytes = 0
        self.produced = 0
        self.values = {}
        self.queue = []
        self.inflight = {}  # n -> when it was read
        self.acked = set()
        self.served = set()  # ever read
        self.acked_log = open(path + ".acked", "a")
        self.lock = threading.Lock()

    def _poll(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self.read_bytes)
                data = f.read()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n") + 1  # a line still being written waits
        for line in data[:end].splitlines():
            n = self.produced
            self.values[n] = base64.b64decode(json.loads(line)["value"])
            self.queue.append(n)
            self.produced += 1
        self.read_bytes += end

    def take(self, count):
        with self.lock:
            self._poll()
            now = time.monotonic()
            for n, at in list(self.inflight.items()):
                if now - at > ACK_TIMEOUT:
                    del self.inflight[n]
                    self.queue.append(n)
            out, self.queue = self.queue[:count], self.queue[count:]
            for n in out:
                self.inflight[n] = now
                self.served.add(n)
            return [(n, self.values[n]) for n in out]

    def ack(self, ns):
        """Acks ns; returns those never served, which no client may ack."""
        never = []
        with self.lock:
            for n in ns:
                if n not in self.served:
                    never.append(n)
                    continue
                self.inflight.pop(n, None)
                if n in self.queue:  # back by its ack timeout, not read yet
                    self.queue.remove(n)
                self.acked.add(n)
                self.acked_log.write("%d\n" % n)
            self.acked_log.flush()
        return never

    def nack(self, ns):
        with self.lock:
            back = [n for n in ns if self.inflight.pop(n, None) is not None]
            self.queue[:0] = back

    def pending(self):
        with self.lock:
            self._poll()
            return self.produced - len(self.acked)


def source(cls, record, violations):
    ReadResponse = cls("source.v1.ReadResponse")
    ReadResult = cls("source.v1.ReadResponse.Result")
    ReadStatus = cls("source.v1.ReadResponse.Status")
    AckResponse = cls("source.v1.AckResponse")
    AckResult = cls("source.v1.AckResponse.Result")
    NackResponse = cls("source.v1.NackResponse")
    NackResult = cls("source.v1.NackResponse.Result")
    PendingResponse = cls("source.v1.PendingResponse")
    PendingResult = cls("source.v1.PendingResponse.Result")
    PartitionsResponse = cls("source.v1.PartitionsResponse")
    PartitionsResult = cls("source.v1.PartitionsResponse.Result")
    Offset = cls("source.v1.Offset")
    Handshake = cls("source.v1.Handshake")
    spool = Spool(record)
    reading = Exclusive(violations, "the read handler")

    def offset_number(o):
        # Not one this source gave (a wrong partition, not a number): never
        # read.
        if o.partition_id != 0 or not o.offset.isdigit():
            return -1
        return int(o.offset)

    def read_handler(context, count, timeout_ms):
        # A user's read: up to count messages, waiting at most timeout_ms
        # for the first; one whose stream is cancelled ends, as
        # pynumaflow's asynchronous handler is cancelled with its call.
        with reading.enter(context):
            deadline = time.monotonic() + timeout_ms / 1000
            while context.is_active():
                got = spool.take(count)
                if got or time.monotonic() >= deadline:
                    return got
                time.sleep(0.01)
            return []

    def message(n, value):
        ts = timestamp_pb2.Timestamp()
        ts.FromMilliseconds(EPOCH_MS + n)
        return ReadResult(payload=value, offset=Offset(offset=str(n).encode(), partition_id=0), event_time=ts,
                          keys=["k%d" % (n % 3)], headers={"n": str(n)})

    def read_fn(requests, context):
        handshake_first(requests, context, "ReadFn")
        yield ReadResponse(status=ReadStatus(eot=False, code=0), handshake=Handshake(sot=True))
        for req in requests:
            for n, value in read_handler(context, req.request.num_records, req.request.timeout_in_ms):
                yield ReadResponse(result=message(n, value), status=ReadStatus(eot=False, code=0))
            yield ReadResponse(status=ReadStatus(eot=True, code=0))

    def ack_fn(requests, context):
        handshake_first(requests, context, "AckFn")
        yield AckResponse(result=AckResult(success=empty_pb2.Empty()), handshake=Handshake(sot=True))
        for req in requests:
            never = spool.ack(offset_number(o) for o in req.request.offsets)
            if never:  # for the test to judge: its own bad input, or a bug
                with open(record + ".never-read-acks", "a") as f:
                    f.write("%s\n" % never)
            yield AckResponse(result=AckResult(success=empty_pb2.Empty()))

    def nack_fn(req, _context):
        # NackOptions' delay is not kept: a nacked message comes back at once.
        spool.nack([offset_number(o) for r in req.request for o in r.offsets])
        return NackResponse(result=NackResult(success=empty_pb2.Empty()))

    return "source.v1.Source", {
        "ReadFn": stream(read_fn, cls("source.v1.ReadRequest"), ReadResponse),
        "AckFn": stream(ack_fn, cls("source.v1.AckRequest"), AckResponse),
        "NackFn": unary(nack_fn, cls("source.v1.NackRequest"), NackResponse),
        "PendingFn": unary(lambda _r, _c: PendingResponse(result=PendingResult(count=spool.pending())),
                           empty_pb2.Empty, PendingResponse),
        "PartitionsFn": unary(lambda _r, _c: PartitionsResponse(result=PartitionsResult(partitions=[0], total_partitions=1)),
                              empty_pb2.Empty, PartitionsResponse),
    }, cls("source.v1.ReadyResponse")


KINDS = {
    "sink": (sink, {}),
    "fallback": (fallback_sink, {}),
    "transformer": (transformer, {}),
    "map": (map_unary, {"MAP_MODE": "unary-map"}),
    "batchmap": (map_batch, {"MAP_MODE": "batch-map"}),
    "source": (source, {}),
}


def main():
    kind, descriptors, sock, server_info, record = sys.argv[1:6]
    cls = message_classes(descriptors)
    build, metadata = KINDS[kind]
    service, methods, Ready = build(cls, record, record + ".violations")
    methods["IsReady"] = unary(lambda _req, _ctx: Ready(ready=True), empty_pb2.Empty, Ready)
    handler = grpc.method_handlers_generic_handler(service, methods)
    # pynumaflow's synchronous servers default to four threads; its
    # asynchronous ones (source, batch map) have no such bound, and a
    # source holds two for its read and ack streams.
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=[
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
            "version": "0.11.0",  # pynumaflow's first with NackFn (Numaflow nacks from 0.11)
            "metadata": metadata,
        }) + "U+005C__END__")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    server.stop(5).wait()


if __name__ == "__main__":
    main()
