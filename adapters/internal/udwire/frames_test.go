package udwire_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	transformpb "github.com/numaproj/numaflow-go/pkg/apis/proto/sourcetransform/v1"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/monovertex/monovertex/adapters/internal/udwire"
)

// peer is the server end of a connection, written frame by frame, for
// what a grpc-go server does not do on demand: padding, CONTINUATION,
// pings, resets, windows of a few bytes, GOAWAY.
type peer struct {
	t   *testing.T
	nc  net.Conn
	fr  *http2.Framer
	enc *hpack.Encoder
	buf bytes.Buffer
}

// newPeer connects a ClientConn to a peer and does the connection
// preface: the client's settings, then the peer's (with extra).
func newPeer(t *testing.T, extra ...http2.Setting) (*udwire.ClientConn, *peer) {
	t.Helper()
	a, b := net.Pipe()
	return newPeerOn(t, a, b, extra...)
}

// newPeerOn is newPeer on the connection a (the client's end) and b.
func newPeerOn(t *testing.T, a, b net.Conn, extra ...http2.Setting) (*udwire.ClientConn, *peer) {
	t.Helper()
	return newPeerWindow(t, a, b, 1<<20, extra...)
}

// newPeerWindow is newPeerOn with a receive window of window bytes.
func newPeerWindow(t *testing.T, a, b net.Conn, window int, extra ...http2.Setting) (*udwire.ClientConn, *peer) {
	t.Helper()
	return newPeerOpts(t, a, b, udwire.Options{Codec: codec, MaxMessageSize: 4 << 20, Window: window}, extra...)
}

// newPeerOpts is newPeerOn with a client made with opt.
func newPeerOpts(t *testing.T, a, b net.Conn, opt udwire.Options, extra ...http2.Setting) (*udwire.ClientConn, *peer) {
	t.Helper()
	window, headers := opt.Window, opt.MaxHeaderListSize
	if headers == 0 {
		headers = udwire.DefaultMaxHeaderListSize
	}
	cc := udwire.New(a, opt)
	t.Cleanup(func() { cc.Close(); b.Close() })
	p := &peer{t: t, nc: b}
	p.enc = hpack.NewEncoder(&p.buf)
	b.SetDeadline(time.Now().Add(30 * time.Second))
	pre := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(b, pre); err != nil || string(pre) != http2.ClientPreface {
		t.Fatalf("preface %q, %v", pre, err)
	}
	p.fr = http2.NewFramer(b, b)
	p.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	p.fr.SetMaxReadFrameSize(1 << 20)
	f := p.next()
	sf, ok := f.(*http2.SettingsFrame)
	if !ok || sf.IsAck() {
		t.Fatalf("first frame %v, want the client's SETTINGS", f)
	}
	if v, ok := sf.Value(http2.SettingInitialWindowSize); !ok || v != uint32(window) {
		t.Fatalf("client's initial window %d, want %d", v, window)
	}
	if v, ok := sf.Value(http2.SettingMaxHeaderListSize); !ok || v != uint32(headers) {
		t.Fatalf("client's SETTINGS_MAX_HEADER_LIST_SIZE %d (sent: %v), want %d", v, ok, headers)
	}
	if err := p.fr.WriteSettings(extra...); err != nil {
		t.Fatal(err)
	}
	return cc, p
}

// next reads the next frame that is not a window update or settings ack.
func (p *peer) next() http2.Frame {
	p.t.Helper()
	for {
		f, err := p.fr.ReadFrame()
		if err != nil {
			p.t.Fatalf("peer read: %v", err)
		}
		switch f := f.(type) {
		case *http2.WindowUpdateFrame:
			continue
		case *http2.SettingsFrame:
			if f.IsAck() {
				continue
			}
		}
		return f
	}
}

func (p *peer) block(fields ...string) []byte {
	p.buf.Reset()
	for i := 0; i < len(fields); i += 2 {
		p.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	return append([]byte(nil), p.buf.Bytes()...)
}

func (p *peer) headers(stream uint32, end bool, fields ...string) {
	p.t.Helper()
	if err := p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: p.block(fields...), EndHeaders: true, EndStream: end}); err != nil {
		p.t.Fatal(err)
	}
}

