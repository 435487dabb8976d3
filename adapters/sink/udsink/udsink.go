// Package udsink writes to a Numaflow user-defined sink container (any
// Numaflow SDK sink, unchanged) over its Unix-socket gRPC protocol: a
// SinkFn stream opened with a handshake, each batch sent as requests closed
// by an EOT message, and one result per message id coming back before the
// server's EOT. As MV_SINK it talks to sink.sock, as MV_FALLBACK_SINK to
// fb-sink.sock and as the onSuccess sink to ons-sink.sock, all in MV_UDS_DIR.
//
// Like Numaflow's data plane, it keeps one SinkFn stream per container and
// writes one batch at a time on it: numaflow-go runs one handler call per
// open stream, and a user's handler need not be safe for concurrent calls.
// MV_UDSINK_STREAMS opens more streams for containers that are.
package udsink

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	sinkpb "github.com/numaproj/numaflow-go/pkg/apis/proto/sink/v1"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/monovertex/monovertex/adapters/internal/udconn"
	"github.com/monovertex/monovertex/runner"
)

// MaxStreams is the largest MV_UDSINK_STREAMS allowed.
const MaxStreams = 64

// Config holds the udsink settings: the ones every Numaflow adapter shares,
// and how many batches may be in the container at once.
type Config struct {
	udconn.Settings
	Streams int `envconfig:"MV_UDSINK_STREAMS" default:"1" desc:"SinkFn streams to a user-defined sink container, each carrying one batch at a time; 1 is what Numaflow does, more only for sink handlers that are safe for concurrent calls"`
}

// Validate checks the shared Numaflow settings and the stream count.
func (c *Config) Validate(role runner.Role) error {
	if err := c.Settings.Validate(role); err != nil {
		return err
	}
	if c.Streams < 1 || c.Streams > MaxStreams {
		return &runner.ConfigError{Var: "MV_UDSINK_STREAMS", Value: strconv.Itoa(c.Streams),
			Reason: fmt.Sprintf("must be between 1 and %d; 1 (one batch at a time, as Numaflow writes) is safe for every sink container", MaxStreams)}
	}
	return nil
}

func init() {
	runner.RegisterSink("udsink", func(ctx context.Context, env runner.Env, cfg *Config) (runner.Sink, error) {
		cfg.Settings.Connection = env.Connection
		s, err := New(ctx, *cfg, env.Role, env.Logger)
		if err != nil {
			return nil, err
		}
		s.ReportErrorsTo(env.Errors, env.Role)
		return s, nil
	})
}

// closeDrain bounds how long Close waits for a stream to end on its own
// before cancelling it.
const closeDrain = 2 * time.Second

// Sink is a runner.Sink backed by a Numaflow sink container. Writes share
// at most Config.Streams SinkFn streams over one connection, one batch per
// stream at a time; further Writes wait for a stream.
type Sink struct {
	// conn is set by Connect; ep and set are what it needs, reporter and
	// stage where the connection reports runtime errors.
	conn     *udconn.Conn
	ep       udconn.Endpoint
	set      udconn.Settings
	reporter runner.ErrorReporter
	stage    runner.Role
	log      *zap.SugaredLogger
	name     string

	ctx    context.Context // parent of every stream; ends at Close
	cancel context.CancelFunc

	// slots holds one token per batch on a stream. A token is taken before
	// the stream and given back only when the batch is over, even when its
	// caller gave up earlier, so the container never sees more batches at
	// once than there are slots. Blocked senders on a channel are woken in
	// order, so waiting Writes go out first come, first served.
	slots   chan struct{}
	closing chan struct{} // closed by Close, to wake Writes waiting for a slot

	mu     sync.Mutex
	idle   []*stream
	closed bool
	busy   sync.WaitGroup // batches on a stream, possibly for a caller that gave up

	warnOnce sync.Map // warnings logged once, by key
}

var (
	_ runner.Sink         = (*Sink)(nil)
	_ runner.Readier      = (*Sink)(nil)
	_ runner.MetadataSink = (*Sink)(nil)
)

// PassesMetadata marks the sink as one whose container reads Numaflow's
// system metadata, so the engine stamps sink/retry_count before every
// write, as numaflow-core does.
func (s *Sink) PassesMetadata() {}

var _ runner.Connector = (*Sink)(nil)

