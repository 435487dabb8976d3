package udwire_test

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	transformpb "github.com/numaproj/numaflow-go/pkg/apis/proto/sourcetransform/v1"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/monovertex/monovertex/adapters/internal/udwire"
)

// raw is a frame as a peer may write it, valid or not.
type raw struct {
	typ    http2.FrameType
	flags  http2.Flags
	stream uint32 // 0, or streamOpen for the open stream's id
	body   []byte
}

// streamOpen stands for the id of the stream a case opened.
const streamOpen = 1<<31 - 1

func u32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

func setting(id http2.SettingID, v uint32) []byte {
	return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint16(nil, uint16(id)), v)
}

// bomb is a header block that adds one 4 KiB -bin field to the dynamic
// table, then refers to it by its one-byte index n times: n*4 KiB of
// header list from n bytes.
func bomb(n int) []byte {
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
	enc.WriteField(hpack.HeaderField{Name: "x-bomb-bin", Value: strings.Repeat("A", 4000)})
	return append(buf.Bytes(), bytes.Repeat([]byte{0x80 | 62}, n)...) // 62: the newest dynamic entry
}

// TestEachFrameRuleEndsTheConnectionNamingIt: a frame that breaks a rule
// of RFC 9113 (or a limit this client set) ends the connection with a
// GOAWAY of the code the RFC gives, and the connection's error names the
// rule broken.
func TestEachFrameRuleEndsTheConnectionNamingIt(t *testing.T) {
	cont := func(n int) []raw {
		out := []raw{{http2.FrameHeaders, 0, streamOpen, []byte{0x88}}} // :status 200, no END_HEADERS
		for range n {
			out = append(out, raw{http2.FrameContinuation, 0, streamOpen, nil})
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		frames []raw
		code   http2.ErrCode
		want   string
	}{
		{"DATA on stream 0", []raw{{http2.FrameData, 0, 0, []byte("x")}}, http2.ErrCodeProtocol, "DATA on stream 0"},
		{"DATA on an idle stream", []raw{{http2.FrameData, 0, 99, []byte("x")}}, http2.ErrCodeProtocol, "DATA on stream 99, which this client never opened"},
		{"HEADERS on a server's even stream", []raw{{http2.FrameHeaders, http2.FlagHeadersEndHeaders, 2, []byte{0x88}}}, http2.ErrCodeProtocol, "HEADERS on stream 2, which this client never opened"},
		{"HEADERS on stream 0", []raw{{http2.FrameHeaders, http2.FlagHeadersEndHeaders, 0, []byte{0x88}}}, http2.ErrCodeProtocol, "HEADERS on stream 0"},
		{"RST_STREAM on stream 0", []raw{{http2.FrameRSTStream, 0, 0, u32(8)}}, http2.ErrCodeProtocol, "RST_STREAM on stream 0"},
		{"RST_STREAM on an idle stream", []raw{{http2.FrameRSTStream, 0, 7, u32(8)}}, http2.ErrCodeProtocol, "RST_STREAM on stream 7, which this client never opened"},
		{"RST_STREAM of 3 bytes", []raw{{http2.FrameRSTStream, 0, streamOpen, []byte{0, 0, 8}}}, http2.ErrCodeFrameSize, "RST_STREAM of 3 bytes"},
		{"WINDOW_UPDATE on an idle stream", []raw{{http2.FrameWindowUpdate, 0, 9, u32(1)}}, http2.ErrCodeProtocol, "WINDOW_UPDATE on stream 9, which this client never opened"},
		{"WINDOW_UPDATE of 0 on the connection", []raw{{http2.FrameWindowUpdate, 0, 0, u32(0)}}, http2.ErrCodeProtocol, "WINDOW_UPDATE of 0 on stream 0"},
		{"WINDOW_UPDATE of 0 on a stream", []raw{{http2.FrameWindowUpdate, 0, streamOpen, u32(0)}}, http2.ErrCodeProtocol, "WINDOW_UPDATE of 0 on stream 1"},
		{"WINDOW_UPDATE past 2^31-1 on the connection", []raw{{http2.FrameWindowUpdate, 0, 0, u32(1<<31 - 1)}}, http2.ErrCodeFlowControl, "takes its send window past 2^31-1"},
		{"WINDOW_UPDATE past 2^31-1 on a stream", []raw{{http2.FrameWindowUpdate, 0, streamOpen, u32(1<<31 - 1)}}, http2.ErrCodeFlowControl, "WINDOW_UPDATE of 2147483647 on stream 1 takes its send window past 2^31-1"},
		{"PING on a stream", []raw{{http2.FramePing, 0, streamOpen, make([]byte, 8)}}, http2.ErrCodeProtocol, "PING on stream 1; it belongs on stream 0"},
		{"PING of 7 bytes", []raw{{http2.FramePing, 0, 0, make([]byte, 7)}}, http2.ErrCodeFrameSize, "PING of 7 bytes"},
		{"SETTINGS on a stream", []raw{{http2.FrameSettings, 0, streamOpen, nil}}, http2.ErrCodeProtocol, "SETTINGS on stream 1; it belongs on stream 0"},
		{"GOAWAY on a stream", []raw{{http2.FrameGoAway, 0, streamOpen, make([]byte, 8)}}, http2.ErrCodeProtocol, "GOAWAY on stream 1; it belongs on stream 0"},
		{"SETTINGS of 5 bytes", []raw{{http2.FrameSettings, 0, 0, make([]byte, 5)}}, http2.ErrCodeFrameSize, "SETTINGS of 5 bytes, not a multiple of 6"},
		{"SETTINGS acknowledgement with a payload", []raw{{http2.FrameSettings, http2.FlagSettingsAck, 0, make([]byte, 6)}}, http2.ErrCodeFrameSize, "SETTINGS acknowledgement with 6 bytes"},
		{"SETTINGS_ENABLE_PUSH from a server", []raw{{http2.FrameSettings, 0, 0, setting(http2.SettingEnablePush, 1)}}, http2.ErrCodeProtocol, "SETTINGS_ENABLE_PUSH 1"},
		{"SETTINGS_INITIAL_WINDOW_SIZE of 2^31", []raw{{http2.FrameSettings, 0, 0, setting(http2.SettingInitialWindowSize, 1<<31)}}, http2.ErrCodeFlowControl, "SETTINGS_INITIAL_WINDOW_SIZE 2147483648"},
		{"SETTINGS_MAX_FRAME_SIZE below 16384", []raw{{http2.FrameSettings, 0, 0, setting(http2.SettingMaxFrameSize, 100)}}, http2.ErrCodeProtocol, "SETTINGS_MAX_FRAME_SIZE 100"},
		{"a frame over SETTINGS_MAX_FRAME_SIZE", []raw{{http2.FrameData, 0, streamOpen, make([]byte, 1<<20+1)}}, http2.ErrCodeFrameSize, "a DATA frame of 1048577 bytes, more than the 1048576"},
		{"PRIORITY of 4 bytes", []raw{{http2.FramePriority, 0, streamOpen, make([]byte, 4)}}, http2.ErrCodeFrameSize, "PRIORITY of 4 bytes, not 5"},
		{"PUSH_PROMISE", []raw{{http2.FramePushPromise, http2.FlagPushPromiseEndHeaders, streamOpen, make([]byte, 5)}}, http2.ErrCodeProtocol, "PUSH_PROMISE"},
		{"CONTINUATION without HEADERS", []raw{{http2.FrameContinuation, http2.FlagContinuationEndHeaders, streamOpen, []byte{0x88}}}, http2.ErrCodeProtocol, "CONTINUATION on stream 1 without HEADERS before it"},
		{"another frame inside a header block", append(cont(0), raw{http2.FramePing, 0, 0, make([]byte, 8)}), http2.ErrCodeProtocol, "a PING frame inside the header block of stream 1, where only CONTINUATION may come"},
		{"CONTINUATION of another stream", append(cont(0), raw{http2.FrameContinuation, 0, 3, nil}), http2.ErrCodeProtocol, "CONTINUATION on stream 3 inside the header block of stream 1"},
		{"a flood of empty CONTINUATION frames", cont(5000), http2.ErrCodeProtocol, "the header block of stream 1 goes on past 2064 CONTINUATION frames"},
		{"an HPACK bomb", []raw{{http2.FrameHeaders, http2.FlagHeadersEndHeaders, streamOpen, bomb(1<<20 - 8192)}}, http2.ErrCodeProtocol, "the header list of stream 1 exceeds 16777216 bytes (SETTINGS_MAX_HEADER_LIST_SIZE)"},
		{"a header block that does not decode", []raw{{http2.FrameHeaders, http2.FlagHeadersEndHeaders, streamOpen, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}}, http2.ErrCodeCompression, "header block of stream 1"},
		{"DATA past the stream's window", dataFrames16K(streamOpen, 1<<20+1), http2.ErrCodeFlowControl, "on stream 1 exceeds the 0 bytes left of its flow-control window"},
		{"DATA past the connection's window", append(dataFrames16K(streamOpen, 200_000)[:1], raw{http2.FrameData, 0, streamOpen, make([]byte, 200_000)}, raw{http2.FrameData, 0, streamOpen, make([]byte, 1<<20)}), http2.ErrCodeFlowControl, "DATA of 1048576 bytes exceeds the 832192 bytes left of the connection's flow-control window"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := udwire.SocketPair(t)
			cc, p := newPeerOn(t, a, b)
			st, id := openStream(t, cc, p)
			var recv chan error
			if !strings.HasPrefix(tc.name, "DATA past") {
				// (Past a window, nobody asks for messages: nothing of the
				// stream's window comes back.)
				recv = make(chan error, 1)
				go func() { recv <- st.RecvMsg(new(transformpb.SourceTransformResponse)) }()
			}
			go func() {
				for _, f := range tc.frames {
					sid := f.stream
					if sid == streamOpen {
						sid = id
					}
					if err := p.fr.WriteRawFrame(f.typ, f.flags, sid, f.body); err != nil {
						return // the client closed the connection
					}
				}
			}()
			code := goAwayCode(t, p)
			if code != tc.code {
				t.Errorf("GOAWAY code %v, want %v", code, tc.code)
			}
			select {
			case <-cc.Done():
			case <-time.After(20 * time.Second):
				t.Fatal("the connection did not end")
			}
			err := cc.Err()
			if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Err() = %v, want Internal naming %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("Err() spans lines: %q", err)
			}
			if recv != nil {
				if err := <-recv; status.Code(err) != codes.Internal {
					t.Fatalf("the open call ended with %v, want the connection's Internal", err)
				}
			}
		})
	}
}

