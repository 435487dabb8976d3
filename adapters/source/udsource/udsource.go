// Package udsource reads from a Numaflow user-defined source container (any
// Numaflow SDK source, unchanged) over its Unix-socket gRPC protocol: a
// ReadFn stream opened with a handshake where each request asks for
// num_records within timeout_in_ms and the answer ends with an EOT status;
// an AckFn stream, also opened with a handshake, that answers each request
// once; and unary NackFn, PendingFn, PartitionsFn and IsReady. The socket
// is source.sock in MV_UDS_DIR.
package udsource

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/numaproj/numaflow-go/pkg/apis/proto/common"
	sourcepb "github.com/numaproj/numaflow-go/pkg/apis/proto/source/v1"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/monovertex/monovertex/adapters/internal/serverinfo"
	"github.com/monovertex/monovertex/runner"
)

// Config holds the udsource settings; they are shared by every Numaflow adapter.
type Config struct {
	serverinfo.Settings
}

func init() {
	runner.RegisterSource(runner.Plugin[runner.Source]{
		Name:   "udsource",
		Config: func() any { return &Config{} },
		New: func(ctx context.Context, env runner.Env, cfg any) (runner.Source, error) {
			s, err := New(ctx, cfg.(*Config).Settings, env.Logger)
			if err != nil {
				return nil, err // an untyped nil, so callers' nil checks hold
			}
			return s, nil
		},
	})
}

// closeDrain bounds how long Close waits for an unanswered read request.
const closeDrain = 3 * time.Second

// nackReason tells the source why messages come back.
var nackReason = "monovertex: the message could not reach a final state (transformer nack, failed fallback or shutdown)"

// Offset is the source's handle of one message, given back in Ack and Nack.
type Offset struct {
	Value     []byte
	Partition int32
}

// Source is a runner.Source backed by a Numaflow source container.
type Source struct {
	conn *serverinfo.Conn
	log  *zap.SugaredLogger

	ctx    context.Context // parent of the streams; ends at Close
	cancel context.CancelFunc

	readMu sync.Mutex // one Read at a time: requests and answers pair up on the stream
	rd     *readStream

	ackMu sync.Mutex // guards ack (not the round trips)
	ack   *ackStream

	closeOnce sync.Once
}

var (
	_ runner.Source        = (*Source)(nil)
	_ runner.Nacker        = (*Source)(nil)
	_ runner.PendingReader = (*Source)(nil)
	_ runner.Readier       = (*Source)(nil)
)

// New waits for the source container to be up and compatible and connects to it.
func New(ctx context.Context, set serverinfo.Settings, log *zap.SugaredLogger) (*Source, error) {
	if log == nil {
		log = zap.NewNop().Sugar()
	}
	conn, err := serverinfo.Connect(ctx, serverinfo.SourceEndpoint(set.Dir), set, log, isReady)
	if err != nil {
		return nil, err // the runner names the adapter
	}
	s := &Source{conn: conn, log: log}
	s.ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	return s, nil
}

func isReady(ctx context.Context, cc *grpc.ClientConn) (bool, error) {
	r, err := sourcepb.NewSourceClient(cc).IsReady(ctx, &emptypb.Empty{})
	if err != nil {
		return false, err
	}
	return r.GetReady(), nil
}

// Ready reports whether the source container is connected and ready.
func (s *Source) Ready(ctx context.Context) error { return s.conn.Ready(ctx) }

// readStream is one ReadFn stream after its handshake. A goroutine
// receives into ch, so a Read can give up on its context without breaking
// the stream; the answer to its request is then collected by the next Read.
type readStream struct {
	gen         uint64
	c           sourcepb.Source_ReadFnClient
	cancel      context.CancelFunc
	done        <-chan struct{} // the stream's context
	ch          chan readItem
	outstanding bool // a request was sent and its EOT has not arrived
}

type readItem struct {
	resp *sourcepb.ReadResponse
	err  error
}