// New returns a sink for the container that serves role (the sink, the
// fallback sink or the onSuccess sink); Connect waits for it.
func New(ctx context.Context, cfg Config, role runner.Role, log *zap.SugaredLogger) (*Sink, error) {
	switch role {
	case runner.RoleSink, runner.RoleFallbackSink, runner.RoleOnSuccessSink:
	default:
		return nil, fmt.Errorf("udsink: cannot be built as the %s; it serves the sink, fallback sink and onSuccess sink", role)
	}
	if log == nil {
		log = zap.NewNop().Sugar()
	}
	streams := cfg.Streams
	if streams < 1 {
		streams = 1 // a hand-built Config without the envconfig default
	}
	ep := udconn.SinkEndpointFor(cfg.Dir, role)
	s := &Sink{ep: ep, set: cfg.Settings, log: log, name: ep.Name, slots: make(chan struct{}, streams), closing: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	return s, nil
}

// Connect waits for the sink container to be up and compatible (up to
// MV_UDF_STARTUP_TIMEOUT) and connects to it.
func (s *Sink) Connect(ctx context.Context) error {
	if s.conn != nil {
		return nil
	}
	conn, err := udconn.Connect(ctx, s.ep, s.set, s.log, isReady)
	if err != nil {
		return err
	}
	conn.ReportTo(s.reporter, s.stage)
	s.conn = conn
	return nil
}

func isReady(ctx context.Context, cc grpc.ClientConnInterface) (bool, error) {
	return udconn.IsReady(sinkpb.NewSinkClient(cc).IsReady(ctx, &emptypb.Empty{}))
}

// Ready reports whether the sink container is connected and ready.
func (s *Sink) Ready(ctx context.Context) error { return s.conn.Ready(ctx) }

var _ runner.Sidecar = (*Sink)(nil)

// SidecarContainer is the user container's name, for /sidecar-livez.
func (s *Sink) SidecarContainer() string { return s.ep.Numaflow }

// Write sends msgs as one batch (or a few, when IDs repeat) and returns the
// container's result for each. It waits for a free stream first, as long
// as ctx allows. A broken stream fails the whole call, and the next call
// waits for the container to come back.
func (s *Sink) Write(ctx context.Context, msgs []*runner.Message) ([]runner.WriteResult, error) {
	results := make([]runner.WriteResult, len(msgs))
	if len(msgs) == 0 {
		return results, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	reqs := make([]*sinkpb.SinkRequest, len(msgs))
	blocks := make([]requestBlock, len(msgs))
	var send []int
	limit := s.conn.MaxMessageSize()
	for i, m := range msgs {
		reqs[i] = blocks[i].fill(m)
		// A message the container cannot take would break the stream on
		// every retry: fail it alone, for good.
		if n := proto.Size(reqs[i]); n+64 > limit {
			results[i] = runner.WriteResult{Status: runner.WriteFailed, Err: runner.Permanent(fmt.Errorf(
				"udsink: message %s is %d bytes, more than MV_UDF_MAX_MESSAGE_SIZE=%d allows", m.ID, n, limit))}
			continue
		}
		send = append(send, i)
	}
	for _, round := range uniqueRounds(msgs, send) {
		if err := s.exchange(ctx, msgs, reqs, round, results); err != nil {
			return nil, fmt.Errorf("udsink: write %d messages to the %s container: %w", len(msgs), s.name, err)
		}
	}
	return results, nil
}

// uniqueRounds splits the message indexes into groups without repeated IDs,
// because results are matched to requests by ID.
func uniqueRounds(msgs []*runner.Message, idx []int) [][]int {
	// Repeated IDs are rare: one pass with a sized set answers the usual
	// case without the per-round maps below, which cost (hack/bench/RESULTS.md).
	ids := make(map[string]struct{}, len(idx))
	for _, i := range idx {
		ids[msgs[i].ID] = struct{}{}
	}
	if len(ids) == len(idx) {
		if len(idx) == 0 {
			return nil
		}
		return [][]int{idx}
	}
	var rounds [][]int
	var seen []map[string]bool
	for _, i := range idx {
		id := msgs[i].ID
		r := 0
		for r < len(rounds) && seen[r][id] {
			r++
		}
		if r == len(rounds) {
			rounds = append(rounds, nil)
			seen = append(seen, map[string]bool{})
		}
		rounds[r] = append(rounds[r], i)
		seen[r][id] = true
	}
	return rounds
}

// requestBlock holds the three messages of one request, so that a batch
// allocates them once for all its messages rather than three times for
// each (at 1 KiB they were a seventh of the objects the runner allocated,
// in a hack/bench heap profile).
type requestBlock struct {
	req sinkpb.SinkRequest
	r   sinkpb.SinkRequest_Request
	ts  timestamppb.Timestamp
}

// fill makes the block m's request and returns it.
func (b *requestBlock) fill(m *runner.Message) *sinkpb.SinkRequest {
	b.r.Keys, b.r.Value, b.r.Id, b.r.Headers, b.r.Metadata = m.Keys, m.Value, m.ID, m.Headers, udconn.MetadataToProto(m.Metadata)
	if !m.EventTime.IsZero() {
		b.ts.Seconds, b.ts.Nanos = m.EventTime.Unix(), int32(m.EventTime.Nanosecond())
		b.r.EventTime = &b.ts
	}
	b.req.Request = &b.r
	return &b.req
}

// acquire waits for a free slot on the container, for ctx, or for Close.
func (s *Sink) acquire(ctx context.Context) error {
	select {
	case s.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.closing:
		return udconn.ErrClosed
	}
}

func (s *Sink) release() { <-s.slots }

// exchange writes the messages at idx over one stream and fills their
// results. It runs the stream work in its own goroutine, so a caller whose
// context ends returns at once while the batch completes in the background
// and the stream stays usable.
func (s *Sink) exchange(ctx context.Context, msgs []*runner.Message, reqs []*sinkpb.SinkRequest, idx []int, results []runner.WriteResult) error {
	if err := s.acquire(ctx); err != nil {
		return err
	}
	handedOff := false
	defer func() {
		if !handedOff {
			s.release()
		}
	}()
	cc, gen, err := s.conn.Get(ctx)
	if err != nil {
		return err
	}
	st, err := s.take(ctx, cc, gen)
	if err != nil {
		return err
	}
	type outcome struct {
		res   []runner.WriteResult
		serve []string
		err   error
	}
	done := make(chan outcome, 1)
	handedOff = true
	go func() {
		defer s.busy.Done()
		defer s.release()
		res, serve, broken, err := s.batch(st, msgs, reqs, idx)
		if broken != nil {
			err = st.Break(broken)
		} else {
			s.put(st)
		}
		done <- outcome{res, serve, err}
	}()
	// The call timeout starts now that the batch is on the stream: time
	// spent waiting for a slot is the engine's backlog, not a container
	// that stopped answering.
	timer := time.NewTimer(s.conn.CallTimeout())
	defer timer.Stop()
	select {
	case o := <-done:
		if o.err != nil {
			return o.err
		}
		if len(o.serve) > 0 {
			return s.serveError(o.serve)
		}
		for k, i := range idx {
			results[i] = o.res[k]
		}
		return nil
	case <-timer.C:
		// A container that stops answering without closing the stream:
		// reset it, so the batch goroutine reports it broken and the engine
		// retries the batch on a new stream.
		st.Cancel()
		o := <-done
		return fmt.Errorf("no results for %d messages within MV_UDF_CALL_TIMEOUT=%v; the stream was reset: %w", len(idx), s.conn.CallTimeout(), o.err)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// serveError is what a SERVE answer gets. SERVE asks for the message to be
// put in the serving store, which only a Numaflow pipeline with serving
// has. numaflow-core's mono vertex builds its sink writer without one
// (monovertex.rs passes serving_store None to create_sink_writer), so its
// write_to_serving_store fails with "Response contains serving messages but
// no serving store is configured" (sinker/sink.rs), the whole batch is
// nacked and the vertex shuts down with that error; a fallback or onSuccess
// sink answering SERVE stops it the same way. This runner does the same: a
// Fatal error, nothing of the batch acked, the source redelivers it after
// the restart.
func (s *Sink) serveError(ids []string) error {
	return runner.Fatal(fmt.Errorf("the %s container answered SERVE for %d messages (first %s), but a mono vertex has no serving store to put them in, so the runner stops as Numaflow does; "+
		"change the sink to answer SUCCESS (or ON_SUCCESS to forward the result to an onSuccess sink)", s.name, len(ids), strings.Join(firstN(ids, 3), ", ")))
}

// sinkFn is the SinkFn protocol: opened with a handshake, which
// numaflow-go answers at once; MV_UDF_CALL_TIMEOUT bounds it like any
// other answer.
var sinkFn = udconn.NewProtocol[sinkpb.SinkRequest, sinkpb.SinkResponse]("SinkFn", sinkpb.NewSinkClient, sinkpb.SinkClient.SinkFn).BoundHandshake()

// stream is one SinkFn stream after its handshake.
type stream = udconn.Stream[sinkpb.SinkRequest, sinkpb.SinkResponse]

// take returns an idle stream of the current connection or opens one, and
// counts the batch about to use it in s.busy. The caller holds a slot, so
// at most cap(s.slots) streams exist.
func (s *Sink) take(ctx context.Context, cc grpc.ClientConnInterface, gen uint64) (*stream, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, udconn.ErrClosed
	}
	// Counted under the lock that Close takes to set closed, so Close's
	// Wait never races with this Add.
	s.busy.Add(1)
	for len(s.idle) > 0 {
		st := s.idle[len(s.idle)-1]
		s.idle = s.idle[:len(s.idle)-1]
		if st.Gen() == gen {
			s.mu.Unlock()
			return st, nil
		}
		go closeStream(st) // from a connection that was replaced
	}
	s.mu.Unlock()
	st, err := udconn.Open(ctx, s.ctx, s.conn, cc, gen, sinkFn)
	if err != nil {
		s.busy.Done()
		return nil, err
	}
	return st, nil
}

func (s *Sink) put(st *stream) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		// Closed here, before the batch counts as done, so Close waits for it.
		closeStream(st)
		return
	}
	s.idle = append(s.idle, st)
	s.mu.Unlock()
}

// batch sends one batch and reads its results. serve lists the ids the
// container answered SERVE. broken is set when the stream can no longer be
// used; err alone means the container answered wrongly but the stream is
// still in step.
func (s *Sink) batch(st *stream, msgs []*runner.Message, reqs []*sinkpb.SinkRequest, idx []int) (res []runner.WriteResult, serve []string, broken, err error) {
	for _, i := range idx {
		if err := st.Send(reqs[i]); err != nil {
			return nil, nil, streamErr("send", endStatus(st, err)), nil
		}
	}
	if err := st.Send(&sinkpb.SinkRequest{Status: &sinkpb.TransmissionStatus{Eot: true}}); err != nil {
		return nil, nil, streamErr("send EOT", endStatus(st, err)), nil
	}
	pos := make(map[string]int, len(idx))
	for k, i := range idx {
		pos[msgs[i].ID] = k
	}
	res = make([]runner.WriteResult, len(idx))
	seen := make([]bool, len(idx))
	var problems []string
	for {
		resp, err := st.Recv()
		if err != nil {
			return nil, nil, streamErr("receive results", err), nil
		}
		for _, r := range resp.GetResults() {
			k, ok := pos[r.GetId()]
			switch {
			case !ok:
				problems = append(problems, fmt.Sprintf("a result for unknown id %q", r.GetId()))
				continue
			case seen[k]:
				problems = append(problems, fmt.Sprintf("two results for id %q", r.GetId()))
				continue
			}
			seen[k] = true
			if r.GetStatus() == sinkpb.Status_SERVE {
				serve = append(serve, r.GetId())
				continue
			}
			res[k] = s.result(r, msgs[idx[k]])
		}
		if resp.GetStatus().GetEot() {
			break
		}
	}
	var missing []string
	for k, ok := range seen {
		if !ok {
			missing = append(missing, msgs[idx[k]].ID)
		}
	}
	if len(missing) > 0 {
		problems = append(problems, fmt.Sprintf("no result for %d of %d messages (first %s)", len(missing), len(idx), firstN(missing, 3)))
	}
	if len(problems) > 0 {
		// Nothing of this batch is reported written: a sink that answers
		// for the wrong messages cannot be trusted to have written the right ones.
		return nil, nil, nil, fmt.Errorf("protocol error: the container answered with %s", strings.Join(firstN(problems, 3), "; "))
	}
	return res, serve, nil, nil
}

// endStatus is why a send failed: for a stream the container ended, the
// status it ended it with (a handler panic's UDF_EXECUTION_ERROR with its
// stack), which gRPC gives to Recv rather than to Send. This goroutine is
// the stream's only receiver, and the stream is over, so the receives end
// once the answers still queued are read; a second bounds the wait all
// the same.
func endStatus(st *stream, err error) error {
	if !errors.Is(err, udconn.ErrContainerClosedStream) {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for {
		if _, rerr := st.RecvWithin(ctx); rerr != nil {
			if errors.Is(rerr, udconn.ErrContainerClosedStream) || errors.Is(rerr, context.DeadlineExceeded) {
				return err
			}
			return rerr
		}
	}
}

func firstN(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("... %d more", len(s)-n))
	}
	return s
}

