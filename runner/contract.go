package runner

import (
	"context"
	"net"
	"net/http"
	"time"
)

// This file is the adapter contract: the three kinds of adapter, the
// optional capabilities the engine looks for with a type assertion (doing
// without them otherwise), and what the runner hands an adapter in return.
//
// Who implements which optional capability (docs/writing-an-adapter.md
// says what the engine does with each):
//
//	capability          kind         implemented by
//	Nacker              source       udsource, jetstream, kafka, nats, sqs, http
//	PendingReader       source       udsource, jetstream, kafka, sqs, http
//	GroupProgressReader source       jetstream, kafka
//	ReadStopper         source       http, nats
//	RedeliversInFlight  source       udsource, jetstream
//	DropNotifier        source       jetstream
//	PartitionedSource   source       kafka, udsource
//	NumaflowOffsetter   source       http (MV_MESSAGE_IDS=numaflow)
//	ResultTaker         source       http (MV_HTTP_RESPONSE=result)
//	PortGuard           source       http
//	EachTransformer     transformer  udtransformer, udmap
//	OutputStreamer      transformer  udmap
//	FilterPlacement     filter       filter
//	MetadataSink        sink         udsink
//	Connector           any          udsource, udtransformer, udmap, udsink, jetstream (source and
//	                                 sink), kafka (source and sink), nats, sqs (source and sink)
//	Readier             any          udsource, udtransformer, udmap, udsink, http, jetstream (source
//	                                 and sink), kafka (source and sink), nats, log, cloudevents (both)
//	Sidecar             any          udsource, udtransformer, udmap, udsink
//
// The runner hands every adapter, through Env: a Connection (an
// SDKReporter for Numaflow containers) and an ErrorReporter.

// Source produces messages and takes acknowledgements for them.
type Source interface {
	// Read returns up to max messages, waiting at most timeout for the batch
	// to fill; it may return fewer, or none. A finite source returns io.EOF
	// once everything has been read. Errors other than Fatal ones are retried.
	Read(ctx context.Context, max int, timeout time.Duration) ([]*Message, error)
	// Ack confirms messages that reached a final state. The engine calls it
	// only after every output of each message was written, fallback-written
	// or dropped on purpose; calls may come out of read order. Each
	// message carries the ID Read gave it again, whatever the engine
	// named it on its way (MV_MESSAGE_IDS=numaflow, a stage's output); it
	// may be a copy of the one Read returned (a call cut short may still
	// read the original), so find messages by ID or Offset, not pointer.
	Ack(ctx context.Context, msgs []*Message) error
	// Close releases the source after the engine stopped using it.
	Close(ctx context.Context) error
}

// Nacker is implemented by sources that can take messages back for
// redelivery sooner than their ack deadline would.
type Nacker interface {
	// Nack hands msgs back with what the stage or sink that nacked them
	// asked for (the zero Nack when the engine hands them back itself,
	// such as at shutdown). A source honours n.Delay where it can, and
	// n.MaxDeliveries where it counts deliveries. As in Ack, each message
	// carries the ID Read gave it.
	Nack(ctx context.Context, msgs []*Message, n Nack) error
}

// PendingReader is implemented by sources that know how many messages are
// waiting to be read (and read but unacked, where the source counts those).
// A negative count means unknown.
type PendingReader interface {
	Pending(ctx context.Context) (int64, error)
}

// ReadStopper is implemented by sources that want to know when the engine
// stops reading for good (shutdown, or a fatal error), before in-flight work
// drains: the HTTP source then turns callers away at once instead of letting
// them wait for a read that will not come.
type ReadStopper interface {
	StopReading()
}