// Read asks the container for up to max messages within timeout and
// returns what it sent before its EOT. If ctx ends first, Read returns what
// arrived so far; the rest of that answer comes with the next Read.
func (s *Source) Read(ctx context.Context, max int, timeout time.Duration) ([]*runner.Message, error) {
	s.readMu.Lock()
	defer s.readMu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cc, gen, err := s.conn.Get(ctx)
	if err != nil {
		return nil, fmt.Errorf("udsource: %w", err)
	}
	rs, err := s.readStream(ctx, cc, gen)
	if err != nil {
		return nil, fmt.Errorf("udsource: %w", err)
	}
	if !rs.outstanding {
		ms := timeout.Milliseconds()
		if ms < 1 {
			ms = 1
		}
		req := &sourcepb.ReadRequest{Request: &sourcepb.ReadRequest_Request{
			NumRecords: uint64(max), TimeoutInMs: uint32(min(ms, math.MaxUint32)),
		}}
		if err := rs.c.Send(req); err != nil {
			return nil, s.readBroken(rs, "send read request", err)
		}
		rs.outstanding = true
	}
	var msgs []*runner.Message
	for {
		select {
		case it := <-rs.ch:
			if it.err != nil {
				return msgs, s.readBroken(rs, "receive", it.err)
			}
			st := it.resp.GetStatus()
			if r := it.resp.GetResult(); r != nil && !st.GetEot() {
				msgs = append(msgs, message(r))
			}
			if st.GetCode() == sourcepb.ReadResponse_Status_FAILURE {
				if st.GetEot() {
					rs.outstanding = false
				}
				return msgs, fmt.Errorf("udsource: the source container failed the read (%s): %s", st.GetError(), st.GetMsg())
			}
			if st.GetEot() {
				rs.outstanding = false
				return msgs, nil
			}
		case <-ctx.Done():
			if len(msgs) > 0 {
				return msgs, nil
			}
			return nil, ctx.Err()
		}
	}
}

func message(r *sourcepb.ReadResponse_Result) *runner.Message {
	off := &Offset{Value: r.GetOffset().GetOffset(), Partition: r.GetOffset().GetPartitionId()}
	m := &runner.Message{
		ID:      OffsetID(off),
		Keys:    r.GetKeys(),
		Value:   r.GetPayload(),
		Headers: r.GetHeaders(),
		Offset:  off,
	}
	if et := r.GetEventTime(); et != nil {
		m.EventTime = et.AsTime()
	}
	return m
}

// OffsetID is the message ID of an offset, as Numaflow forms it: the
// offset in base64, a dash, the partition.
func OffsetID(o *Offset) string {
	return base64.StdEncoding.EncodeToString(o.Value) + "-" + strconv.Itoa(int(o.Partition))
}

func (s *Source) readBroken(rs *readStream, what string, err error) error {
	if errors.Is(err, io.EOF) {
		err = errors.New("the container closed the stream")
	}
	if s.rd == rs {
		s.rd = nil
	}
	rs.cancel()
	s.conn.Fail(rs.gen, err)
	return fmt.Errorf("udsource: ReadFn stream broke (%s): %w", what, err)
}

// readStream returns the read stream of the current connection, opening it
// with the handshake when needed. The caller holds readMu.
func (s *Source) readStream(ctx context.Context, cc *grpc.ClientConn, gen uint64) (*readStream, error) {
	if s.rd != nil && s.rd.gen == gen {
		return s.rd, nil
	}
	if s.rd != nil {
		s.rd.cancel()
		s.rd = nil
	}
	sctx, cancel := context.WithCancel(s.ctx)
	c, err := sourcepb.NewSourceClient(cc).ReadFn(sctx)
	if err == nil {
		err = c.Send(&sourcepb.ReadRequest{Handshake: &sourcepb.Handshake{Sot: true}})
	}
	rs := &readStream{gen: gen, c: c, cancel: cancel, done: sctx.Done(), ch: make(chan readItem, 64)}
	if err == nil {
		go rs.receive()
		select {
		case it := <-rs.ch:
			err = it.err
			if err == nil && !it.resp.GetHandshake().GetSot() {
				err = fmt.Errorf("protocol error: the first response is not a handshake: %v", it.resp)
			}
		case <-ctx.Done():
			cancel()
			return nil, ctx.Err()
		}
	}
	if err != nil {
		cancel()
		s.conn.Fail(gen, err)
		return nil, fmt.Errorf("open ReadFn stream: %w", err)
	}
	s.rd = rs
	return rs, nil
}

func (rs *readStream) receive() {
	for {
		resp, err := rs.c.Recv()
		select {
		case rs.ch <- readItem{resp, err}:
		case <-rs.done:
			return
		}
		if err != nil {
			return
		}
	}
}

// ackStream is one AckFn stream after its handshake. The container answers
// requests in order, so waiters queue in send order.
type ackStream struct {
	gen    uint64
	c      sourcepb.Source_AckFnClient
	cancel context.CancelFunc

	sendMu sync.Mutex // held across queueing and Send, so the queue matches the wire order

	mu      sync.Mutex
	waiters []chan error
	err     error
}

