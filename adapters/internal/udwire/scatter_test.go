package udwire_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	transformpb "github.com/numaproj/numaflow-go/pkg/apis/proto/sourcetransform/v1"
	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/monovertex/monovertex/adapters/internal/udwire"
)

// drained waits until the client has read everything written to its end
// of the connection (SIOCINQ, what its socket holds unread), so that what
// the peer writes next arrives only after the client's last read.
func drained(t *testing.T, client net.Conn) {
	t.Helper()
	rc, err := client.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int32
		var errno syscall.Errno
		if err := rc.Control(func(fd uintptr) {
			_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&n)))
		}); err != nil || errno != 0 {
			t.Fatalf("SIOCINQ: %v %v", err, errno)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the client left %d bytes unread for 10s", n)
		}
		time.Sleep(time.Millisecond)
	}
}

// frame appends an HTTP/2 frame.
func frame(b []byte, typ, flags byte, stream uint32, payload []byte) []byte {
	b = append(b, byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload)), typ, flags)
	b = binary.BigEndian.AppendUint32(b, stream)
	return append(b, payload...)
}

const (
	typData, typPing, typWindowUpdate = 0x0, 0x6, 0x8
	flagsPadded                       = 0x8
)

// framings split a stream's bytes into DATA frames (and frames around
// them) the ways a server may: grpc-go's 16 KiB frames, sizes at random,
// frames up to the 1 MiB the client allows, control frames between
// them, padding.
var framings = []struct {
	name  string
	split func(rng *rand.Rand, stream uint32, data []byte) [][]byte
}{
	{"16KiB", func(_ *rand.Rand, stream uint32, data []byte) [][]byte {
		return dataFrames(stream, data, func() int { return 16 << 10 })
	}},
	{"random sizes", func(rng *rand.Rand, stream uint32, data []byte) [][]byte {
		return dataFrames(stream, data, func() int { return 1 + rng.IntN(40_000) })
	}},
	{"large frames", func(rng *rand.Rand, stream uint32, data []byte) [][]byte {
		return dataFrames(stream, data, func() int { return 100_000 + rng.IntN(1<<20-100_000+1) })
	}},
	{"control frames between", func(rng *rand.Rand, stream uint32, data []byte) [][]byte {
		var out [][]byte
		for _, f := range dataFrames(stream, data, func() int { return 16 << 10 }) {
			switch rng.IntN(6) {
			case 0:
				out = append(out, frame(nil, typPing, 0, 0, []byte("8 bytes!")))
			case 1:
				out = append(out, frame(nil, typWindowUpdate, 0, 0, []byte{0, 0, 1, 0}))
			case 2:
				out = append(out, frame(nil, typData, 0, stream, nil))
			}
			out = append(out, f)
		}
		return out
	}},
	{"padded", func(rng *rand.Rand, stream uint32, data []byte) [][]byte {
		var out [][]byte
		for len(data) > 0 {
			n := min(len(data), 1+rng.IntN(20_000))
			if rng.IntN(3) == 0 {
				out = append(out, frame(nil, typData, 0, stream, data[:n]))
			} else {
				pad := rng.IntN(256)
				p := append([]byte{byte(pad)}, data[:n]...)
				out = append(out, frame(nil, typData, flagsPadded, stream, append(p, make([]byte, pad)...)))
			}
			data = data[n:]
		}
		return out
	}},
}

func dataFrames(stream uint32, data []byte, size func() int) [][]byte {
	var out [][]byte
	for len(data) > 0 {
		n := min(len(data), size())
		out = append(out, frame(nil, typData, 0, stream, data[:n]))
		data = data[n:]
	}
	return out
}

// dataBytes sums the lengths of the DATA frames in wire by stream, and
// for the connection under stream 0: the bytes flow control counts.
func dataBytes(wire []byte) map[uint32]int64 {
	sum := map[uint32]int64{}
	for len(wire) >= 9 {
		length := int(wire[0])<<16 | int(wire[1])<<8 | int(wire[2])
		if wire[3] == typData {
			sid := binary.BigEndian.Uint32(wire[5:9]) & (1<<31 - 1)
			sum[sid] += int64(length)
			sum[0] += int64(length)
		}
		wire = wire[9+length:]
	}
	return sum
}

