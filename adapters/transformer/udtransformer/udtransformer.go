// Package udtransformer calls a Numaflow source-transformer container (any
// Numaflow SDK transformer, unchanged) over its Unix-socket gRPC protocol:
// one bidirectional SourceTransformFn stream opened with a handshake,
// requests tagged with ids, and responses matched back by id in whatever
// order the container finishes them. The socket is sourcetransform.sock in
// MV_UDS_DIR.
package udtransformer

import (
	"context"
	"fmt"

	stpb "github.com/numaproj/numaflow-go/pkg/apis/proto/sourcetransform/v1"
	"github.com/numaproj/numaflow-go/pkg/sourcetransformer"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/monovertex/monovertex/adapters/internal/udconn"
	"github.com/monovertex/monovertex/internal/payloadpool"
	"github.com/monovertex/monovertex/runner"
)

// The tags by which a Numaflow transformer drops an output, hands its input
// back to the source, or fails its input ("U+005C__DROP__",
// "U+005C__NACK__", "U+005C__FAIL__"). numaflow-go v0.12 has no helper for
// the last; the data plane honours it (numaflow-core src/message.rs
// Message::failed, src/transformer.rs).
var (
	DropTag = sourcetransformer.DROP
	NackTag = sourcetransformer.NACK
	FailTag = udconn.FailTag
)

// Config holds the udtransformer settings, the udconn.Settings every
// Numaflow adapter shares, for callers outside the adapters that build one
// with New.
type Config struct {
	udconn.Settings
}

func init() { udconn.RegisterTransformer("udtransformer", New) }

// Transformer is a runner.Transformer backed by a Numaflow transformer
// container. Concurrent calls share one stream; the container works on all
// their messages at once.
type Transformer struct {
	udconn.StreamTransformer[*stream]
}

var (
	_ runner.EachTransformer = (*Transformer)(nil)
	_ runner.Readier         = (*Transformer)(nil)
)

var _ runner.Connector = (*Transformer)(nil)

// New returns the transformer; Connect waits for its container.
func New(ctx context.Context, set udconn.Settings, log *zap.SugaredLogger) (*Transformer, error) {
	if log == nil {
		log = zap.NewNop().Sugar()
	}
	t := &Transformer{}
	t.Init(ctx, udconn.TransformerEndpoint(set.Dir), set, isReady, log)
	return t, nil
}

// Connect waits for the transformer container to be up and compatible
// (up to MV_UDF_STARTUP_TIMEOUT) and connects to it.
func (t *Transformer) Connect(ctx context.Context) error {
	return t.ConnectTo(ctx, udconn.TransformerEndpoint(t.Settings().Dir))
}

func isReady(ctx context.Context, cc grpc.ClientConnInterface) (bool, error) {
	return udconn.IsReady(stpb.NewSourceTransformClient(cc).IsReady(ctx, &emptypb.Empty{}))
}

var _ runner.Sidecar = (*Transformer)(nil)

// reply is one response routed to the call that sent its request.
type reply struct {
	k    int // index in the call's messages
	resp *stpb.SourceTransformResponse
	buf  *payloadpool.Buffer // what the outputs' values alias, or nil
}

// sourceTransformFn is the SourceTransformFn protocol, opened with a handshake.
var sourceTransformFn = udconn.NewProtocol[stpb.SourceTransformRequest, stpb.SourceTransformResponse]("SourceTransformFn", stpb.NewSourceTransformClient, stpb.SourceTransformClient.SourceTransformFn)

// stream is one SourceTransformFn stream after its handshake, with the
// calls waiting for responses on it.
type stream struct {
	*udconn.Stream[stpb.SourceTransformRequest, stpb.SourceTransformResponse]
	waiting udconn.Waiters[waiter]
}

type waiter struct {
	k  int
	ch chan<- reply
}

// Transform sends every message and waits for all their responses. A
// broken stream fails the whole call; the next call waits for the
// container to come back.
func (t *Transformer) Transform(ctx context.Context, msgs []*runner.Message) ([]runner.TransformResult, error) {
	return udconn.Collect(ctx, msgs, t.TransformEach)
}