// dataFrames16K is n bytes of DATA on stream in frames of 16 KiB, the
// first starting a message that claims to be longer than n.
func dataFrames16K(stream uint32, n int) []raw {
	body := make([]byte, n)
	binary.BigEndian.PutUint32(body[1:], uint32(4<<20))
	var out []raw
	for len(body) > 0 {
		k := min(len(body), 16<<10)
		out = append(out, raw{http2.FrameData, 0, stream, body[:k]})
		body = body[k:]
	}
	return out
}

// goAwayCode reads the client's frames until its GOAWAY, and returns its
// code; it fails the test if the connection ends without one.
func goAwayCode(t *testing.T, p *peer) http2.ErrCode {
	t.Helper()
	for {
		f, err := p.fr.ReadFrame()
		if err != nil {
			t.Fatalf("the connection ended without a GOAWAY: %v", err)
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			return g.ErrCode
		}
	}
}

// TestNoStreamWindowForBytesNobodyAskedFor: a server's DATA for a stream
// whose messages nobody reads gets no stream window back, however much
// of the window it fills; once a RecvMsg waits for the message, what
// came is granted.
func TestNoStreamWindowForBytesNobodyAskedFor(t *testing.T) {
	a, b := udwire.SocketPair(t)
	cc, p := newPeerOn(t, a, b)
	st, id := openStream(t, cc, p)
	grants := countGrants(p)
	// 600 KB of a message of 3 MiB: over a quarter of the 1 MiB window.
	for _, f := range dataFrames16K(id, 600_000) {
		if err := p.fr.WriteRawFrame(f.typ, f.flags, id, f.body); err != nil {
			t.Fatal(err)
		}
	}
	drained(t, a)
	time.Sleep(100 * time.Millisecond) // a grant would be on its way by now
	grants.mu.Lock()
	early := grants.inc[id]
	grants.mu.Unlock()
	if early != 0 {
		t.Fatalf("granted %d bytes on stream %d before anybody asked for a message", early, id)
	}
	go st.RecvMsg(new(transformpb.SourceTransformResponse))
	deadline := time.Now().Add(10 * time.Second)
	for {
		grants.mu.Lock()
		got := grants.inc[id]
		grants.mu.Unlock()
		if got == 600_000 {
			break
		}
		if got > 600_000 || time.Now().After(deadline) {
			t.Fatalf("granted %d bytes on stream %d once a RecvMsg waited, want the 600000 received", got, id)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cc.Close()
}

// TestUnreadMessagesAreBounded: a stream holds at most max(1024, window/64)
// messages nobody read (16384 at newPeer's 1 MiB); a server that sends
// more, each empty, fails the call with ResourceExhausted, and the
// messages already queued are dropped.
func TestUnreadMessagesAreBounded(t *testing.T) {
	a, b := udwire.SocketPair(t)
	cc, p := newPeerOn(t, a, b)
	st, id := openStream(t, cc, p)
	empty := grpcMessage(&transformpb.SourceTransformResponse{})
	if err := p.fr.WriteData(id, false, bytes.Repeat(empty, 16384+1)); err != nil {
		t.Fatal(err)
	}
	if f, ok := p.next().(*http2.RSTStreamFrame); !ok || f.StreamID != id {
		t.Fatalf("want the stream's RST_STREAM, got %v", f)
	}
	err := st.RecvMsg(new(transformpb.SourceTransformResponse))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "more than 16384 messages") {
		t.Fatalf("RecvMsg = %v, want ResourceExhausted for more than 16384 unread messages", err)
	}
	if cc.Err() != nil {
		t.Fatalf("the connection ended: %v", cc.Err())
	}
}

// TestAHeaderListWithinTheLimitIsTaken: a response header list of a few
// MiB in CONTINUATION frames, within grpc-go's 16 MiB, arrives whole (the
// limit is grpc-go's, not lower), and SETTINGS said what the limit is.
func TestAHeaderListWithinTheLimitIsTaken(t *testing.T) {
	a, b := udwire.SocketPair(t)
	cc, p := newPeerOn(t, a, b)
	st, err := transformpb.NewSourceTransformClient(cc).SourceTransformFn(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	h, ok := p.next().(*http2.MetaHeadersFrame)
	if !ok {
		t.Fatal("want HEADERS")
	}
	big := strings.Repeat("v", 2<<20)
	block := p.block(":status", "200", "content-type", "application/grpc", "x-big", big)
	go func() {
		first := true
		for len(block) > 0 {
			n := min(len(block), 16<<10)
			if first {
				p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: h.StreamID, BlockFragment: block[:n], EndHeaders: n == len(block)})
			} else {
				p.fr.WriteContinuation(h.StreamID, n == len(block), block[:n])
			}
			first, block = false, block[n:]
		}
	}()
	md, err := st.Header()
	if err != nil || len(md.Get("x-big")) != 1 || md.Get("x-big")[0] != big {
		t.Fatalf("Header() = %d values, %v; want the 2 MiB header", len(md.Get("x-big")), err)
	}
	if cc.Err() != nil {
		t.Fatal(cc.Err())
	}
}