func streamErr(what string, err error) error {
	return fmt.Errorf("SinkFn stream broke (%s): %w", what, err)
}

// result maps one container result for m to the engine's, with the
// meaning numaflow-core gives each status (sinker/actor.rs,
// write_messages_with_retry). SERVE is handled by batch, see serveError.
func (s *Sink) result(r *sinkpb.SinkResponse_Result, m *runner.Message) runner.WriteResult {
	switch st := r.GetStatus(); st {
	case sinkpb.Status_SUCCESS:
		// A serve_response next to SUCCESS is ignored, as numaflow-core does.
		return runner.WriteResult{Status: runner.WriteOK}
	case sinkpb.Status_FALLBACK:
		return runner.WriteResult{Status: runner.WriteFallback}
	case sinkpb.Status_FAILURE:
		msg := r.GetErrMsg()
		if msg == "" {
			msg = "no error message"
		}
		return runner.WriteResult{Status: runner.WriteFailed, Err: fmt.Errorf("udsink: the %s container failed message %s: %s", s.name, r.GetId(), msg)}
	case sinkpb.Status_ON_SUCCESS:
		return runner.WriteResult{Status: runner.WriteOnSuccess, OnSuccess: onSuccessMessage(m, r.GetOnSuccessMsg())}
	case sinkpb.Status_NACK:
		opts := r.GetNackOptions()
		reason := opts.GetReason()
		if reason == "" {
			reason = "no reason given"
		}
		return runner.WriteResult{Status: runner.WriteNack, NackOptions: udconn.NackFromProto(opts),
			Err: fmt.Errorf("udsink: the %s container nacked message %s (%s); handing it back to the source", s.name, r.GetId(), reason)}
	default:
		return runner.WriteResult{Status: runner.WriteFailed, Err: runner.Permanent(fmt.Errorf(
			"udsink: the %s container answered status %d for message %s, which this runner does not know (SUCCESS, FAILURE, FALLBACK, SERVE, ON_SUCCESS, NACK); update the runner or the sink's SDK so they match", s.name, int32(st), r.GetId()))}
	}
}

