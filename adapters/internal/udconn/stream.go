package udconn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/monovertex/monovertex/adapters/internal/udcodec"
	"github.com/monovertex/monovertex/internal/payloadpool"
)

// ErrContainerClosedStream is what a stream reports when the container
// ended it (io.EOF on the client side): the SDK servers close a stream only
// when their handler stops, so the container is treated as lost.
var ErrContainerClosedStream = errors.New("the container closed the stream")

// Protocol describes one bidirectional Numaflow RPC (ReadFn, AckFn, SinkFn,
// SourceTransformFn, MapFn) to the stream helper: every one of them is
// opened with a start-of-transmission handshake that the container echoes.
// Make one with NewProtocol.
type Protocol[Req, Resp any] struct {
	// Name is the RPC's name in errors ("SinkFn").
	Name string
	// Open starts the RPC on cc.
	Open func(ctx context.Context, cc grpc.ClientConnInterface) (grpc.BidiStreamingClient[Req, Resp], error)
	// HandshakeWithinCallTimeout bounds the wait for the handshake answer
	// by MV_UDF_CALL_TIMEOUT as well as by the caller's context.
	HandshakeWithinCallTimeout bool

	handshake   func() *Req
	isHandshake func(resp *Resp) bool
}

// NewProtocol describes the RPC that rpc opens on the client newClient
// makes, such as NewProtocol[mappb.MapRequest, mappb.MapResponse]("MapFn",
// mappb.NewMapClient, mappb.MapClient.MapFn). The handshake is the one
// every Numaflow stream shares, so it is derived here rather than written
// per protocol: a request with handshake.sot set, answered by a response
// with it set. Req and Resp must be Numaflow protobuf messages with that
// field; NewProtocol panics otherwise, at package initialisation where
// the adapters call it.
func NewProtocol[Req, Resp, C any, S grpc.BidiStreamingClient[Req, Resp]](name string, newClient func(grpc.ClientConnInterface) C, rpc func(C, context.Context, ...grpc.CallOption) (S, error)) Protocol[Req, Resp] {
	reqHS, reqSot := handshakeField(name, new(Req))
	respHS, respSot := handshakeField(name, new(Resp))
	return Protocol[Req, Resp]{
		Name: name,
		Open: func(ctx context.Context, cc grpc.ClientConnInterface) (grpc.BidiStreamingClient[Req, Resp], error) {
			s, err := rpc(newClient(cc), ctx)
			if err != nil {
				return nil, err
			}
			return s, nil
		},
		handshake: func() *Req {
			req := new(Req)
			any(req).(proto.Message).ProtoReflect().Mutable(reqHS).Message().Set(reqSot, protoreflect.ValueOfBool(true))
			return req
		},
		isHandshake: func(resp *Resp) bool {
			return any(resp).(proto.Message).ProtoReflect().Get(respHS).Message().Get(respSot).Bool()
		},
	}
}

// BoundHandshake returns p with HandshakeWithinCallTimeout set: the
// handshake answer is awaited no longer than MV_UDF_CALL_TIMEOUT.
func (p Protocol[Req, Resp]) BoundHandshake() Protocol[Req, Resp] {
	p.HandshakeWithinCallTimeout = true
	return p
}

// handshakeField finds the handshake message field of m and the sot flag in it.
func handshakeField(name string, m any) (hs, sot protoreflect.FieldDescriptor) {
	pm, ok := m.(proto.Message)
	if !ok {
		panic(fmt.Sprintf("udconn: %s: %T is not a protobuf message", name, m))
	}
	hs = pm.ProtoReflect().Descriptor().Fields().ByName("handshake")
	if hs != nil && hs.Message() != nil {
		sot = hs.Message().Fields().ByName("sot")
	}
	if sot == nil || sot.Kind() != protoreflect.BoolKind {
		panic(fmt.Sprintf("udconn: %s: %T has no handshake.sot flag", name, m))
	}
	return hs, sot
}

// Stream is one bidirectional stream to a Numaflow container after its
// handshake. Sends are serialized, so any number of goroutines may send;
// the first failure is kept and closes Dead, and a stream that failed is
// not used again: the adapter opens a new one.
type Stream[Req, Resp any] struct {
	conn   *Conn
	gen    uint64
	c      grpc.BidiStreamingClient[Req, Resp]
	cancel context.CancelFunc

	sendMu sync.Mutex
	// receiving is set once Receive runs, which is then the one to learn
	// why the container ended the stream.
	receiving atomic.Bool

	mu   sync.Mutex
	err  error
	dead chan struct{}
}