// grantLog sums the client's WINDOW_UPDATE increments by stream (0: the
// connection's).
type grantLog struct {
	mu  sync.Mutex
	inc map[uint32]int64
}

// countGrants reads the client's frames from here on and sums its window
// updates.
func countGrants(p *peer) *grantLog {
	g := &grantLog{inc: map[uint32]int64{}}
	go func() {
		for {
			f, err := p.fr.ReadFrame()
			if err != nil {
				return
			}
			if w, ok := f.(*http2.WindowUpdateFrame); ok {
				g.mu.Lock()
				g.inc[w.StreamID] += int64(w.Increment)
				g.mu.Unlock()
			}
		}
	}()
	return g
}

// flowControl keeps a peer writing wire within the windows the client
// granted (scatterWindow for the connection and each stream, and the
// grants counted since), as a server must.
type flowControl struct {
	frames []dataFrame // wire's DATA frames not yet admitted, in order
	sent   map[uint32]int64
	grants *grantLog
	at     int // how much of wire was written
}

type dataFrame struct {
	start  int
	stream uint32
	length int64
}

// scatterWindow is the client's window in TestLargeMessagesReadInPlaceWhateverTheFraming.
const scatterWindow = 4 << 20

func newFlowControl(wire []byte, grants *grantLog) *flowControl {
	fc := &flowControl{sent: map[uint32]int64{}, grants: grants}
	for off := 0; off+9 <= len(wire); {
		length := int(wire[off])<<16 | int(wire[off+1])<<8 | int(wire[off+2])
		if wire[off+3] == typData {
			fc.frames = append(fc.frames, dataFrame{off, binary.BigEndian.Uint32(wire[off+5:]) & (1<<31 - 1), int64(length)})
		}
		off += 9 + length
	}
	return fc
}

// admit returns how much of the next n bytes may be written now: up to
// the first DATA frame the windows do not have room for yet, after
// waiting for room for one that starts right here.
func (fc *flowControl) admit(t *testing.T, n int) int {
	t.Helper()
	const window = scatterWindow
	deadline := time.Now().Add(20 * time.Second)
	for len(fc.frames) > 0 && fc.frames[0].start < fc.at+n {
		f := fc.frames[0]
		fc.grants.mu.Lock()
		room := fc.sent[0]+f.length <= window+fc.grants.inc[0] && fc.sent[f.stream]+f.length <= window+fc.grants.inc[f.stream]
		fc.grants.mu.Unlock()
		switch {
		case room:
			fc.sent[0] += f.length
			fc.sent[f.stream] += f.length
			fc.frames = fc.frames[1:]
		case f.start > fc.at:
			n = f.start - fc.at // write up to it; its room comes from what is before it
		case time.Now().After(deadline):
			t.Fatalf("no window for a DATA frame of %d bytes on stream %d for 20s", f.length, f.stream)
		default:
			time.Sleep(time.Millisecond)
		}
	}
	fc.at += n
	return n
}

