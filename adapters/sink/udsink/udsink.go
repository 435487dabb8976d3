// Package udsink writes to a Numaflow user-defined sink container (any
// Numaflow SDK sink, unchanged) over its Unix-socket gRPC protocol: a
// SinkFn stream opened with a handshake, each batch sent as requests closed
// by an EOT message, and one result per message id coming back before the
// server's EOT. As MV_SINK it talks to sink.sock; as MV_FALLBACK_SINK to
// fb-sink.sock, both in MV_UDS_DIR.
package udsink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	sinkpb "github.com/numaproj/numaflow-go/pkg/apis/proto/sink/v1"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/monovertex/monovertex/adapters/internal/serverinfo"
	"github.com/monovertex/monovertex/runner"
)

// Config holds the udsink settings; they are shared by every Numaflow adapter.
type Config struct {
	serverinfo.Settings
}

func init() {
	runner.RegisterSink(runner.Plugin[runner.Sink]{
		Name:   "udsink",
		Config: func() any { return &Config{} },
		New: func(ctx context.Context, env runner.Env, cfg any) (runner.Sink, error) {
			s, err := New(ctx, cfg.(*Config).Settings, env.Role == runner.RoleFallbackSink, env.Logger)
			if err != nil {
				return nil, err // an untyped nil, so callers' nil checks hold
			}
			return s, nil
		},
	})
}

// closeDrain bounds how long Close waits for a stream to end on its own
// before cancelling it.
const closeDrain = 2 * time.Second

// Sink is a runner.Sink backed by a Numaflow sink container. Concurrent
// Writes use separate SinkFn streams over one connection, so the container
// always has a batch to work on.
type Sink struct {
	conn *serverinfo.Conn
	log  *zap.SugaredLogger
	name string

	ctx    context.Context // parent of every stream; ends at Close
	cancel context.CancelFunc

	mu     sync.Mutex
	idle   []*stream
	closed bool
	busy   sync.WaitGroup // exchanges running, possibly for a caller that gave up

	warnOnce sync.Map // status -> struct{}: statuses logged once
}

var (
	_ runner.Sink    = (*Sink)(nil)
	_ runner.Readier = (*Sink)(nil)
)

// New waits for the sink container (the fallback sink's when fallback is
// set) to be up and compatible, and connects to it.
func New(ctx context.Context, set serverinfo.Settings, fallback bool, log *zap.SugaredLogger) (*Sink, error) {
	if log == nil {
		log = zap.NewNop().Sugar()
	}
	ep := serverinfo.SinkEndpoint(set.Dir, fallback)
	conn, err := serverinfo.Connect(ctx, ep, set, log, isReady)
	if err != nil {
		return nil, err // the runner names the adapter
	}
	s := &Sink{conn: conn, log: log, name: ep.Name}
	s.ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	return s, nil
}

func isReady(ctx context.Context, cc *grpc.ClientConn) (bool, error) {
	r, err := sinkpb.NewSinkClient(cc).IsReady(ctx, &emptypb.Empty{})
	if err != nil {
		return false, err
	}
	return r.GetReady(), nil
}

// Ready reports whether the sink container is connected and ready.
func (s *Sink) Ready(ctx context.Context) error { return s.conn.Ready(ctx) }

