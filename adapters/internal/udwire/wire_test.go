package udwire_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	transformpb "github.com/numaproj/numaflow-go/pkg/apis/proto/sourcetransform/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/monovertex/monovertex/adapters/internal/udcodec"
	"github.com/monovertex/monovertex/adapters/internal/udwire"
)

func desc(m proto.Message) protoreflect.MessageDescriptor { return m.ProtoReflect().Descriptor() }

var codec = udcodec.New(udcodec.NewPool(),
	udcodec.Payload{Message: desc(&transformpb.SourceTransformRequest{}), Outer: 1, Inner: 2},
	udcodec.Payload{Message: desc(&transformpb.SourceTransformResponse{}), Outer: 1, Inner: 2},
)

// echo is a source transformer, served by grpc-go with its defaults (as
// the numaflow-go servers are), that answers each request with its value,
// or with what reply makes of the request.
type echo struct {
	transformpb.UnimplementedSourceTransformServer
	reply func(req *transformpb.SourceTransformRequest_Request) (*transformpb.SourceTransformResponse, error)
	ready func() (*transformpb.ReadyResponse, error)
}

func (e *echo) IsReady(context.Context, *emptypb.Empty) (*transformpb.ReadyResponse, error) {
	if e.ready != nil {
		return e.ready()
	}
	return &transformpb.ReadyResponse{Ready: true}, nil
}

func (e *echo) SourceTransformFn(st transformpb.SourceTransform_SourceTransformFnServer) error {
	for {
		req, err := st.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if req.Handshake != nil {
			if err := st.Send(&transformpb.SourceTransformResponse{Handshake: req.Handshake}); err != nil {
				return err
			}
			continue
		}
		resp := &transformpb.SourceTransformResponse{Id: req.Request.Id, Results: []*transformpb.SourceTransformResponse_Result{{Value: req.Request.Value}}}
		if e.reply != nil {
			if resp, err = e.reply(req.Request); err != nil {
				return err
			}
		}
		if err := st.Send(resp); err != nil {
			return err
		}
	}
}

// serve starts srv on a fresh Unix socket and returns its path.
func serve(t *testing.T, e *echo, opts ...grpc.ServerOption) (string, *grpc.Server) {
	t.Helper()
	dir, err := os.MkdirTemp("", "udwire")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(append([]grpc.ServerOption{grpc.MaxRecvMsgSize(64 << 20), grpc.MaxSendMsgSize(64 << 20)}, opts...)...)
	transformpb.RegisterSourceTransformServer(srv, e)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return sock, srv
}

func dial(t *testing.T, sock string, max int) *udwire.ClientConn {
	t.Helper()
	nc, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	cc := udwire.New(nc, udwire.Options{Codec: codec, MaxMessageSize: max, Window: 8 << 20})
	t.Cleanup(func() { cc.Close() })
	return cc
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func open(t *testing.T, ctx context.Context, cc grpc.ClientConnInterface) grpc.BidiStreamingClient[transformpb.SourceTransformRequest, transformpb.SourceTransformResponse] {
	t.Helper()
	st, err := transformpb.NewSourceTransformClient(cc).SourceTransformFn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&transformpb.SourceTransformRequest{Handshake: &transformpb.Handshake{Sot: true}}); err != nil {
		t.Fatal(err)
	}
	if resp, err := st.Recv(); err != nil || resp.Handshake == nil {
		t.Fatalf("handshake: %v, %v", resp, err)
	}
	return st
}

func payload(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31) ^ seed
	}
	return b
}