// checkGrants: once every answer was received, the client has granted
// back what the connection and stream carried, short of less than the
// quarter window it waits for before an update, and never more.
func checkGrants(t *testing.T, g *grantLog, sent map[uint32]int64, stream uint32, window int64) {
	t.Helper()
	quarter := window / 4
	deadline := time.Now().Add(10 * time.Second)
	for {
		g.mu.Lock()
		conn, st := g.inc[0], g.inc[stream]
		g.mu.Unlock()
		if conn > sent[0] || st > sent[stream] {
			t.Fatalf("granted %d on the connection and %d on stream %d for %d and %d bytes received: more than received", conn, st, stream, sent[0], sent[stream])
		}
		if sent[0]-conn < quarter && sent[stream]-st < quarter {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("granted %d on the connection and %d on stream %d for %d and %d bytes received: short by a quarter window or more", conn, st, stream, sent[0], sent[stream])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLargeMessagesReadInPlaceWhateverTheFraming sends two streams'
// answers, from 16 KiB to 3 MiB, framed every way above, several answers
// to a run of frames (so frames straddle messages), with the two streams'
// frames interleaved at times, and writes the bytes in chunks of any size
// (so reads end inside frame headers), over a Unix socket. Every answer
// arrives whole and in order, on its stream; the window updates give
// back what the connection and a stream carried, no more and short by
// less than a quarter window; and the reads in place both ran and had
// guesses to put back.
func TestLargeMessagesReadInPlaceWhateverTheFraming(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 11))
			a, b := udwire.SocketPair(t)
			// A window larger than the largest frame (1 MiB) by more than
			// the quarter the client waits for before granting, so that
			// a frame built in advance always fits the window at last.
			cc, p := newPeerWindow(t, a, b, scatterWindow)
			// Some 300 MB each way under the race detector on a shared
			// machine: more than newPeer's 30 s.
			b.SetDeadline(time.Now().Add(2 * time.Minute))
			var streams [2]struct {
				st   interface{ RecvMsg(any) error }
				id   uint32
				want [][]byte
			}
			for i := range streams {
				streams[i].st, streams[i].id = openStream(t, cc, p)
			}
			// From here the client's frames are only read for its window
			// updates.
			grants := countGrants(p)

			sizes := []int{16<<10 + 1, 50_000, 300_000, 1 << 20, 3<<20 - 100}
			var wire []byte
			scattered, putBack := udwire.ScatterCounts()
			for round := range 30 {
				f := framings[rng.IntN(len(framings))]
				var runs [2][][]byte
				for i := range streams {
					if i == 1 && rng.IntN(2) == 0 {
						continue // one stream this round
					}
					var run []byte
					for k := range 1 + rng.IntN(2) {
						v := payload(sizes[rng.IntN(len(sizes))], byte(round*4+i*2+k))
						streams[i].want = append(streams[i].want, v)
						run = append(run, grpcMessage(&transformpb.SourceTransformResponse{Results: []*transformpb.SourceTransformResponse_Result{{Value: v}}})...)
					}
					runs[i] = f.split(rng, streams[i].id, run)
				}
				// Interleave the two streams' frames, at random.
				for len(runs[0])+len(runs[1]) > 0 {
					i := rng.IntN(2)
					if len(runs[i]) == 0 {
						i = 1 - i
					}
					wire = append(wire, runs[i][0]...)
					runs[i] = runs[i][1:]
				}
			}

			// Stream 0 ends with a message whose last frame ends the
			// stream: no guess may read past it.
			last := payload(1<<20, 99)
			streams[0].want = append(streams[0].want, last)
			frames := dataFrames(streams[0].id, grpcMessage(&transformpb.SourceTransformResponse{Results: []*transformpb.SourceTransformResponse_Result{{Value: last}}}), func() int { return 16 << 10 })
			frames[len(frames)-1][4] |= 0x1 // END_STREAM
			for _, f := range frames {
				wire = append(wire, f...)
			}

			sent := dataBytes(wire)

			type got struct {
				values [][]byte
				err    error
				end    error // stream 0's next receive after its answers
			}
			results := make([]chan got, len(streams))
			for i := range streams {
				results[i] = make(chan got, 1)
				go func() {
					var g got
					for range streams[i].want {
						resp := new(transformpb.SourceTransformResponse)
						if g.err = streams[i].st.RecvMsg(resp); g.err != nil {
							break
						}
						g.values = append(g.values, resp.GetResults()[0].GetValue())
					}
					if i == 0 && g.err == nil {
						g.end = streams[i].st.RecvMsg(new(transformpb.SourceTransformResponse))
					}
					results[i] <- g
				}()
			}
			fc := newFlowControl(wire, grants)
			for len(wire) > 0 {
				n := min(len(wire), 1+rng.IntN(256<<10))
				if rng.IntN(4) == 0 {
					n = min(len(wire), 1+rng.IntN(12)) // a header's worth, or less
				}
				n = fc.admit(t, n)
				if _, err := b.Write(wire[:n]); err != nil {
					t.Fatal(err)
				}
				wire = wire[n:]
				if rng.IntN(8) == 0 {
					time.Sleep(200 * time.Microsecond) // let the client read what is there
				}
			}
			for i := range streams {
				var g got
				select {
				case g = <-results[i]:
				case <-time.After(30 * time.Second):
					t.Fatalf("stream %d: answers did not arrive", i)
				}
				if g.err != nil {
					t.Fatalf("stream %d: %v after %d of %d answers", i, g.err, len(g.values), len(streams[i].want))
				}
				if i == 0 && status.Code(g.end) != codes.Internal {
					t.Fatalf("stream 0 after a DATA frame that ends it: %v, want Internal (no trailers)", g.end)
				}
				for k, v := range g.values {
					if !bytes.Equal(v, streams[i].want[k]) {
						t.Fatalf("stream %d answer %d: %d bytes differ from the %d sent", i, k, len(v), len(streams[i].want[k]))
					}
				}
			}
			checkGrants(t, grants, sent, streams[1].id, scatterWindow)
			s2, pb2 := udwire.ScatterCounts()
			if s2 == scattered || pb2 == putBack {
				t.Fatalf("reads in place %d, guesses put back %d: the test did not reach them", s2-scattered, pb2-putBack)
			}
			t.Logf("%d reads in place, %d guesses put back", s2-scattered, pb2-putBack)
		})
	}
}

