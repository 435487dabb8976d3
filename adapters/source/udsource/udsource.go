// Package udsource reads from a Numaflow user-defined source container (any
// Numaflow SDK source, unchanged) over its Unix-socket gRPC protocol: a
// ReadFn stream opened with a handshake where each request asks for
// num_records within timeout_in_ms and the answer ends with an EOT status;
// an AckFn stream, also opened with a handshake, that answers each request
// once; and unary NackFn, PendingFn and IsReady. The socket
// is source.sock in MV_UDS_DIR.
package udsource

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	sourcepb "github.com/numaproj/numaflow-go/pkg/apis/proto/source/v1"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/monovertex/monovertex/adapters/internal/udconn"
	"github.com/monovertex/monovertex/internal/payloadpool"
	"github.com/monovertex/monovertex/runner"
)

// Config holds the udsource settings; they are shared by every Numaflow adapter.
type Config struct {
	udconn.Settings
}

func init() {
	runner.RegisterSource("udsource", func(ctx context.Context, env runner.Env, cfg *Config) (runner.Source, error) {
		cfg.Settings.Connection = env.Connection
		s, err := New(ctx, cfg.Settings, env.Logger)
		if err != nil {
			return nil, err
		}
		s.ReportErrorsTo(env.Errors, env.Role)
		return s, nil
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
	// conn is set by Connect; ep and set are what it needs, reporter and
	// stage where the connection reports runtime errors.
	conn     *udconn.Conn
	ep       udconn.Endpoint
	set      udconn.Settings
	reporter runner.ErrorReporter
	stage    runner.Role
	log      *zap.SugaredLogger

	ctx    context.Context // parent of the streams; ends at Close
	cancel context.CancelFunc

	readMu sync.Mutex // one Read at a time: requests and answers pair up on the stream
	rd     udconn.Current[*readStream]
	ack    udconn.Current[*ackStream]

	// noNackWarned is the SDK (language and version) last warned about
	// for not serving NackFn: one warning per SDK, not one per nack.
	noNackWarned atomic.Pointer[string]
	closeOnce    sync.Once
}

var (
	_ runner.Source             = (*Source)(nil)
	_ runner.Nacker             = (*Source)(nil)
	_ runner.RedeliversInFlight = (*Source)(nil)
	_ runner.PartitionedSource  = (*Source)(nil)
	_ runner.PendingReader      = (*Source)(nil)
	_ runner.Readier            = (*Source)(nil)
)

var _ runner.Connector = (*Source)(nil)

// New returns the source; Connect waits for its container.
func New(ctx context.Context, set udconn.Settings, log *zap.SugaredLogger) (*Source, error) {
	if log == nil {
		log = zap.NewNop().Sugar()
	}
	s := &Source{ep: udconn.SourceEndpoint(set.Dir), set: set, log: log}
	s.ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	return s, nil
}

// Connect waits for the source container to be up and compatible (up to
// MV_UDF_STARTUP_TIMEOUT) and connects to it.
func (s *Source) Connect(ctx context.Context) error {
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
	return udconn.IsReady(sourcepb.NewSourceClient(cc).IsReady(ctx, &emptypb.Empty{}))
}

// Ready reports whether the source container is connected and ready.
func (s *Source) Ready(ctx context.Context) error { return s.conn.Ready(ctx) }

var _ runner.Sidecar = (*Source)(nil)

// SidecarContainer is the user container's name, for /sidecar-livez.
func (s *Source) SidecarContainer() string { return s.ep.Numaflow }

// The Numaflow source protocols: ReadFn and AckFn, each opened with a handshake.
var (
	readFn = udconn.NewProtocol[sourcepb.ReadRequest, sourcepb.ReadResponse]("ReadFn", sourcepb.NewSourceClient, sourcepb.SourceClient.ReadFn)
	ackFn  = udconn.NewProtocol[sourcepb.AckRequest, sourcepb.AckResponse]("AckFn", sourcepb.NewSourceClient, sourcepb.SourceClient.AckFn)
)

// readStream is one ReadFn stream after its handshake. A goroutine
// receives into ch, so a Read can give up on its context without breaking
// the stream; the answer to its request is then collected by the next Read.
type readStream struct {
	*udconn.Stream[sourcepb.ReadRequest, sourcepb.ReadResponse]
	ch          chan received
	outstanding bool // a request was sent and its EOT has not arrived
}

// received is one response and the pooled buffer its payload aliases (nil
// for a small payload).
type received struct {
	resp *sourcepb.ReadResponse
	buf  *payloadpool.Buffer
}

// next returns the next response, preferring what already arrived over the
// stream's failure (which comes after it), or the failure.
func (rs *readStream) next(ctx context.Context) (received, error) {
	select {
	case r := <-rs.ch:
		return r, nil
	default:
	}
	select {
	case r := <-rs.ch:
		return r, nil
	case <-rs.Dead():
		select {
		case r := <-rs.ch:
			return r, nil
		default:
			return received{}, rs.Err()
		}
	case <-ctx.Done():
		return received{}, ctx.Err()
	}
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
	rs, err := s.readStream(ctx)
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
		if err := rs.Send(req); err != nil {
			return nil, s.readBroken(rs, "send read request", err)
		}
		rs.outstanding = true
	}
	var msgs []*runner.Message
	if max > 0 {
		msgs = make([]*runner.Message, 0, min(max, 4096))
	}
	for {
		rcv, err := rs.next(ctx)
		resp := rcv.resp
		switch {
		case err != nil && err == ctx.Err():
			if len(msgs) > 0 {
				return msgs, nil
			}
			return nil, err
		case err != nil:
			return msgs, s.readBroken(rs, "receive", err)
		}
		st := resp.GetStatus()
		r := resp.GetResult()
		if bad := badResult(r, st); bad != "" {
			// numaflow-core fails the read, drops what it had read and
			// stops the vertex (source/user_defined.rs): the source
			// redelivers all of it after the restart.
			rcv.buf.Release()
			for _, m := range msgs {
				if m.Release != nil {
					m.Release()
				}
			}
			return nil, runner.Fatal(fmt.Errorf("udsource: the source container sent %s, which Numaflow refuses as an error in the source's code; nothing of this read is written or acked", bad))
		}
		if r != nil && !st.GetEot() {
			m := message(r)
			if rcv.buf != nil {
				// The engine gives the buffer back once the payload is
				// written (or replaced by a transformer's output).
				m.Release = rcv.buf.Release
			}
			msgs = append(msgs, m)
		} else {
			rcv.buf.Release()
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
	}
}

// badResult says what is wrong with a read answer numaflow-core refuses
// (source/user_defined.rs), or "": one that is neither a message nor the
// end of the read, or a message without an offset, which could be neither
// acked nor told from another.
func badResult(r *sourcepb.ReadResponse_Result, st *sourcepb.ReadResponse_Status) string {
	switch {
	case st.GetEot():
		return ""
	case r == nil && st.GetCode() == sourcepb.ReadResponse_Status_FAILURE:
		return "" // a failed read, which Read reports as such
	case r == nil:
		return "an answer with neither a message nor the end of the read (Numaflow: \"Empty message in response\")"
	case len(r.GetOffset().GetOffset()) == 0:
		return fmt.Sprintf("a message (keys %q) without an offset: give every message a non-empty offset (sourcer.NewOffset), by which it is acked", r.GetKeys())
	}
	return ""
}

// read is a message read and its offset, allocated together: this runs
// once per datum.
type read struct {
	m   runner.Message
	off Offset
}

func message(r *sourcepb.ReadResponse_Result) *runner.Message {
	rd := &read{off: Offset{Value: r.GetOffset().GetOffset(), Partition: r.GetOffset().GetPartitionId()}}
	m := &rd.m
	*m = runner.Message{
		ID:      OffsetID(&rd.off),
		Keys:    r.GetKeys(),
		Value:   r.GetPayload(),
		Headers: r.GetHeaders(),
		Offset:  &rd.off,
	}
	if et := r.GetEventTime(); et != nil {
		m.EventTime = et.AsTime()
	}
	return m
}

// OffsetID is the message ID of an offset, as Numaflow forms it: the
// offset in base64, a dash, the partition as an unsigned 16-bit number.
func OffsetID(o *Offset) string {
	// One buffer for the three parts: it runs once per message read.
	b := make([]byte, 0, base64.StdEncoding.EncodedLen(len(o.Value))+12)
	b = base64.StdEncoding.AppendEncode(b, o.Value)
	b = append(b, '-')
	// numaflow-core keeps the partition as a u16 (partition_id as u16).
	b = strconv.AppendUint(b, uint64(uint16(o.Partition)), 10)
	return unsafe.String(unsafe.SliceData(b), len(b)) // b is not used again
}

// SourcePartition is the partition of m's offset, which labels
// monovtx_read_total and, under MV_ORDERING, is m's lane. numaflow-core
// takes the partition as a u16 (source/user_defined.rs).
func (s *Source) SourcePartition(m *runner.Message) (uint16, bool) {
	o, ok := m.Offset.(*Offset)
	if !ok || o == nil {
		return 0, false
	}
	return uint16(o.Partition), true
}

// RedeliversInFlight says yes: a user-defined source may hand out an
// offset again while it is in flight (one that reads whatever is not
// acked, a queue whose visibility timeout ran out), and the engine then
// drops that delivery, as numaflow-core's tracker does.
func (s *Source) RedeliversInFlight() bool { return true }

func (s *Source) readBroken(rs *readStream, what string, err error) error {
	s.rd.Drop(rs)
	return fmt.Errorf("udsource: ReadFn stream broke (%s): %w", what, rs.Break(err))
}

// readStream returns the read stream of the current connection, opening it
// with the handshake when needed. The caller holds readMu.
func (s *Source) readStream(ctx context.Context) (*readStream, error) {
	return udconn.OpenCurrent(ctx, s.ctx, s.conn, &s.rd, readFn, func(st *udconn.Stream[sourcepb.ReadRequest, sourcepb.ReadResponse]) *readStream {
		rs := &readStream{Stream: st, ch: make(chan received, 64)}
		go rs.ReceiveOwned(func(resp *sourcepb.ReadResponse, buf *payloadpool.Buffer) error {
			select {
			case rs.ch <- received{resp, buf}:
				return nil
			case <-rs.Dead():
				return rs.Err()
			}
		})
		return rs
	})
}

// ackStream is one AckFn stream after its handshake. The container answers
// requests in order, so waiters queue in send order.
type ackStream struct {
	*udconn.Stream[sourcepb.AckRequest, sourcepb.AckResponse]

	queueMu sync.Mutex // held across queueing and Send, so the queue matches the wire order

	mu      sync.Mutex
	waiters []chan struct{}
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
	as, err := s.ackStream(ctx)
	if err != nil {
		return fmt.Errorf("udsource: ack %d messages: %w", len(msgs), err)
	}
	done := make(chan struct{}, 1)
	as.queueMu.Lock()
	err = as.Err()
	if err == nil {
		as.mu.Lock()
		as.waiters = append(as.waiters, done)
		as.mu.Unlock()
		err = as.Send(&sourcepb.AckRequest{Request: &sourcepb.AckRequest_Request{Offsets: offs}})
	}
	as.queueMu.Unlock()
	if err != nil {
		s.ack.Drop(as)
		return fmt.Errorf("udsource: ack %d messages: AckFn stream broke: %w", len(msgs), as.Break(err))
	}
	select {
	case <-done:
		return nil
	case <-as.Dead():
		select {
		case <-done: // answered before the stream ended
			return nil
		default:
			return fmt.Errorf("udsource: ack %d messages: AckFn stream broke: %w", len(msgs), as.Err())
		}
	case <-ctx.Done():
		return ctx.Err()
	}
}

func offsets(msgs []*runner.Message) ([]*sourcepb.Offset, error) {
	out := make([]*sourcepb.Offset, len(msgs))
	all := make([]sourcepb.Offset, len(msgs)) // one allocation for the batch
	for i, m := range msgs {
		o, ok := m.Offset.(*Offset)
		if !ok {
			return nil, fmt.Errorf("udsource: message %s has offset %T, not one this source produced", m.ID, m.Offset)
		}
		all[i].Offset, all[i].PartitionId = o.Value, o.Partition
		out[i] = &all[i]
	}
	return out, nil
}

// ackStream returns the ack stream of the current connection, opening it
// with the handshake when needed.
func (s *Source) ackStream(ctx context.Context) (*ackStream, error) {
	return udconn.OpenCurrent(ctx, s.ctx, s.conn, &s.ack, ackFn, func(st *udconn.Stream[sourcepb.AckRequest, sourcepb.AckResponse]) *ackStream {
		as := &ackStream{Stream: st}
		go func() {
			err := as.Receive(func(*sourcepb.AckResponse) error { return as.answer() })
			s.ack.Drop(as)
			as.Break(err)
		}()
		return as
	})
}

// answer takes one response: the answer to the oldest waiting request.
func (as *ackStream) answer() error {
	as.mu.Lock()
	defer as.mu.Unlock()
	if len(as.waiters) == 0 {
		return errors.New("protocol error: an ack response without a request")
	}
	as.waiters[0] <- struct{}{}
	as.waiters = as.waiters[1:]
	return nil
}

// Nack hands messages back to the container for redelivery, with what the
// nack asked for as Numaflow's NackOptions: the delay (milliseconds), the
// reason (the runner's own when there is none), max_deliveries and
// nack_map, as numaflow-core passes them (source/user_defined.rs).
func (s *Source) Nack(ctx context.Context, msgs []*runner.Message, n runner.Nack) error {
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
	return s.nack(ctx, cc, offs, n)
}

func (s *Source) nack(ctx context.Context, cc grpc.ClientConnInterface, offs []*sourcepb.Offset, n runner.Nack) error {
	if si := s.conn.ServerInfo(); !udconn.SupportsNack(si) {
		// As Numaflow: an SDK from before NackFn is not nacked at all.
		if si != nil {
			sdk := udconn.Language(si) + " " + si.Version
			if prev := s.noNackWarned.Swap(&sdk); prev == nil || *prev != sdk {
				s.log.Warnw("the source container's SDK predates NackFn (Go and Java 0.11, Python 0.11, Rust 0.4 serve it), so nacked messages are not handed back: the source redelivers them after its own ack timeout, as Numaflow does",
					"sdk_language", si.Language, "sdk_version", si.Version, "count", len(offs))
			}
		}
		return nil
	}
	if n.Reason == "" {
		n.Reason = nackReason
	}
	opts := udconn.NackToProto(n)
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

// Close finishes an unanswered read request and nacks what it brings (the
// engine will not process it), closes the streams the way the SDK servers
// expect (closed send side first), and closes the connection.
func (s *Source) Close(ctx context.Context) error {
	var err error
	s.closeOnce.Do(func() {
		s.readMu.Lock()
		rs, _ := s.rd.Close()
		s.readMu.Unlock()
		if rs != nil {
			s.drainRead(ctx, rs)
		}
		if as, _ := s.ack.Close(); as != nil {
			as.Close()
		}
		s.cancel()
		if s.conn != nil {
			err = s.conn.Close()
		}
	})
	return err
}

func (s *Source) drainRead(ctx context.Context, rs *readStream) {
	defer rs.Cancel()
	dctx, cancel := context.WithTimeout(ctx, closeDrain)
	defer cancel()
	var left []*sourcepb.Offset
	for rs.outstanding {
		rcv, err := rs.next(dctx)
		if err != nil {
			if dctx.Err() == nil {
				return // the stream broke
			}
			break
		}
		resp := rcv.resp
		rcv.buf.Release() // only the offset is kept
		if r := resp.GetResult(); r != nil && !resp.GetStatus().GetEot() {
			left = append(left, r.GetOffset())
		}
		if resp.GetStatus().GetEot() {
			rs.outstanding = false
		}
	}
	if len(left) > 0 {
		if cc, _, err := s.conn.Current(); err == nil {
			if err := s.nack(dctx, cc, left, runner.Nack{}); err != nil {
				s.log.Warnw("could not nack messages read while closing; the source redelivers them after its own timeout", "count", len(left), zap.Error(err))
			}
		}
	}
	if rs.CloseSend() == nil {
		// Wait for the container to end the stream on its side.
		for {
			if _, err := rs.next(dctx); err != nil {
				return
			}
		}
	}
}

// ReportErrorsTo makes the adapter report its container's runtime errors
// (broken streams, failed calls, handler panics) to r as errors of stage.
func (s *Source) ReportErrorsTo(r runner.ErrorReporter, stage runner.Role) {
	s.reporter, s.stage = r, stage
	if s.conn != nil {
		s.conn.ReportTo(r, stage)
	}
}
