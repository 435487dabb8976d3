// Package udmap calls a Numaflow map UDF container (spec.udf of a Numaflow
// MonoVertex, any Numaflow SDK map, unchanged) over its Unix-socket gRPC
// protocol, as a transformer stage after the source transformer.
//
// The container says in its server-info file (mapper-server-info in
// MV_UDS_DIR) which of the three map modes it serves, and the mode picks
// the socket and the protocol on the one bidirectional MapFn stream, as in
// numaflow-core (rust/numaflow-core/src/mapper/map/{unary,batch,stream}.rs):
//
//   - unary (map.sock): requests tagged with ids, any number in flight, one
//     response per id in whatever order the container finishes them;
//   - batch (batchmap.sock): a batch of requests then an EOT status, one
//     response per id, then the container's EOT; one batch at a time;
//   - stream (mapstream.sock): requests tagged with ids, any number in
//     flight, several responses per id, each carrying results, ended by an
//     EOT status carrying that id.
//
// Numaflow's rules for what a map returns are kept: a result tagged
// "U+005C__DROP__" is left out (all left out means the input was dropped
// on purpose); one tagged "U+005C__NACK__" hands the input back to the
// source with the delay of its nack options; one tagged "U+005C__FAIL__"
// (numaflow-core's per-message failure) fails that input so it is retried;
// the event time and headers stay the input's (a map cannot set them); user
// metadata is what the map returned and system metadata the input's, which
// a map may read but not change.
package udmap

import (
	"context"
	"fmt"

	mappb "github.com/numaproj/numaflow-go/pkg/apis/proto/map/v1"
	"github.com/numaproj/numaflow-go/pkg/mapper"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/monovertex/monovertex/adapters/internal/udconn"
	"github.com/monovertex/monovertex/runner"
)

// The tags by which a map UDF drops an output, hands its input back to the
// source, or fails its input ("U+005C__DROP__", "U+005C__NACK__",
// "U+005C__FAIL__"). numaflow-go v0.12 has no helper for the last; the
// data plane honours it (numaflow-core src/message.rs, Message::failed).
var (
	DropTag = mapper.DROP
	NackTag = mapper.NACK
	FailTag = udconn.FailTag
)

// Config holds the udmap settings, the udconn.Settings every Numaflow
// adapter shares, for callers outside the adapters that build one with New.
type Config struct {
	udconn.Settings
}

func init() { udconn.RegisterTransformer("udmap", New) }

// Transformer is a runner.Transformer backed by a Numaflow map UDF
// container. Concurrent calls share one MapFn stream; in unary and stream
// mode the container works on all their messages at once, in batch mode
// the calls take turns, one batch on the stream at a time.
type Transformer struct {
	udconn.StreamTransformer[*stream]
	mode  udconn.MapMode
	batch chan struct{} // batch mode: held by the call whose batch is on the stream
}

var (
	_ runner.EachTransformer = (*Transformer)(nil)
	_ runner.Readier         = (*Transformer)(nil)
	_ runner.OutputStreamer  = (*Transformer)(nil)
)

// StreamsOutputs reports whether the container is a stream map, whose
// outputs Numaflow numbers on from their input's index.
func (t *Transformer) StreamsOutputs() bool { return t.mode == udconn.StreamMap }

var _ runner.Connector = (*Transformer)(nil)

// New returns the map transformer; Connect waits for its container.
func New(ctx context.Context, set udconn.Settings, log *zap.SugaredLogger) (*Transformer, error) {
	if log == nil {
		log = zap.NewNop().Sugar()
	}
	t := &Transformer{batch: make(chan struct{}, 1)}
	// The socket is the mode's, known from the server-info file.
	t.Init(ctx, udconn.MapEndpoint(set.Dir, udconn.UnaryMap), set, isReady, log)
	return t, nil
}

// Connect waits for the map container's server-info file to learn its
// mode, then for the container to be up and compatible (both up to
// MV_UDF_STARTUP_TIMEOUT), and connects to the socket of that mode.
func (t *Transformer) Connect(ctx context.Context) error {
	if t.Conn != nil {
		return nil
	}
	set := t.Settings()
	mode, err := udconn.ReadMapMode(ctx, set, t.Log)
	if err != nil {
		return err
	}
	t.mode = mode
	t.Log = t.Log.With("map_mode", string(mode))
	// A restarted container is reconnected on the same socket: Kubernetes
	// restarts it from the same image, so in the same mode.
	return t.ConnectTo(ctx, udconn.MapEndpoint(set.Dir, mode))
}

func isReady(ctx context.Context, cc grpc.ClientConnInterface) (bool, error) {
	return udconn.IsReady(mappb.NewMapClient(cc).IsReady(ctx, &emptypb.Empty{}))
}

// Mode is the map mode the container declared.
func (t *Transformer) Mode() udconn.MapMode { return t.mode }

var _ runner.Sidecar = (*Transformer)(nil)

// Transform sends every message and waits for all their results. A broken
// stream fails the whole call, and the engine retries it; the next call
// waits for the container to come back.
func (t *Transformer) Transform(ctx context.Context, msgs []*runner.Message) ([]runner.TransformResult, error) {
	return udconn.Collect(ctx, msgs, t.TransformEach)
}