// request reads a unary call's headers and message.
func (p *peer) request() (stream uint32, fields map[string]string) {
	p.t.Helper()
	h, ok := p.next().(*http2.MetaHeadersFrame)
	if !ok {
		p.t.Fatal("want the call's HEADERS")
	}
	fields = map[string]string{}
	for _, f := range h.Fields {
		fields[f.Name] = f.Value
	}
	for {
		d, ok := p.next().(*http2.DataFrame)
		if !ok {
			p.t.Fatal("want the call's DATA")
		}
		if d.StreamEnded() {
			return h.StreamID, fields
		}
	}
}

func grpcMessage(m proto.Message) []byte {
	b, _ := proto.Marshal(m)
	return append(binary.BigEndian.AppendUint32([]byte{0}, uint32(len(b))), b...)
}

type result struct {
	ready bool
	err   error
}

func isReady(cc *udwire.ClientConn) chan result {
	ch := make(chan result, 1)
	go func() {
		r, err := transformpb.NewSourceTransformClient(cc).IsReady(context.Background(), &emptypb.Empty{})
		ch <- result{r.GetReady(), err}
	}()
	return ch
}

func wait(t *testing.T, ch chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("the call did not end")
		return result{}
	}
}

// TestPingsAndSettingsAreAcknowledged: a PING comes back as its ACK with
// the same data, and SETTINGS are acknowledged.
func TestPingsAndSettingsAreAcknowledged(t *testing.T) {
	_, p := newPeer(t)
	if err := p.fr.WritePing(false, [8]byte{1, 2, 3, 4, 5, 6, 7, 8}); err != nil {
		t.Fatal(err)
	}
	if f, ok := p.next().(*http2.PingFrame); !ok || !f.IsAck() || f.Data != [8]byte{1, 2, 3, 4, 5, 6, 7, 8} {
		t.Fatalf("want the PING's ACK, got %v", f)
	}
	if err := p.fr.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 15}); err != nil {
		t.Fatal(err)
	}
	p.settingsAck()
}

// settingsAck reads frames until the client's SETTINGS acknowledgement.
func (p *peer) settingsAck() {
	p.t.Helper()
	for {
		f, err := p.fr.ReadFrame()
		if err != nil {
			p.t.Fatal(err)
		}
		if s, ok := f.(*http2.SettingsFrame); ok && s.IsAck() {
			return
		}
	}
}

// TestAnswerSplitEveryWayHTTP2Allows: the answer's headers continue in a
// CONTINUATION frame, its message prefix is split across DATA frames,
// the DATA is padded, and the trailers end the call.
func TestAnswerSplitEveryWayHTTP2Allows(t *testing.T) {
	cc, p := newPeer(t)
	ch := isReady(cc)
	id, fields := p.request()
	for k, v := range map[string]string{":method": "POST", ":path": "/sourcetransformer.v1.SourceTransform/IsReady", "content-type": "application/grpc", "te": "trailers", ":scheme": "http"} {
		if fields[k] != v {
			t.Errorf("request header %s = %q, want %q", k, fields[k], v)
		}
	}
	block := p.block(":status", "200", "content-type", "application/grpc", "x-extra", "yes")
	if err := p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block[:3]}); err != nil {
		t.Fatal(err)
	}
	if err := p.fr.WriteContinuation(id, true, block[3:]); err != nil {
		t.Fatal(err)
	}
	msg := grpcMessage(&transformpb.ReadyResponse{Ready: true})
	if err := p.fr.WriteDataPadded(id, false, msg[:3], make([]byte, 5)); err != nil {
		t.Fatal(err)
	}
	if err := p.fr.WriteDataPadded(id, false, msg[3:], []byte{0}); err != nil {
		t.Fatal(err)
	}
	p.headers(id, true, "grpc-status", "0")
	if r := wait(t, ch); r.err != nil || !r.ready {
		t.Fatalf("IsReady = %v, %v", r.ready, r.err)
	}
}