// Ack sends the offsets of msgs on the ack stream and waits for the
// container's answer.
func (s *Source) Ack(ctx context.Context, msgs []*runner.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	offs, err := offsets(msgs)
	if err != nil {
		return err
	}
	cc, gen, err := s.conn.Get(ctx)
	if err != nil {
		return fmt.Errorf("udsource: ack %d messages: %w", len(msgs), err)
	}
	as, err := s.ackStream(ctx, cc, gen)
	if err != nil {
		return fmt.Errorf("udsource: ack %d messages: %w", len(msgs), err)
	}
	done := make(chan error, 1)
	as.sendMu.Lock()
	as.mu.Lock()
	err = as.err
	if err == nil {
		as.waiters = append(as.waiters, done)
	}
	as.mu.Unlock()
	if err == nil {
		err = as.c.Send(&sourcepb.AckRequest{Request: &sourcepb.AckRequest_Request{Offsets: offs}})
	}
	as.sendMu.Unlock()
	if err != nil {
		s.ackBroken(as, err)
		return fmt.Errorf("udsource: ack %d messages: AckFn stream broke: %w", len(msgs), err)
	}
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("udsource: ack %d messages: AckFn stream broke: %w", len(msgs), err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func offsets(msgs []*runner.Message) ([]*sourcepb.Offset, error) {
	out := make([]*sourcepb.Offset, len(msgs))
	for i, m := range msgs {
		o, ok := m.Offset.(*Offset)
		if !ok {
			return nil, fmt.Errorf("udsource: message %s has offset %T, not one this source produced", m.ID, m.Offset)
		}
		out[i] = &sourcepb.Offset{Offset: o.Value, PartitionId: o.Partition}
	}
	return out, nil
}

func (s *Source) ackBroken(as *ackStream, err error) {
	as.fail(err)
	s.ackMu.Lock()
	if s.ack == as {
		s.ack = nil
	}
	s.ackMu.Unlock()
	as.cancel()
	s.conn.Fail(as.gen, err)
}

func (s *Source) ackStream(ctx context.Context, cc *grpc.ClientConn, gen uint64) (*ackStream, error) {
	s.ackMu.Lock()
	defer s.ackMu.Unlock()
	if s.ack != nil && s.ack.gen == gen && s.ack.failure() == nil {
		return s.ack, nil
	}
	if s.ack != nil {
		s.ack.cancel()
		s.ack = nil
	}
	sctx, cancel := context.WithCancel(s.ctx)
	c, err := sourcepb.NewSourceClient(cc).AckFn(sctx)
	if err == nil {
		err = c.Send(&sourcepb.AckRequest{Handshake: &sourcepb.Handshake{Sot: true}})
	}
	if err == nil {
		errc := make(chan error, 1)
		go func() {
			resp, err := c.Recv()
			if err == nil && !resp.GetHandshake().GetSot() {
				err = fmt.Errorf("protocol error: the first ack response is not a handshake: %v", resp)
			}
			errc <- err
		}()
		select {
		case err = <-errc:
		case <-ctx.Done():
			cancel()
			return nil, ctx.Err()
		}
	}
	if err != nil {
		cancel()
		s.conn.Fail(gen, err)
		return nil, fmt.Errorf("open AckFn stream: %w", err)
	}
	as := &ackStream{gen: gen, c: c, cancel: cancel}
	go as.receive(s)
	s.ack = as
	return as, nil
}

// receive answers the waiters in order, one per response.
func (as *ackStream) receive(s *Source) {
	for {
		_, err := as.c.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("the container closed the stream")
			}
			s.ackBroken(as, err)
			return
		}
		as.mu.Lock()
		if len(as.waiters) == 0 {
			as.mu.Unlock()
			s.ackBroken(as, errors.New("protocol error: an ack response without a request"))
			return
		}
		w := as.waiters[0]
		as.waiters = as.waiters[1:]
		as.mu.Unlock()
		w <- nil
	}
}

func (as *ackStream) fail(err error) {
	as.mu.Lock()
	defer as.mu.Unlock()
	if as.err != nil {
		return
	}
	as.err = err
	for _, w := range as.waiters {
		w <- err
	}
	as.waiters = nil
}

func (as *ackStream) failure() error {
	as.mu.Lock()
	defer as.mu.Unlock()
	return as.err
}