// Connector is implemented by adapters that talk to a peer (a broker, a
// queue service, a Numaflow container), as Benthos' inputs and outputs
// do: their constructor only checks settings and builds clients, and
// Connect does what needs the peer (dialling, looking up a topic, a
// stream or a queue, waiting for a container's server-info file).
//
// The engine calls Connect before the first Read, Ack, Transform or
// Write, and before the first Ready, of every adapter that implements it
// (source, stages, sink, fallback and onSuccess sink, each in its own
// loop), retrying a failed Connect with backoff (100ms doubling to 5s, or
// the wait RetryAfter asked for) until it succeeds or the run's context
// ends. It logs each failed attempt, counts it in
// monovtx_connection_failed_total and reports its success as Up, so an
// adapter reports to its Env.Connection only what happens after Connect
// (Lost, and its client's own reconnects); until every adapter is
// connected /readyz is not ready and /status shows the adapter as
// connecting with the last attempt's error. A Connect that returns a
// Fatal error, or a *ConfigError (a setting the peer shows cannot work,
// such as a stream that does not exist), stops the start-up: the runner
// exits 1, or 2 with the error's one line.
//
// Connect may be called again after it failed, so it must leave nothing
// half made behind, and a call after it succeeded does nothing. The
// engine never calls it concurrently with itself or with Close; Close
// must work whether or not Connect ever succeeded. Once connected, an
// adapter's client rides out outages on its own.
type Connector interface {
	Connect(ctx context.Context) error
}

// Readier is implemented by adapters that can tell whether they can take
// work now; /readyz is ready only while every Readier returns nil.
type Readier interface {
	Ready(ctx context.Context) error
}

// Sidecar is implemented by adapters whose peer is a user container in the
// pod (a Numaflow SDK server on a Unix socket). /sidecar-livez asks only
// these, as numaflow-core's asks only its user containers: a broker being
// away must not get the pod's containers restarted.
type Sidecar interface {
	Readier
	// SidecarContainer is the container's name in a Numaflow MonoVertex
	// pod (udsource, transformer, udf, udsink, fb-udsink, ons-udsink).
	SidecarContainer() string
}

// Transformer maps each input message to zero, one or many outputs.
type Transformer interface {
	// Transform returns one result per input, in input order. A non-nil error
	// means the whole call failed and the batch is retried.
	Transform(ctx context.Context, msgs []*Message) ([]TransformResult, error)
	// Close releases the transformer.
	Close(ctx context.Context) error
}

// EachTransformer is implemented by transformers that can hand over each
// message's result as it arrives, before the rest of the call's: the engine
// then frees an input's payload as soon as outputs that do not share it
// replace it, instead of once the whole batch is back, and a call that
// fails part way keeps the results it already delivered.
type EachTransformer interface {
	Transformer
	// TransformEach transforms msgs as Transform does, calling done(k, r)
	// with message k's result from the goroutine that called TransformEach,
	// at most once per message, and only once the transformer will not
	// read msgs[k] (its payload) again. A non-nil error fails the messages
	// that got no result, which the engine retries as a failed call; those
	// that got one keep it.
	TransformEach(ctx context.Context, msgs []*Message, done func(k int, r TransformResult)) error
}

// Sink writes messages and reports a result for each.
type Sink interface {
	// Write returns one result per message, in order. A non-nil error means
	// the whole call failed: every message is retried.
	Write(ctx context.Context, msgs []*Message) ([]WriteResult, error)
	// Close flushes and releases the sink.
	Close(ctx context.Context) error
}

// MetadataSink is implemented by sinks that pass Numaflow's metadata on to
// their container (udsink). For them the engine writes the sink retry
// count into each message's system metadata before every write, as
// Numaflow does (group "sink", key "retry_count", decimal, 0 first).
type MetadataSink interface {
	Sink
	PassesMetadata()
}

// OutputStreamer is implemented by a map UDF stage that reports whether
// its container streams its outputs (Numaflow's map stream mode), which
// numbers them differently under NumaflowIDs.
type OutputStreamer interface {
	StreamsOutputs() bool
}

// RedeliversInFlight is implemented by sources that may deliver a message
// again while an earlier delivery of it is still being processed: a
// Numaflow user-defined source whose Read hands out every offset not yet
// acked, or JetStream once a message's ack wait ran out (a source that
// keeps state per delivery also implements DropNotifier). The engine then
// drops such a delivery, as numaflow-core's tracker does (source.rs: a
// DuplicateInflight insert is logged, counted in monovtx_dropped_total and
// not forwarded): the delivery in flight is acked or nacked for both, so
// the message is written once per time it is processed, not once per
// delivery. Sources that never deliver a message twice while it is in
// flight (the generator, Kafka, which tracks its records, the HTTP
// source, which refuses an ID in flight) need not implement it, and pay
// nothing for the check.
type RedeliversInFlight interface {
	RedeliversInFlight() bool
}