// TestGuessedFramesAreCheckedBeforeTheyCount: a read in place guesses
// where the next frame headers are; what lands in a guessed slot counts
// only if it is a DATA header of the stream, without padding or the end
// of the stream, and the frame before it ended where the guess said.
// Each case sends the start of the first frame, waits until the client
// has read it (so it reads the rest in place), then sends the rest at
// once.
func TestGuessedFramesAreCheckedBeforeTheyCount(t *testing.T) {
	// fakeHeader is a DATA header of the stream with the guessed length.
	fakeHeader := func(stream uint32) []byte { return frame(nil, typData, 0, stream, make([]byte, 16<<10))[:9] }
	for _, tc := range []struct {
		name string
		// frames frames msg for stream (other is a second open stream);
		// it may change msg's payload bytes.
		frames func(msg []byte, stream, other uint32) [][]byte
		ended  bool // the last frame ends the stream
		// cut, if set, is a second place where the sending pauses.
		cut func(frames [][]byte) int
	}{
		{"a frame longer than the guess, with a header's bytes where the guess ends", func(msg []byte, stream, _ uint32) [][]byte {
			copy(msg[2*16<<10:], fakeHeader(stream))
			return [][]byte{frame(nil, typData, 0, stream, msg[:16<<10]), frame(nil, typData, 0, stream, msg[16<<10:])}
		}, false, nil},
		{"a frame shorter than the guess, with a header's bytes where the guess ends", func(msg []byte, stream, _ uint32) [][]byte {
			// Frames of 16 KiB, 10,000 bytes, then the rest: the guess
			// of the third header is 6,375 bytes into the third frame.
			copy(msg[16<<10+16<<10-9:], fakeHeader(stream))
			return [][]byte{frame(nil, typData, 0, stream, msg[:16<<10]), frame(nil, typData, 0, stream, msg[16<<10:16<<10+10_000]), frame(nil, typData, 0, stream, msg[16<<10+10_000:])}
		}, false, nil},
		{"a WINDOW_UPDATE of the stream between its frames", func(msg []byte, stream, _ uint32) [][]byte {
			fs := dataFrames(stream, msg, func() int { return 16 << 10 })
			return append(fs[:2], append([][]byte{frame(nil, typWindowUpdate, 0, stream, []byte{0, 0, 1, 0})}, fs[2:]...)...)
		}, false, nil},
		{"a read that ends inside a guessed header", func(msg []byte, stream, _ uint32) [][]byte {
			return dataFrames(stream, msg, func() int { return 16 << 10 })
		}, false, func(fs [][]byte) int { return len(fs[0]) + 4 }},
		{"a frame that ends the stream", func(msg []byte, stream, _ uint32) [][]byte {
			fs := dataFrames(stream, msg, func() int { return 16 << 10 })
			fs[len(fs)-1][4] |= 0x1
			return fs
		}, true, nil},
		{"another stream's frame of the guessed length", func(msg []byte, stream, other uint32) [][]byte {
			fs := dataFrames(stream, msg, func() int { return 16 << 10 })
			// An empty answer's bytes, then padding to the guessed length.
			empty := grpcMessage(&transformpb.SourceTransformResponse{})
			foreign := frame(nil, typData, 0, other, append(empty, make([]byte, 16<<10-len(empty))...))
			return append(fs[:2], append([][]byte{foreign}, fs[2:]...)...)
		}, false, nil},
		{"a padded frame of the guessed length", func(msg []byte, stream, _ uint32) [][]byte {
			fs := dataFrames(stream, msg, func() int { return 16<<10 - 11 })
			fs[1] = frame(nil, typData, flagsPadded, stream, append(append([]byte{10}, fs[1][9:]...), make([]byte, 10)...))
			return fs
		}, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := udwire.SocketPair(t)
			cc, p := newPeerOn(t, a, b)
			st, id := openStream(t, cc, p)
			_, other := openStream(t, cc, p)
			go io.Copy(io.Discard, b)
			msg := grpcMessage(&transformpb.SourceTransformResponse{Results: []*transformpb.SourceTransformResponse_Result{{Value: payload(200_000, 3)}}})
			var wire []byte
			frames := tc.frames(msg, id, other)
			for _, f := range frames {
				wire = append(wire, f...)
			}
			cuts := []int{9 + 100}
			if tc.cut != nil {
				cuts = append(cuts, tc.cut(frames))
			}
			// The value is the message's last 200,000 bytes, as the case
			// left them.
			want := msg[len(msg)-200_000:]
			scattered, putBack := udwire.ScatterCounts()
			done := make(chan error, 1)
			var resp transformpb.SourceTransformResponse
			go func() {
				err := st.RecvMsg(&resp)
				if err == nil && tc.ended {
					if err = st.RecvMsg(new(transformpb.SourceTransformResponse)); status.Code(err) == codes.Internal {
						err = nil
					} else {
						err = fmt.Errorf("after the frame that ended the stream: %v, want Internal (no trailers)", err)
					}
				}
				done <- err
			}()
			// The client reads up to the first cut (the message's prefix)
			// before the rest is sent, so it reads the rest in place, and
			// then each part up to the next cut on its own.
			from := 0
			for _, cut := range append(cuts, len(wire)) {
				if _, err := b.Write(wire[from:cut]); err != nil {
					t.Fatal(err)
				}
				from = cut
				drained(t, a)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the answer did not arrive")
			}
			if !bytes.Equal(resp.GetResults()[0].GetValue(), want) {
				t.Fatal("the answer's value differs from the one sent")
			}
			if s2, pb2 := udwire.ScatterCounts(); s2 == scattered || pb2 == putBack {
				t.Fatalf("reads in place %d, guesses put back %d: the case did not reach them", s2-scattered, pb2-putBack)
			}
		})
	}
}