// TestCallEndings: how a call that does not end with a message and
// grpc-status 0 is reported.
func TestCallEndings(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(p *peer, id uint32)
		code codes.Code
		msg  string
	}{
		{"trailers only", func(p *peer, id uint32) {
			p.headers(id, true, ":status", "200", "content-type", "application/grpc", "grpc-status", "5", "grpc-message", "no%20such%20thing%25")
		}, codes.NotFound, "no such thing%"},
		{"HTTP 503", func(p *peer, id uint32) { p.headers(id, true, ":status", "503") }, codes.Unavailable, ""},
		{"refused", func(p *peer, id uint32) { p.fr.WriteRSTStream(id, http2.ErrCodeRefusedStream) }, codes.Unavailable, ""},
		{"cancelled", func(p *peer, id uint32) { p.fr.WriteRSTStream(id, http2.ErrCodeCancel) }, codes.Canceled, ""},
		{"no trailers", func(p *peer, id uint32) {
			p.headers(id, false, ":status", "200", "content-type", "application/grpc")
			p.fr.WriteData(id, true, nil)
		}, codes.Internal, ""},
		{"not gRPC", func(p *peer, id uint32) { p.headers(id, false, ":status", "200", "content-type", "text/html") }, codes.Internal, ""},
		{"going away", func(p *peer, id uint32) { p.fr.WriteGoAway(0, http2.ErrCodeNo, []byte("bye")) }, codes.Unavailable, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cc, p := newPeer(t)
			ch := isReady(cc)
			id, _ := p.request()
			tc.end(p, id)
			r := wait(t, ch)
			if st := status.Convert(r.err); st.Code() != tc.code || (tc.msg != "" && st.Message() != tc.msg) {
				t.Fatalf("got %v, want %v %q", r.err, tc.code, tc.msg)
			}
		})
	}
}

// TestGoAwayEndsTheConnectionOnceIdle: after a GOAWAY new calls fail with
// Unavailable and Done closes.
func TestGoAwayEndsTheConnectionOnceIdle(t *testing.T) {
	cc, p := newPeer(t)
	if err := p.fr.WriteGoAway(0, http2.ErrCodeNo, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cc.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed after GOAWAY")
	}
	if r := wait(t, isReady(cc)); status.Code(r.err) != codes.Unavailable {
		t.Fatalf("call after GOAWAY: %v", r.err)
	}
}