// Write sends msgs as one batch (or a few, when IDs repeat) and returns the
// container's result for each. A broken stream fails the whole call, and
// the next call waits for the container to come back.
func (s *Sink) Write(ctx context.Context, msgs []*runner.Message) ([]runner.WriteResult, error) {
	results := make([]runner.WriteResult, len(msgs))
	if len(msgs) == 0 {
		return results, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	reqs := make([]*sinkpb.SinkRequest, len(msgs))
	var send []int
	limit := s.conn.MaxMessageSize()
	for i, m := range msgs {
		reqs[i] = request(m)
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

func request(m *runner.Message) *sinkpb.SinkRequest {
	r := &sinkpb.SinkRequest_Request{Keys: m.Keys, Value: m.Value, Id: m.ID, Headers: m.Headers}
	if !m.EventTime.IsZero() {
		r.EventTime = timestamppb.New(m.EventTime)
	}
	return &sinkpb.SinkRequest{Request: r}
}

// exchange writes the messages at idx over one stream and fills their
// results. It runs the stream work in its own goroutine, so a caller whose
// context ends returns at once while the batch completes in the background
// and the stream stays usable.
func (s *Sink) exchange(ctx context.Context, msgs []*runner.Message, reqs []*sinkpb.SinkRequest, idx []int, results []runner.WriteResult) error {
	cc, gen, err := s.conn.Get(ctx)
	if err != nil {
		return err
	}
	st, err := s.take(ctx, cc, gen)
	if err != nil {
		return err
	}
	type outcome struct {
		res []runner.WriteResult
		err error
	}
	done := make(chan outcome, 1)
	s.busy.Add(1)
	go func() {
		defer s.busy.Done()
		res, broken, err := s.batch(st, msgs, reqs, idx)
		if broken != nil {
			st.cancel()
			s.conn.Fail(gen, broken)
			err = broken
		} else {
			s.put(st)
		}
		done <- outcome{res, err}
	}()
	timer := time.NewTimer(s.conn.CallTimeout())
	defer timer.Stop()
	select {
	case o := <-done:
		if o.err != nil {
			return o.err
		}
		for k, i := range idx {
			results[i] = o.res[k]
		}
		return nil
	case <-timer.C:
		// A container that stops answering without closing the stream:
		// reset it, so the batch goroutine reports it broken and the engine
		// retries the batch on a new stream.
		st.cancel()
		o := <-done
		return fmt.Errorf("udsink: no results for %d messages within MV_UDF_CALL_TIMEOUT=%v; the stream was reset: %w", len(idx), s.conn.CallTimeout(), o.err)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stream is one SinkFn stream after its handshake.
type stream struct {
	gen    uint64
	c      sinkpb.Sink_SinkFnClient
	cancel context.CancelFunc
}

// take returns an idle stream of the current connection or opens one.
func (s *Sink) take(ctx context.Context, cc *grpc.ClientConn, gen uint64) (*stream, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, serverinfo.ErrClosed
	}
	for len(s.idle) > 0 {
		st := s.idle[len(s.idle)-1]
		s.idle = s.idle[:len(s.idle)-1]
		if st.gen == gen {
			s.mu.Unlock()
			return st, nil
		}
		go closeStream(st) // from a connection that was replaced
	}
	s.mu.Unlock()
	sctx, cancel := context.WithCancel(s.ctx)
	c, err := sinkpb.NewSinkClient(cc).SinkFn(sctx)
	if err == nil {
		err = c.Send(&sinkpb.SinkRequest{Handshake: &sinkpb.Handshake{Sot: true}})
	}
	var resp *sinkpb.SinkResponse
	if err == nil {
		resp, err = recvCtx(ctx, c)
	}
	if err == nil && !resp.GetHandshake().GetSot() {
		err = fmt.Errorf("protocol error: the first response is not a handshake: %v", resp)
	}
	if err != nil {
		cancel()
		if ctx.Err() == nil {
			s.conn.Fail(gen, err)
		}
		return nil, fmt.Errorf("open SinkFn stream: %w", err)
	}
	return &stream{gen: gen, c: c, cancel: cancel}, nil
}

func (s *Sink) put(st *stream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		go closeStream(st)
		return
	}
	s.idle = append(s.idle, st)
}

// recvCtx receives one response, giving up when ctx ends.
func recvCtx(ctx context.Context, c sinkpb.Sink_SinkFnClient) (*sinkpb.SinkResponse, error) {
	type r struct {
		resp *sinkpb.SinkResponse
		err  error
	}
	ch := make(chan r, 1)
	go func() {
		resp, err := c.Recv()
		ch <- r{resp, err}
	}()
	select {
	case x := <-ch:
		return x.resp, x.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// batch sends one batch and reads its results. broken is set when the
// stream can no longer be used; err alone means the container answered
// wrongly but the stream is still in step.
func (s *Sink) batch(st *stream, msgs []*runner.Message, reqs []*sinkpb.SinkRequest, idx []int) (res []runner.WriteResult, broken, err error) {
	for _, i := range idx {
		if err := st.c.Send(reqs[i]); err != nil {
			return nil, streamErr("send", err), nil
		}
	}
	if err := st.c.Send(&sinkpb.SinkRequest{Status: &sinkpb.TransmissionStatus{Eot: true}}); err != nil {
		return nil, streamErr("send EOT", err), nil
	}
	pos := make(map[string]int, len(idx))
	for k, i := range idx {
		pos[msgs[i].ID] = k
	}
	res = make([]runner.WriteResult, len(idx))
	seen := make([]bool, len(idx))
	var problems []string
	for {
		resp, err := st.c.Recv()
		if err != nil {
			return nil, streamErr("receive results", err), nil
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
			res[k] = s.result(r)
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
		return nil, nil, fmt.Errorf("protocol error: the container answered with %s", strings.Join(firstN(problems, 3), "; "))
	}
	return res, nil, nil
}

func firstN(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("... %d more", len(s)-n))
	}
	return s
}

func streamErr(what string, err error) error {
	if errors.Is(err, io.EOF) {
		err = errors.New("the container closed the stream")
	}
	return fmt.Errorf("SinkFn stream broke (%s): %w", what, err)
}

// result maps one container result to the engine's. SERVE and ON_SUCCESS
// mean the message was written (the serving store and on-success sink are
// not part of a mono vertex); NACK asks for redelivery, which the engine
// does by retrying; anything else is refused for good.
func (s *Sink) result(r *sinkpb.SinkResponse_Result) runner.WriteResult {
	switch st := r.GetStatus(); st {
	case sinkpb.Status_SUCCESS:
		return runner.WriteResult{Status: runner.WriteOK}
	case sinkpb.Status_FALLBACK:
		return runner.WriteResult{Status: runner.WriteFallback}
	case sinkpb.Status_FAILURE:
		msg := r.GetErrMsg()
		if msg == "" {
			msg = "no error message"
		}
		return runner.WriteResult{Status: runner.WriteFailed, Err: fmt.Errorf("udsink: the %s container failed message %s: %s", s.name, r.GetId(), msg)}
	case sinkpb.Status_SERVE, sinkpb.Status_ON_SUCCESS:
		if _, loaded := s.warnOnce.LoadOrStore(st, struct{}{}); !loaded {
			s.log.Warnw("the sink container answered a status a mono vertex has no target for; counting the message as written", "status", st.String())
		}
		return runner.WriteResult{Status: runner.WriteOK}
	case sinkpb.Status_NACK:
		reason := r.GetNackOptions().GetReason()
		if reason == "" {
			reason = "no reason given"
		}
		return runner.WriteResult{Status: runner.WriteFailed, Err: fmt.Errorf("udsink: the %s container nacked message %s (%s); retrying it", s.name, r.GetId(), reason)}
	default:
		return runner.WriteResult{Status: runner.WriteFailed, Err: runner.Permanent(fmt.Errorf(
			"udsink: the %s container answered status %d for message %s, which this runner does not know (SUCCESS, FAILURE, FALLBACK, SERVE, ON_SUCCESS, NACK)", s.name, int32(st), r.GetId()))}
	}
}

// closeStream ends an idle stream the way the SDK servers expect (a closed
// send side reads as EOF on their end, never as an error that would stop
// them), then cancels it.
func closeStream(st *stream) {
	defer st.cancel()
	if err := st.c.CloseSend(); err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeDrain)
	defer cancel()
	for {
		if _, err := recvCtx(ctx, st.c); err != nil {
			return
		}
	}
}

// Close waits for running batches (until ctx ends), closes the streams and
// the connection.
func (s *Sink) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
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
	return s.conn.Close()
}