// TestAConnectionLostWhileReadingInPlace: the container goes away in the
// middle of a large message being read in place; the call fails with
// Unavailable, and the message is not handed out.
func TestAConnectionLostWhileReadingInPlace(t *testing.T) {
	a, b := udwire.SocketPair(t)
	cc, p := newPeerOn(t, a, b)
	st, id := openStream(t, cc, p)
	msg := grpcMessage(&transformpb.SourceTransformResponse{Results: []*transformpb.SourceTransformResponse_Result{{Value: payload(200_000, 5)}}})
	var wire []byte
	for _, f := range dataFrames(id, msg, func() int { return 16 << 10 }) {
		wire = append(wire, f...)
	}
	scattered, _ := udwire.ScatterCounts()
	done := make(chan error, 1)
	go func() { done <- st.RecvMsg(new(transformpb.SourceTransformResponse)) }()
	if _, err := b.Write(wire[:9+100]); err != nil {
		t.Fatal(err)
	}
	drained(t, a)
	if _, err := b.Write(wire[9+100 : 50_000]); err != nil {
		t.Fatal(err)
	}
	drained(t, a)
	b.Close()
	select {
	case err := <-done:
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("receive after the connection was lost: %v, want Unavailable", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the receive did not end")
	}
	if s2, _ := udwire.ScatterCounts(); s2 == scattered {
		t.Fatal("the message was not read in place")
	}
}