// TransformEach is Transform handing each result to done as its response
// comes: the container answered, so it had the whole request, and the
// message's payload is not read again (gRPC keeps no copy to replay: the
// stream is committed by its handshake's answer). A broken stream fails
// the messages still waiting for theirs; those answered keep their
// results, as numaflow-core sends again only what was in flight.
func (t *Transformer) TransformEach(ctx context.Context, msgs []*runner.Message, done func(k int, r runner.TransformResult)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(msgs) == 0 {
		return nil
	}
	st, err := t.stream(ctx)
	if err != nil {
		return fmt.Errorf("udtransformer: %w", err)
	}
	ids := make([]string, 0, len(msgs))
	defer func() { st.waiting.Forget(ids) }()
	limit := t.Conn.MaxMessageSize()
	claim := t.InFlight.Claim()
	defer claim.Close()
	x := udconn.NewExchange(len(msgs), claim, st, func(r reply) {
		res := result(msgs[r.k], r.resp)
		udconn.GiveBuffers(&res, r.buf)
		done(r.k, res)
	}, func(err error) error { return t.broken(st, err) })
	for k, m := range msgs {
		id := t.NextID()
		req := request(m, id)
		if n := proto.Size(req); n+64 > limit {
			done(k, runner.TransformResult{Err: runner.Permanent(fmt.Errorf("udtransformer: message %s is %d bytes, more than MV_UDF_MAX_MESSAGE_SIZE=%d allows", m.ID, n, limit))})
			continue
		}
		err := x.Send(ctx, func() error {
			st.waiting.Add(id, waiter{k: k, ch: x.Replies()})
			ids = append(ids, id)
			return st.Send(req)
		})
		if err != nil {
			return err
		}
	}
	return x.Await(ctx, nil, t.Conn.CallTimeout(), len(msgs), nil)
}

// requestBlock holds the three messages of one request, allocated
// together: this runs once per datum.
type requestBlock struct {
	req stpb.SourceTransformRequest
	r   stpb.SourceTransformRequest_Request
	ts  timestamppb.Timestamp
}

func request(m *runner.Message, id string) *stpb.SourceTransformRequest {
	b := new(requestBlock)
	b.r = stpb.SourceTransformRequest_Request{Keys: m.Keys, Value: m.Value, Headers: m.Headers, Id: id,
		Metadata: udconn.MetadataToProto(m.Metadata)}
	if !m.EventTime.IsZero() {
		b.ts.Seconds, b.ts.Nanos = m.EventTime.Unix(), int32(m.EventTime.Nanosecond())
		b.r.EventTime = &b.ts
	}
	b.req.Request = &b.r
	return &b.req
}

// result turns one response into the engine's result, by numaflow-core's
// rules (src/transformer.rs, transformer/user_defined.rs, message.rs; see
// udconn.TransformResult): the outputs carry the event time the container
// chose, besides what every transformer output carries.
func result(in *runner.Message, resp *stpb.SourceTransformResponse) runner.TransformResult {
	return udconn.TransformResult(in, resp.GetResults(), "udtransformer: the transformer", DropTag, NackTag,
		func(o *runner.Message, r *stpb.SourceTransformResponse_Result) {
			if et := r.GetEventTime(); et != nil {
				o.EventTime = et.AsTime()
			}
		})
}

// broken marks the stream and the connection failed and says so.
func (t *Transformer) broken(st *stream, err error) error {
	t.Cur.Drop(st)
	return fmt.Errorf("udtransformer: SourceTransformFn stream broke: %w", st.Break(err))
}

// stream returns the stream of the current connection, opening it (with
// the handshake) when there is none.
func (t *Transformer) stream(ctx context.Context) (*stream, error) {
	return udconn.OpenCurrent(ctx, t.Parent, t.Conn, &t.Cur, sourceTransformFn, func(s *udconn.Stream[stpb.SourceTransformRequest, stpb.SourceTransformResponse]) *stream {
		st := &stream{Stream: s}
		go st.ReceiveOwned(func(resp *stpb.SourceTransformResponse, buf *payloadpool.Buffer) error {
			w, ok := st.waiting.Get(resp.GetId(), true)
			if !ok {
				// A call that gave up (its context ended) or a container
				// answering twice: either way nobody waits for it.
				t.Log.Debugw("dropping a transformer response nobody waits for", "id", resp.GetId())
				buf.Release()
				return nil
			}
			w.ch <- reply{k: w.k, resp: resp, buf: buf}
			return nil
		})
		return st
	})
}