// Nack hands messages back to the container for redelivery, with the delay
// in NackOptions as Numaflow sends it (milliseconds).
func (s *Source) Nack(ctx context.Context, msgs []*runner.Message, delay time.Duration) error {
	if len(msgs) == 0 {
		return nil
	}
	offs, err := offsets(msgs)
	if err != nil {
		return err
	}
	cc, _, err := s.conn.Get(ctx)
	if err != nil {
		return fmt.Errorf("udsource: nack %d messages: %w", len(msgs), err)
	}
	return s.nack(ctx, cc, offs, delay)
}

func (s *Source) nack(ctx context.Context, cc *grpc.ClientConn, offs []*sourcepb.Offset, delay time.Duration) error {
	opts := &common.NackOptions{Reason: &nackReason}
	if delay > 0 {
		ms := uint64(delay.Milliseconds())
		opts.Delay = &ms
	}
	_, err := sourcepb.NewSourceClient(cc).NackFn(ctx, &sourcepb.NackRequest{Request: []*sourcepb.NackRequest_Request{{
		Offsets: offs, NackOptions: opts,
	}}})
	if err != nil {
		return fmt.Errorf("udsource: nack %d messages: %w", len(offs), err)
	}
	return nil
}

// Pending returns the container's count of messages not yet processed, or
// -1 when it does not know (a negative answer) or cannot be asked now.
func (s *Source) Pending(ctx context.Context) (int64, error) {
	cc, _, err := s.conn.Current()
	if err != nil {
		return -1, fmt.Errorf("udsource: pending: %w", err)
	}
	r, err := sourcepb.NewSourceClient(cc).PendingFn(ctx, &emptypb.Empty{})
	if err != nil {
		return -1, fmt.Errorf("udsource: pending: %w", err)
	}
	n := r.GetResult().GetCount()
	if n < 0 {
		return -1, nil
	}
	return n, nil
}

// Partitions returns the container's active partitions and, when it knows,
// the total number of partitions (-1 otherwise).
func (s *Source) Partitions(ctx context.Context) (active []int32, total int32, err error) {
	cc, _, err := s.conn.Current()
	if err != nil {
		return nil, -1, fmt.Errorf("udsource: partitions: %w", err)
	}
	r, err := sourcepb.NewSourceClient(cc).PartitionsFn(ctx, &emptypb.Empty{})
	if err != nil {
		return nil, -1, fmt.Errorf("udsource: partitions: %w", err)
	}
	total = -1
	if r.GetResult().TotalPartitions != nil {
		total = r.GetResult().GetTotalPartitions()
	}
	return r.GetResult().GetPartitions(), total, nil
}

// Close finishes an unanswered read request and nacks what it brings (the
// engine will not process it), closes the streams the way the SDK servers
// expect (closed send side first), and closes the connection.
func (s *Source) Close(ctx context.Context) error {
	var err error
	s.closeOnce.Do(func() {
		s.readMu.Lock()
		rs := s.rd
		s.rd = nil
		s.readMu.Unlock()
		if rs != nil {
			s.drainRead(ctx, rs)
		}
		s.ackMu.Lock()
		as := s.ack
		s.ack = nil
		s.ackMu.Unlock()
		if as != nil {
			as.sendMu.Lock()
			as.c.CloseSend()
			as.sendMu.Unlock()
			as.fail(serverinfo.ErrClosed)
			as.cancel()
		}
		s.cancel()
		err = s.conn.Close()
	})
	return err
}

func (s *Source) drainRead(ctx context.Context, rs *readStream) {
	defer rs.cancel()
	dctx, cancel := context.WithTimeout(ctx, closeDrain)
	defer cancel()
	var left []*sourcepb.Offset
	for rs.outstanding {
		select {
		case it := <-rs.ch:
			if it.err != nil {
				return
			}
			if r := it.resp.GetResult(); r != nil && !it.resp.GetStatus().GetEot() {
				left = append(left, r.GetOffset())
			}
			if it.resp.GetStatus().GetEot() {
				rs.outstanding = false
			}
		case <-dctx.Done():
			rs.outstanding = false
		}
	}
	if len(left) > 0 {
		if cc, _, err := s.conn.Current(); err == nil {
			if err := s.nack(dctx, cc, left, 0); err != nil {
				s.log.Warnw("could not nack messages read while closing; the source redelivers them after its own timeout", "count", len(left), zap.Error(err))
			}
		}
	}
	if rs.c.CloseSend() == nil {
		for {
			select {
			case it := <-rs.ch:
				if it.err != nil {
					return
				}
			case <-dctx.Done():
				return
			}
		}
	}
}