// TestHeaderLimitsFollowTheSetting: with SETTINGS_MAX_HEADER_LIST_SIZE of
// 4 KiB, a list over it ends the connection, and so does a block of more
// than twice that many bytes that decodes to nothing at all (dynamic table
// size updates), which no field count would stop.
func TestHeaderLimitsFollowTheSetting(t *testing.T) {
	for _, tc := range []struct {
		name   string
		frames func(p *peer) [][]byte
		want   string
	}{
		{"a list over the limit", func(p *peer) [][]byte {
			return [][]byte{p.block(":status", "200", "x-big", strings.Repeat("v", 4<<10))}
		}, "the header list of stream 1 exceeds 4096 bytes (SETTINGS_MAX_HEADER_LIST_SIZE)"},
		{"table size updates past twice the limit", func(*peer) [][]byte {
			updates := bytes.Repeat([]byte{0x20}, 3<<10)
			return [][]byte{updates, updates, updates}
		}, "the header block of stream 1 goes on past 8192 bytes encoded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := udwire.SocketPair(t)
			cc, p := newPeerOpts(t, a, b, udwire.Options{Codec: codec, MaxMessageSize: 1 << 20, Window: 1 << 20, MaxHeaderListSize: 4 << 10})
			_, id := openStream(t, cc, p)
			go func() {
				frames := tc.frames(p)
				for i, f := range frames {
					var err error
					if i == 0 {
						err = p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: f, EndHeaders: len(frames) == 1, EndStream: true})
					} else {
						err = p.fr.WriteContinuation(id, i == len(frames)-1, f)
					}
					if err != nil {
						return
					}
				}
			}()
			if code := goAwayCode(t, p); code != http2.ErrCodeProtocol {
				t.Errorf("GOAWAY code %v, want PROTOCOL_ERROR", code)
			}
			<-cc.Done()
			if err := cc.Err(); !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Err() = %v, want it to name %q", err, tc.want)
			}
		})
	}
}