// Open starts a stream of protocol p on cc, connection generation gen of
// conn, under parent (which outlives the call that opens it; cancelling it
// ends the stream), and does the handshake, waiting for its answer as long
// as ctx (the call's) allows. A stream that cannot be opened while ctx is
// still alive reports the container lost to conn.
func Open[Req, Resp any](ctx, parent context.Context, conn *Conn, cc grpc.ClientConnInterface, gen uint64, p Protocol[Req, Resp]) (*Stream[Req, Resp], error) {
	sctx, cancel := context.WithCancel(parent)
	c, err := p.Open(sctx, cc)
	s := &Stream[Req, Resp]{conn: conn, gen: gen, c: c, cancel: cancel, dead: make(chan struct{})}
	if err == nil {
		err = c.Send(p.handshake())
	}
	if err == nil {
		hctx := ctx
		if p.HandshakeWithinCallTimeout {
			var hcancel context.CancelFunc
			hctx, hcancel = context.WithTimeout(ctx, conn.CallTimeout())
			defer hcancel()
		}
		var resp *Resp
		resp, err = s.RecvWithin(hctx)
		if err == nil && !p.isHandshake(resp) {
			err = fmt.Errorf("protocol error: the first response is not a handshake: %v", resp)
		}
	}
	if err != nil {
		cancel()
		if ctx.Err() == nil {
			conn.report(err)
			conn.Fail(gen, err)
		}
		return nil, fmt.Errorf("open %s stream: %w", p.Name, err)
	}
	return s, nil
}

// Gen is the connection generation the stream was opened on.
func (s *Stream[Req, Resp]) Gen() uint64 { return s.gen }

// Send sends one request; concurrent sends go out one after the other. A
// stream the container ended is ErrContainerClosedStream, or the status
// it ended it with (a handler panic's) when the receive loop learns it soon.
func (s *Stream[Req, Resp]) Send(req *Req) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	err := s.c.Send(req)
	if errors.Is(err, io.EOF) {
		return s.endedWith()
	}
	return err
}

// statusWait bounds how long a send that found the stream ended waits for
// the receive loop to read the status the container ended it with.
const statusWait = time.Second

// endedWith is why the container ended the stream. gRPC's Send answers
// only io.EOF then, and the status (a numaflow-go handler panic's
// UDF_EXECUTION_ERROR with its stack) comes to Recv: wait briefly for the
// receive loop to fail the stream with it, so the runtime error reported
// is the container's, not just "closed".
func (s *Stream[Req, Resp]) endedWith() error {
	if !s.receiving.Load() {
		return ErrContainerClosedStream
	}
	t := time.NewTimer(statusWait)
	defer t.Stop()
	select {
	case <-s.dead:
		if err := s.Err(); err != nil {
			return err
		}
	case <-t.C:
	}
	return ErrContainerClosedStream
}

// CloseSend ends the sending side, which the SDK servers read as the end
// of the stream (never as an error that would stop them).
func (s *Stream[Req, Resp]) CloseSend() error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	return s.c.CloseSend()
}

// Recv receives one response; the container ending the stream is
// ErrContainerClosedStream.
func (s *Stream[Req, Resp]) Recv() (*Resp, error) {
	resp, _, err := s.RecvOwned()
	return resp, err
}

// RecvOwned is Recv for responses whose payloads the caller will give
// back: they alias buf (nil when no payload was large enough to pool),
// which the caller releases once nothing reads them. Not releasing it
// only leaves it to the garbage collector.
func (s *Stream[Req, Resp]) RecvOwned() (*Resp, *payloadpool.Buffer, error) {
	resp := new(Resp)
	rv := udcodec.Received{Msg: any(resp).(proto.Message)}
	if err := s.c.RecvMsg(&rv); err != nil {
		return nil, nil, closedByContainer(err)
	}
	return resp, rv.Buf, nil
}

func closedByContainer(err error) error {
	if errors.Is(err, io.EOF) {
		return ErrContainerClosedStream
	}
	return err
}