// DropNotifier is implemented by sources that keep state for each
// delivery (JetStream's in-progress acks): the engine tells them of a
// delivery it dropped as already in flight, which it never acks or nacks.
type DropNotifier interface {
	Dropped(msgs []*Message)
}

// PartitionedSource is implemented by sources that read from partitions
// (Kafka, a Numaflow user-defined source). The engine asks it, as it reads
// each message, which one the message came from: the partition labels
// monovtx_read_total (source_partition, as numaflow-core labels it) and,
// under MV_ORDERING, is the message's lane. A source without it reads one
// partition, labelled with the replica, as numaflow-core's sources
// without partitions are.
type PartitionedSource interface {
	// SourcePartition is the partition m, a message this source read,
	// came from; ok is false when it names none.
	SourcePartition(m *Message) (p uint16, ok bool)
}

// NumaflowOffsetter is implemented by sources whose messages numaflow-core
// names by one offset and whose outputs it names from another
// (MV_MESSAGE_IDS=numaflow, see NumaflowIDs): its HTTP source names a
// message <vertex>-<id>-0 but a transformer's outputs
// <vertex>-<id>-<replica>-<index> (source/http.rs). The engine asks it only
// under NumaflowIDs, as a message's batch starts; without it the outputs
// are named from the message's ID.
type NumaflowOffsetter interface {
	// NumaflowOffset is the offset the IDs of m's outputs derive from;
	// m.ID is still the ID this source gave it. "" means that ID.
	NumaflowOffset(m *Message) string
}

// ResultTaker is implemented by sources that answer each input with what
// became of it, such as the HTTP source with MV_HTTP_RESPONSE=result
// (Benthos' sync_response, Numaflow's Serving). Just before the engine
// acks inputs, it hands over, per input, the outputs the sink or the
// fallback sink wrote for it, in the order they were written: none when
// every output was dropped on purpose. Inputs that are nacked get no
// results; their Nack follows as usual.
type ResultTaker interface {
	// TakesResults reports, once when the engine is built, whether the
	// engine should gather results at all; with false it costs nothing.
	TakesResults() bool
	// Results is called before Ack(msgs) with written[i] the outputs of
	// msgs[i]. The outputs' payloads are given back after the ack (see
	// Message.Release): what is kept must be copied before Results returns.
	Results(msgs []*Message, written [][]*Message)
}

// GroupProgressReader is implemented by sources that several replicas
// share (a JetStream durable consumer) and that can tell how many messages
// the whole group has finished so far. From it each replica derives the
// group's processing rate, which per-pod scaling metrics need: a replica's
// own rate times an unknown replica count would not do.
type GroupProgressReader interface {
	GroupProcessed(ctx context.Context) (int64, error)
}

// Connection is where an adapter reports the state of its connection to
// its peer (a Numaflow container, a NATS server, a CloudEvents endpoint),
// the way Benthos' inputs and outputs do: the runner turns the reports
// into the monovtx_connection_* metrics, so a dashboard shows a peer that
// flaps or stays away without reading logs. Adapters that cannot tell
// (an HTTP peer never holds a connection the client could lose) report
// what they can.
type Connection interface {
	// Up reports a connection established (again).
	Up()
	// Failed reports an attempt to connect that failed.
	Failed(err error)
	// Lost reports an established connection that broke.
	Lost(err error)
}

// SDKReporter is a Connection that also takes the SDK of the Numaflow
// container behind it: its language and version from the server-info
// file, and its container type (the file's prefix: sourcer, sinker,
// fb-sinker, ...). It is set again when a restarted container says
// another.
type SDKReporter interface {
	SDK(language, version, container string)
}

// ErrorReporter takes the runtime errors of the containers the adapters
// talk to (a failed call, a broken stream, a handler panic). runner.Env
// hands one to every adapter; the engine owns what is behind it.
type ErrorReporter interface {
	ReportContainerError(ContainerError)
}

// PortGuard is implemented by a source that takes requests on $PORT and
// bounds what its connections may cost below net/http (the http source):
// the runner lets it set the server's limits and hooks and wrap the
// listener before serving starts.
type PortGuard interface {
	GuardPort(srv *http.Server, ln net.Listener) net.Listener
}

// FilterPlacement is implemented by a filter (RegisterFilter) that may
// stand after the other stages instead of first.
type FilterPlacement interface {
	// After reports whether the filter goes after the other stages.
	After() bool
}