// onSuccessMessage builds what the onSuccess sink gets for m, exactly as
// numaflow-core's sinker/actor.rs does for ResponseStatusFromSink::OnSuccess:
// without on_success_msg the original goes (nil here); with it, its value
// and keys replace the original's (even when empty), its user metadata
// replaces the original's when it carries metadata, and the original's
// system metadata and previous vertex stay. Everything else (ID, event
// time, headers, tags, offset) is the original's.
func onSuccessMessage(m *runner.Message, ons *sinkpb.SinkResponse_Result_Message) *runner.Message {
	if ons == nil {
		return nil
	}
	out := *m
	out.Value = ons.GetValue()
	out.Keys = ons.GetKeys()
	// numaflow-core checks whether the metadata field is present, not
	// whether it carries anything: present but empty clears the user metadata.
	var user map[string]map[string][]byte
	if md := ons.GetMetadata(); md != nil {
		if got := udconn.MetadataFromProto(md); got != nil {
			user = got.User
		}
		if user == nil {
			user = map[string]map[string][]byte{}
		}
	}
	if m.Metadata != nil {
		md := m.Metadata.Clone()
		if ons.GetMetadata() != nil {
			md.User = user
		}
		out.Metadata = md
	} else {
		if user == nil {
			user = map[string]map[string][]byte{}
		}
		out.Metadata = &runner.Metadata{User: user}
	}
	return &out
}