// RecvWithin receives one response, giving up when ctx ends. The receive
// it gave up on goes on until the stream ends, so the stream is then only
// good for being cancelled.
func (s *Stream[Req, Resp]) RecvWithin(ctx context.Context) (*Resp, error) {
	type received struct {
		resp *Resp
		err  error
	}
	ch := make(chan received, 1)
	go func() {
		resp, err := s.Recv()
		ch <- received{resp, err}
	}()
	select {
	case r := <-ch:
		return r.resp, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Receive hands every response to handle until the stream ends or handle
// returns an error; then it fails the stream with that error and returns
// it. It is the stream's receive loop: run it in its own goroutine.
func (s *Stream[Req, Resp]) Receive(handle func(resp *Resp) error) error {
	return s.ReceiveOwned(func(resp *Resp, _ *payloadpool.Buffer) error { return handle(resp) })
}

// ReceiveOwned is Receive for handlers that release the buffer each
// response's payloads alias (see RecvOwned).
func (s *Stream[Req, Resp]) ReceiveOwned(handle func(resp *Resp, buf *payloadpool.Buffer) error) error {
	s.receiving.Store(true)
	for {
		resp, buf, err := s.RecvOwned()
		if err == nil {
			err = handle(resp, buf)
		}
		if err != nil {
			s.Fail(err)
			return err
		}
	}
}

// Fail marks the stream failed with err unless it failed before, and
// closes Dead. It reports whether err is the stream's failure.
func (s *Stream[Req, Resp]) Fail(err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return false
	}
	s.err = err
	close(s.dead)
	return true
}

// Err is the stream's failure, nil while it works.
func (s *Stream[Req, Resp]) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Dead is closed when the stream fails.
func (s *Stream[Req, Resp]) Dead() <-chan struct{} { return s.dead }

// Cancel ends the stream at once, without a goodbye to the container.
func (s *Stream[Req, Resp]) Cancel() { s.cancel() }

// Reset fails and cancels the stream without blaming the container: it
// was replaced, closed, or given up by its caller.
func (s *Stream[Req, Resp]) Reset(err error) {
	s.Fail(err)
	s.cancel()
}

// Break fails and cancels the stream and reports the container lost to the
// connection, which waits for it to come back (MV_UDF_RECONNECT_TIMEOUT).
// It returns err.
func (s *Stream[Req, Resp]) Break(err error) error {
	s.Reset(err)
	s.conn.report(err)
	s.conn.Fail(s.gen, err)
	return err
}

// Close ends the stream the way the SDK servers expect (the sending side
// first), fails it with ErrClosed and cancels it.
func (s *Stream[Req, Resp]) Close() {
	s.CloseSend()
	s.Reset(ErrClosed)
}

// Current is the one stream an adapter keeps open to its container, of
// the adapter's stream type S (which embeds a *Stream): it is opened on
// first use, and again once it failed or the container came back on a new
// connection.
type Current[S adapterStream] struct {
	mu     sync.Mutex
	st     S
	closed bool
}

// adapterStream is what Current needs of an adapter's stream type.
type adapterStream interface {
	comparable
	Gen() uint64
	Err() error
	Reset(error)
}

// OpenCurrent returns cur's stream for conn's current connection. When
// there is none (or it failed, or belongs to an older connection) it
// opens a stream of protocol p under parent with Open, its handshake
// bounded by ctx, and makes it the adapter's stream type with wrap (which
// also starts its receive loop), so the adapters share one open path.
func OpenCurrent[S adapterStream, Req, Resp any](ctx, parent context.Context, conn *Conn, cur *Current[S], p Protocol[Req, Resp], wrap func(*Stream[Req, Resp]) S) (S, error) {
	var none S
	cc, gen, err := conn.Get(ctx)
	if err != nil {
		return none, err
	}
	return cur.Get(gen, func() (S, error) {
		st, err := Open(ctx, parent, conn, cc, gen, p)
		if err != nil {
			return none, err
		}
		return wrap(st), nil
	})
}

// errReplaced ends a stream whose connection was replaced.
var errReplaced = errors.New("the stream was replaced")

// Get returns the current stream if it is of connection generation gen and
// has not failed, and otherwise resets it and opens a new one with open.
// Opens do not overlap. After Close it returns ErrClosed.
func (c *Current[S]) Get(gen uint64, open func() (S, error)) (S, error) {
	var none S
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return none, ErrClosed
	}
	if c.st != none {
		if c.st.Gen() == gen && c.st.Err() == nil {
			return c.st, nil
		}
		c.st.Reset(errReplaced)
		c.st = none
	}
	st, err := open()
	if err != nil {
		return none, err
	}
	c.st = st
	return st, nil
}

// Drop forgets st if it is the current stream, so the next Get opens a new one.
func (c *Current[S]) Drop(st S) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.st == st {
		var none S
		c.st = none
	}
}

// Close makes later Gets fail with ErrClosed and hands back the current
// stream (the zero S when there is none) for the adapter to end.
func (c *Current[S]) Close() (st S, closedBefore bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var none S
	st, c.st = c.st, none
	closedBefore, c.closed = c.closed, true
	return st, closedBefore
}

// Waiters are the calls waiting on a stream for the answers to their
// requests, by request id; W is what a call waits with.
type Waiters[W any] struct {
	mu sync.Mutex
	m  map[string]W
}

// Add makes w wait for the answer to request id.
func (ws *Waiters[W]) Add(id string, w W) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.m == nil {
		ws.m = map[string]W{}
	}
	ws.m[id] = w
}

// Get returns what waits for request id, and with done stops its wait.
func (ws *Waiters[W]) Get(id string, done bool) (W, bool) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w, ok := ws.m[id]
	if ok && done {
		delete(ws.m, id)
	}
	return w, ok
}

// Forget stops the waits for ids, answered or not (a call that gave up).
func (ws *Waiters[W]) Forget(ids []string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, id := range ids {
		delete(ws.m, id)
	}
}

// Len is the number of requests still waited for.
func (ws *Waiters[W]) Len() int {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return len(ws.m)
}