// TestPayloadsBothWaysThroughGRPCGoWindows sends messages from empty to
// several times grpc-go's initial 64 KiB window, on two streams at once
// that share the connection's window, and gets every byte back in order.
func TestPayloadsBothWaysThroughGRPCGoWindows(t *testing.T) {
	sock, _ := serve(t, &echo{})
	cc := dial(t, sock, 64<<20)
	ctx := testCtx(t)
	sizes := []int{0, 1, 1000, 16<<10 - 5, 16 << 10, 16<<10 + 1, 64 << 10, 1 << 20, 5<<20 + 3}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for s := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := open(t, ctx, cc)
			go func() {
				for i, n := range sizes {
					req := &transformpb.SourceTransformRequest{Request: &transformpb.SourceTransformRequest_Request{Id: fmt.Sprint(i), Value: payload(n, byte(s))}}
					if err := st.Send(req); err != nil {
						errs <- fmt.Errorf("send %d: %w", n, err)
						return
					}
				}
				st.CloseSend()
			}()
			for i, n := range sizes {
				resp, err := st.Recv()
				if err != nil {
					errs <- fmt.Errorf("stream %d: receive %d: %w", s, n, err)
					return
				}
				if resp.Id != fmt.Sprint(i) || len(resp.Results) != 1 || !bytes.Equal(resp.Results[0].Value, payload(n, byte(s))) {
					errs <- fmt.Errorf("stream %d: answer %d (%d bytes) differs from what was sent", s, i, n)
					return
				}
			}
			if _, err := st.Recv(); !errors.Is(err, io.EOF) {
				errs <- fmt.Errorf("stream %d: after the last answer: %v, want io.EOF", s, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestReceivedPayloadsAliasOnePooledBuffer checks that a large answer's
// payload is handed over in the buffer the transport read it into.
func TestReceivedPayloadsAliasOnePooledBuffer(t *testing.T) {
	sock, _ := serve(t, &echo{})
	cc := dial(t, sock, 64<<20)
	st := open(t, testCtx(t), cc)
	want := payload(1<<20, 7)
	if err := st.Send(&transformpb.SourceTransformRequest{Request: &transformpb.SourceTransformRequest_Request{Id: "a", Value: want}}); err != nil {
		t.Fatal(err)
	}
	resp := new(transformpb.SourceTransformResponse)
	rv := udcodec.Received{Msg: resp}
	if err := st.RecvMsg(&rv); err != nil {
		t.Fatal(err)
	}
	if rv.Buf == nil || !rv.Buf.Backs(resp.Results[0].Value) {
		t.Fatalf("the payload does not alias the message's pooled buffer (buffer %v)", rv.Buf != nil)
	}
	if !bytes.Equal(resp.Results[0].Value, want) {
		t.Fatal("payload differs")
	}
	rv.Buf.Release()
}

// TestUnaryCallsAndTheirStatus makes unary calls that succeed and fail,
// and gets a failure's code, message and details as the server sent them.
func TestUnaryCallsAndTheirStatus(t *testing.T) {
	var fail atomic.Bool // the socket orders it, but the race detector cannot see that
	e := &echo{ready: func() (*transformpb.ReadyResponse, error) {
		if !fail.Load() {
			return &transformpb.ReadyResponse{Ready: true}, nil
		}
		st, _ := status.New(codes.Internal, "UDF_EXECUTION_ERROR: 100% broken,\nsee ünïcode").
			WithDetails(&errdetails.DebugInfo{Detail: "goroutine 1 [running]"})
		return nil, st.Err()
	}}
	sock, _ := serve(t, e)
	cc := dial(t, sock, 64<<20)
	client := transformpb.NewSourceTransformClient(cc)
	r, err := client.IsReady(testCtx(t), &emptypb.Empty{})
	if err != nil || !r.Ready {
		t.Fatalf("IsReady = %v, %v", r, err)
	}
	fail.Store(true)
	_, err = client.IsReady(testCtx(t), &emptypb.Empty{})
	st := status.Convert(err)
	if st.Code() != codes.Internal || st.Message() != "UDF_EXECUTION_ERROR: 100% broken,\nsee ünïcode" {
		t.Fatalf("status %v %q", st.Code(), st.Message())
	}
	if d := st.Details(); len(d) != 1 || d[0].(*errdetails.DebugInfo).Detail != "goroutine 1 [running]" {
		t.Fatalf("details %v", d)
	}
	if err := cc.Invoke(testCtx(t), "/sourcetransformer.v1.SourceTransform/NoSuchMethod", &emptypb.Empty{}, &emptypb.Empty{}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("unknown method: %v, want Unimplemented", err)
	}
}

// TestCancelledStreamsGiveTheirWindowBack cancels streams with answers
// still unread, more in all than the connection's receive window, and
// then still receives on a new stream: what a cancelled stream held is
// granted back to the server.
func TestCancelledStreamsGiveTheirWindowBack(t *testing.T) {
	big := payload(1<<20, 1)
	e := &echo{reply: func(req *transformpb.SourceTransformRequest_Request) (*transformpb.SourceTransformResponse, error) {
		return &transformpb.SourceTransformResponse{Id: req.Id, Results: []*transformpb.SourceTransformResponse_Result{{Value: big}, {Value: big}}}, nil
	}}
	sock, _ := serve(t, e)
	nc, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	cc := udwire.New(nc, udwire.Options{Codec: codec, MaxMessageSize: 64 << 20, Window: 4 << 20})
	defer cc.Close()
	ctx := testCtx(t)
	for i := range 6 {
		sctx, cancel := context.WithCancel(ctx)
		st := open(t, sctx, cc)
		for j := range 2 {
			if err := st.Send(&transformpb.SourceTransformRequest{Request: &transformpb.SourceTransformRequest_Request{Id: fmt.Sprint(j)}}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := st.Recv(); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		time.Sleep(50 * time.Millisecond) // let the second 2 MiB answer arrive unread
		cancel()
		// The cancel reaches the stream from its own goroutine: an answer
		// already queued may come first, at most the one unread.
		_, err := st.Recv()
		if err == nil {
			_, err = st.Recv()
		}
		if status.Code(err) != codes.Canceled {
			t.Fatalf("stream %d after cancel: %v, want Canceled", i, err)
		}
	}
	st := open(t, ctx, cc)
	for j := range 4 {
		if err := st.Send(&transformpb.SourceTransformRequest{Request: &transformpb.SourceTransformRequest_Request{Id: fmt.Sprint(j)}}); err != nil {
			t.Fatal(err)
		}
		resp, err := st.Recv()
		if err != nil || len(resp.Results) != 2 || !bytes.Equal(resp.Results[1].Value, big) {
			t.Fatalf("answer %d after the cancelled streams: %v", j, err)
		}
	}
}

// TestMessagesOverTheLimit fails a call that sends or receives a message
// over MaxMessageSize with ResourceExhausted, and the connection serves
// the next call.
func TestMessagesOverTheLimit(t *testing.T) {
	e := &echo{reply: func(req *transformpb.SourceTransformRequest_Request) (*transformpb.SourceTransformResponse, error) {
		return &transformpb.SourceTransformResponse{Id: req.Id, Results: []*transformpb.SourceTransformResponse_Result{{Value: payload(3<<20, 0)}}}, nil
	}}
	sock, _ := serve(t, e)
	cc := dial(t, sock, 2<<20)
	ctx := testCtx(t)
	st := open(t, ctx, cc)
	err := st.Send(&transformpb.SourceTransformRequest{Request: &transformpb.SourceTransformRequest_Request{Value: payload(3<<20, 0)}})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("sending 3 MiB with a 2 MiB limit: %v", err)
	}
	if err := st.Send(&transformpb.SourceTransformRequest{Request: &transformpb.SourceTransformRequest_Request{Id: "x"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("receiving 3 MiB with a 2 MiB limit: %v", err)
	}
	if r, err := transformpb.NewSourceTransformClient(cc).IsReady(ctx, &emptypb.Empty{}); err != nil || !r.Ready {
		t.Fatalf("the next call: %v, %v", r, err)
	}
}

// TestAServerThatGoesAwayFailsCallsWithUnavailable stops the server with
// a stream open: the stream, and every call after, fails with
// Unavailable, and Done is closed.
func TestAServerThatGoesAwayFailsCallsWithUnavailable(t *testing.T) {
	sock, srv := serve(t, &echo{})
	cc := dial(t, sock, 64<<20)
	ctx := testCtx(t)
	st := open(t, ctx, cc)
	srv.Stop()
	if _, err := st.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("open stream when the server stopped: %v, want Unavailable", err)
	}
	select {
	case <-cc.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed 10s after the server stopped")
	}
	if status.Code(cc.Err()) != codes.Unavailable {
		t.Fatalf("Err() = %v", cc.Err())
	}
	if _, err := transformpb.NewSourceTransformClient(cc).IsReady(ctx, &emptypb.Empty{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("call after: %v, want Unavailable", err)
	}
}

// TestDeadlinesReachTheServer checks that a call's deadline is sent as
// grpc-timeout: the server sees one close to the client's.
func TestDeadlinesReachTheServer(t *testing.T) {
	got := make(chan time.Duration, 1)
	e := &echo{}
	e.ready = nil
	sock, _ := serve(t, e, grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if dl, ok := ctx.Deadline(); ok {
			got <- time.Until(dl)
		} else {
			got <- -1
		}
		return h(ctx, req)
	}))
	cc := dial(t, sock, 64<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := transformpb.NewSourceTransformClient(cc).IsReady(ctx, &emptypb.Empty{}); err != nil {
		t.Fatal(err)
	}
	if d := <-got; d < 25*time.Second || d > 30*time.Second {
		t.Fatalf("the server saw a deadline %v away, want about 30s", d)
	}
}

// metaEcho answers a stream with the client's metadata as its header
// and trailer, and no messages.
type metaEcho struct {
	transformpb.UnimplementedSourceTransformServer
}

func (metaEcho) SourceTransformFn(st transformpb.SourceTransform_SourceTransformFnServer) error {
	md, _ := metadata.FromIncomingContext(st.Context())
	if err := st.SendHeader(metadata.Pairs("x-seen", md.Get("x-client")[0], "x-bin-bin", md.Get("x-raw-bin")[0])); err != nil {
		return err
	}
	st.SetTrailer(metadata.Pairs("x-done", "yes"))
	return nil
}

// TestMetadataBothWays: a call's outgoing metadata (text and binary)
// reaches the server, and the server's header and trailer come back.
func TestMetadataBothWays(t *testing.T) {
	dir, err := os.MkdirTemp("", "udwire")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ln, err := net.Listen("unix", filepath.Join(dir, "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	transformpb.RegisterSourceTransformServer(srv, metaEcho{})
	go srv.Serve(ln)
	defer srv.Stop()
	cc := dial(t, filepath.Join(dir, "s.sock"), 1<<20)
	ctx := metadata.AppendToOutgoingContext(testCtx(t), "x-client", "hello", "x-raw-bin", "\x00\xff")
	st, err := transformpb.NewSourceTransformClient(cc).SourceTransformFn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Context() != ctx {
		t.Error("Context() is not the call's")
	}
	h, err := st.Header()
	if err != nil {
		t.Fatal(err)
	}
	if got := h.Get("x-seen"); len(got) != 1 || got[0] != "hello" {
		t.Errorf("header x-seen = %v", got)
	}
	if got := h.Get("x-bin-bin"); len(got) != 1 || got[0] != "\x00\xff" {
		t.Errorf("header x-bin-bin = %q", got)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("Recv: %v, want io.EOF", err)
	}
	if got := st.Trailer().Get("x-done"); len(got) != 1 || got[0] != "yes" {
		t.Errorf("trailer x-done = %v", got)
	}
}

// TestBatchesLargerThanTheirBufferStayIntact sends many small messages
// through a batch buffer far smaller than what gathers while the socket
// is busy, so batches outgrow it, and gets every message back unchanged.
func TestBatchesLargerThanTheirBufferStayIntact(t *testing.T) {
	sock, _ := serve(t, &echo{})
	nc, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	cc := udwire.New(nc, udwire.Options{Codec: codec, MaxMessageSize: 1 << 20, Window: 8 << 20, BufferSize: 512})
	defer cc.Close()
	st := open(t, testCtx(t), cc)
	const n = 3000
	sent := make(chan error, 1)
	go func() {
		for i := range n {
			req := &transformpb.SourceTransformRequest{Request: &transformpb.SourceTransformRequest_Request{Id: fmt.Sprint(i), Value: payload(900+i%100, byte(i))}}
			if err := st.Send(req); err != nil {
				sent <- err
				return
			}
		}
		sent <- st.CloseSend()
	}()
	for i := range n {
		resp, err := st.Recv()
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		if resp.Id != fmt.Sprint(i) || len(resp.Results) != 1 || !bytes.Equal(resp.Results[0].Value, payload(900+i%100, byte(i))) {
			t.Fatalf("answer %d differs from its request", i)
		}
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
}