// closeStream ends an idle stream the way the SDK servers expect (a closed
// send side reads as EOF on their end, never as an error that would stop
// them), then cancels it.
func closeStream(st *stream) {
	defer st.Cancel()
	if err := st.CloseSend(); err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeDrain)
	defer cancel()
	for {
		if _, err := st.RecvWithin(ctx); err != nil {
			return
		}
	}
}

// Close waits for running batches (until ctx ends), closes the streams and
// the connection. Writes still waiting for a stream return at once.
func (s *Sink) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.closing)
	idle := s.idle
	s.idle = nil
	s.mu.Unlock()

	busy := make(chan struct{})
	go func() { s.busy.Wait(); close(busy) }()
	select {
	case <-busy:
	case <-ctx.Done():
	}
	var wg sync.WaitGroup
	for _, st := range idle {
		wg.Add(1)
		go func() { defer wg.Done(); closeStream(st) }()
	}
	wg.Wait()
	s.cancel()
	if s.conn == nil {
		return nil // never connected
	}
	return s.conn.Close()
}

// ReportErrorsTo makes the adapter report its container's runtime errors
// (broken streams, failed calls, handler panics) to r as errors of stage.
func (s *Sink) ReportErrorsTo(r runner.ErrorReporter, stage runner.Role) {
	s.reporter, s.stage = r, stage
	if s.conn != nil {
		s.conn.ReportTo(r, stage)
	}
}