// TransformEach is Transform handing each message's results to done as
// they come (a batch map's, once the whole batch is answered): the
// container answered, so it had the whole request, and the message's
// payload is not read again. A broken stream fails the messages still
// waiting for theirs; those answered keep their results, as numaflow-core
// redrives only the messages in flight (below).
//
// What Numaflow does on a map UDF error, for comparison: numaflow-go
// answers a handler panic with a gRPC error that ends the MapFn stream
// (pkg/mapper/service.go handleRequest and MapFn, and the same in
// batchmapper and mapstreamer) and stops its server, so Kubernetes
// restarts the container. numaflow-core turns any error on the stream into
// a redrive: every message in flight on it is sent again after the
// client reconnected (mapper/map.rs map_redrive_error, unary.rs
// UserDefinedUnaryMap::unary, batch.rs MapBatchTask and
// UserDefinedBatchMap::batch, stream.rs MapStreamTask), without using the
// retry budget. Here that is the call's error for the messages without
// an answer (a batch map's whole batch), with a reconnect through
// udconn.Conn.
func (t *Transformer) TransformEach(ctx context.Context, msgs []*runner.Message, done func(k int, r runner.TransformResult)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(msgs) == 0 {
		return nil
	}
	limit := t.Conn.MaxMessageSize()
	reqs := make([]*mappb.MapRequest, len(msgs))
	sending := 0
	for k, m := range msgs {
		req := request(m, t.NextID())
		if n := proto.Size(req); n+64 > limit {
			done(k, runner.TransformResult{Err: runner.Permanent(fmt.Errorf("udmap: message %s is %d bytes, more than MV_UDF_MAX_MESSAGE_SIZE=%d allows", m.ID, n, limit))})
			continue
		}
		reqs[k] = req
		sending++
	}
	if sending == 0 {
		return nil
	}
	batch := t.mode == udconn.BatchMap
	if batch {
		select {
		case t.batch <- struct{}{}:
			defer func() { <-t.batch }()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	st, err := t.stream(ctx)
	if err != nil {
		return fmt.Errorf("udmap: %w", err)
	}
	ids := make([]string, 0, sending)
	defer func() { st.waiting.Forget(ids) }()
	var eot <-chan struct{}
	if batch {
		eot = st.beginBatch()
	}
	inflight := t.InFlight
	if batch {
		inflight = nil // one batch at a time is the bound
	}
	claim := inflight.Claim()
	defer claim.Close()
	// A batch's results are handed over only once the whole batch is
	// answered: numaflow-core's batch map sends the whole batch again when
	// its stream breaks (mapper/map/batch.rs MapBatchTask), so the
	// container sees whole batches only.
	type answer struct {
		k   int
		res runner.TransformResult
	}
	var whole []answer
	x := udconn.NewExchange(sending, claim, st, func(r reply) {
		res := result(msgs[r.k], r.results)
		udconn.GiveBuffers(&res, r.bufs...)
		if batch {
			whole = append(whole, answer{r.k, res})
			return
		}
		done(r.k, res)
	}, func(err error) error { return t.broken(st, err) })
	if err := t.send(ctx, st, x, reqs, &ids); err != nil {
		return err
	}
	var canceled func()
	if batch {
		if err := st.Send(&mappb.MapRequest{Status: &mappb.TransmissionStatus{Eot: true}}); err != nil {
			return x.Broken(err)
		}
		// The container still works on this batch and will end it with an
		// EOT the next batch would take for its own: a call given up
		// starts the next batch on a new stream.
		canceled = func() { t.reset(st) }
	}
	// The receiver closes eot only once every result of the batch is in
	// the replies.
	if err := x.Await(ctx, eot, t.Conn.CallTimeout(), sending, canceled); err != nil {
		return err
	}
	for _, a := range whole {
		done(a.k, a.res)
	}
	return nil
}

// send sends the requests of reqs that are not nil on st, each once x
// lets it out, recording their ids.
func (t *Transformer) send(ctx context.Context, st *stream, x *udconn.Exchange[reply], reqs []*mappb.MapRequest, ids *[]string) error {
	for k, req := range reqs {
		if req == nil {
			continue
		}
		err := x.Send(ctx, func() error {
			st.waiting.Add(req.GetId(), &waiter{k: k, ch: x.Replies()})
			*ids = append(*ids, req.GetId())
			return st.Send(req)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func request(m *runner.Message, id string) *mappb.MapRequest {
	r := &mappb.MapRequest_Request{Keys: m.Keys, Value: m.Value, Headers: m.Headers, Metadata: udconn.MetadataToProto(m.Metadata)}
	if !m.EventTime.IsZero() {
		r.EventTime = timestamppb.New(m.EventTime)
	}
	// runner.Message has no watermark: the request leaves it unset.
	return &mappb.MapRequest{Request: r, Id: id}
}

// result turns the results of one input into the engine's result, by
// numaflow-core's rules (mapper/map.rs UserDefinedMessage, message.rs
// dropped/nacked/failed, sinker/sink.rs and pipeline/isb/writer.rs for what
// happens to nacked and dropped outputs; see udconn.TransformResult). A
// map cannot set an output's event time or headers: they stay empty, so
// the engine fills them from the input.
func result(in *runner.Message, results []*mappb.MapResponse_Result) runner.TransformResult {
	return udconn.TransformResult(in, results, "udmap: the map UDF", DropTag, NackTag, nil)
}

// broken marks the stream and the connection failed and says so.
func (t *Transformer) broken(st *stream, err error) error {
	t.Cur.Drop(st)
	return fmt.Errorf("udmap: MapFn stream (%s) broke: %w", t.mode, st.Break(err))
}

// reset ends the stream, so the next call opens a new one, without
// blaming the container.
func (t *Transformer) reset(st *stream) {
	st.Reset(errReset)
	t.Cur.Drop(st)
}

// stream returns the stream of the current connection, opening it (with
// the handshake) when there is none.
func (t *Transformer) stream(ctx context.Context) (*stream, error) {
	return udconn.OpenCurrent(ctx, t.Parent, t.Conn, &t.Cur, mapFn, func(s *udconn.Stream[mappb.MapRequest, mappb.MapResponse]) *stream {
		return newStream(s, t.mode, t.Log)
	})
}