// TestSendsStayWithinTheGrantedWindow: with an initial window of 0 the
// client sends nothing of a message until granted, and then never more
// than granted, frame by frame, until the whole message is there.
func TestSendsStayWithinTheGrantedWindow(t *testing.T) {
	cc, p := newPeer(t, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	// The client acknowledges the settings before it opens the stream
	// below, so the window of 0 applies to it.
	p.settingsAck()
	value := bytes.Repeat([]byte("0123456789"), 4000) // 40,000 bytes: several frames
	want := grpcMessage(&transformpb.SourceTransformRequest{Request: &transformpb.SourceTransformRequest_Request{Value: value}})
	sent := make(chan error, 1)
	go func() {
		st, err := transformpb.NewSourceTransformClient(cc).SourceTransformFn(context.Background())
		if err == nil {
			err = st.Send(&transformpb.SourceTransformRequest{Request: &transformpb.SourceTransformRequest_Request{Value: value}})
		}
		sent <- err
	}()
	h, ok := p.next().(*http2.MetaHeadersFrame)
	if !ok {
		t.Fatal("want HEADERS")
	}
	var got []byte
	for grant := 1; len(got) < len(want); grant *= 7 {
		if err := p.fr.WriteWindowUpdate(h.StreamID, uint32(grant)); err != nil {
			t.Fatal(err)
		}
		inWindow := 0
		for inWindow < grant && len(got) < len(want) {
			d, ok := p.next().(*http2.DataFrame)
			if !ok {
				t.Fatal("want DATA")
			}
			inWindow += len(d.Data())
			got = append(got, d.Data()...)
		}
		if inWindow > grant {
			t.Fatalf("sent %d bytes in a window of %d", inWindow, grant)
		}
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the message arrived changed")
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
}

// TestBadFramesEndTheConnection: frames that break HTTP/2 end the
// connection with a GOAWAY, and calls fail.
func TestBadFramesEndTheConnection(t *testing.T) {
	cc, p := newPeer(t)
	ch := isReady(cc)
	id, _ := p.request()
	if err := p.fr.WriteContinuation(id, true, []byte{0x82}); err != nil { // CONTINUATION with no HEADERS before it
		t.Fatal(err)
	}
	if f, ok := p.next().(*http2.GoAwayFrame); !ok || f.ErrCode != http2.ErrCodeProtocol {
		t.Fatalf("want GOAWAY with PROTOCOL_ERROR, got %v", f)
	}
	if r := wait(t, ch); status.Code(r.err) != codes.Internal {
		t.Fatalf("call: %v", r.err)
	}
	<-cc.Done()
	if err := cc.Err(); err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("Err() = %v", err)
	}
}

// openStream starts a SourceTransformFn call on cc and reads its HEADERS
// at the peer.
func openStream(t *testing.T, cc *udwire.ClientConn, p *peer) (grpc.BidiStreamingClient[transformpb.SourceTransformRequest, transformpb.SourceTransformResponse], uint32) {
	t.Helper()
	st, err := transformpb.NewSourceTransformClient(cc).SourceTransformFn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	h, ok := p.next().(*http2.MetaHeadersFrame)
	if !ok {
		t.Fatal("want HEADERS")
	}
	p.headers(h.StreamID, false, ":status", "200", "content-type", "application/grpc")
	return st, h.StreamID
}

func answer(id string) []byte {
	return grpcMessage(&transformpb.SourceTransformResponse{Id: id})
}

// TestAnswersBeforeALostConnectionAreHandedOut: answers that arrived
// before the connection dropped are received first, then Unavailable,
// as with grpc-go (a sink's results are not thrown away, and retried,
// because the container crashed right after sending them).
func TestAnswersBeforeALostConnectionAreHandedOut(t *testing.T) {
	cc, p := newPeer(t)
	st, id := openStream(t, cc, p)
	if err := p.fr.WriteData(id, false, append(answer("a"), answer("b")...)); err != nil {
		t.Fatal(err)
	}
	// Wait until the client has read the frame: it answers a ping after it.
	if err := p.fr.WritePing(false, [8]byte{9}); err != nil {
		t.Fatal(err)
	}
	if f, ok := p.next().(*http2.PingFrame); !ok || !f.IsAck() {
		t.Fatalf("want the PING's ACK, got %v", f)
	}
	p.nc.Close()
	<-cc.Done()
	for _, want := range []string{"a", "b"} {
		resp, err := st.Recv()
		if err != nil || resp.Id != want {
			t.Fatalf("Recv = %v, %v; want the answer %q received before the connection dropped", resp, err, want)
		}
	}
	if _, err := st.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("after the answers: %v, want Unavailable", err)
	}
}

// TestGoAwayDrainsTheConnection: after a GOAWAY that still covers an open
// stream, Draining is closed at once (its owner makes a new connection),
// the stream goes on, and the connection ends with it.
func TestGoAwayDrainsTheConnection(t *testing.T) {
	cc, p := newPeer(t)
	st, id := openStream(t, cc, p)
	if err := p.fr.WriteGoAway(id, http2.ErrCodeNo, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cc.Draining():
	case <-time.After(10 * time.Second):
		t.Fatal("Draining not closed after GOAWAY")
	}
	select {
	case <-cc.Done():
		t.Fatal("the connection ended with a stream still open")
	default:
	}
	if err := p.fr.WriteData(id, false, answer("late")); err != nil {
		t.Fatal(err)
	}
	if resp, err := st.Recv(); err != nil || resp.Id != "late" {
		t.Fatalf("Recv on the draining connection: %v, %v", resp, err)
	}
	p.headers(id, true, "grpc-status", "0")
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the trailers: %v, want io.EOF", err)
	}
	select {
	case <-cc.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed after the last stream of a GOAWAY ended")
	}
}

// TestTrailersInsideAMessageFailTheCall: trailers with grpc-status 0 that
// come while a message is half read are Internal, not a clean end.
func TestTrailersInsideAMessageFailTheCall(t *testing.T) {
	cc, p := newPeer(t)
	st, id := openStream(t, cc, p)
	if err := p.fr.WriteData(id, false, answer("cut")[:4]); err != nil {
		t.Fatal(err)
	}
	p.headers(id, true, "grpc-status", "0")
	if _, err := st.Recv(); status.Code(err) != codes.Internal {
		t.Fatalf("Recv = %v, want Internal", err)
	}
}
