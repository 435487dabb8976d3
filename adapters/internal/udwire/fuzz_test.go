package udwire

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/monovertex/monovertex/internal/payloadpool"
)

// rawCodec sends a fixed request and takes any answer, releasing it: the
// fuzz target is about frames, not messages.
type rawCodec struct{}

func (rawCodec) Marshal(any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer("request")}, nil
}

func (rawCodec) UnmarshalOwned(buf *payloadpool.Buffer, _ any) error {
	buf.Release()
	return nil
}

// Limits of the fuzzed client, small so that each input runs fast.
const (
	fuzzWindow     = 1 << 16
	fuzzMaxMessage = 16 << 20 // more than firstChunk: a claim past it is allowed
	fuzzMaxHeaders = 16 << 10
)

// fuzzAllocBound is the most one input may make the client allocate: the
// read buffer, a frame payload (1 MiB at most, allocated as its header
// claims it), a message's first chunk (never the size a prefix claims,
// up to fuzzMaxMessage), a window of queued messages, a header list,
// with room for the goroutines and the codec; plus a multiple of the
// input, since what arrives is kept up to the window and a message's
// buffer grows by doubling.
func fuzzAllocBound(input int) uint64 {
	return 2*maxReadFrame + 2*firstChunk + 4*fuzzWindow + 8*fuzzMaxHeaders + 4<<20 + 16*uint64(input)
}

// frameBytes is one frame, for the seeds.
func frameBytes(typ, flags byte, stream uint32, payload []byte) []byte {
	return append(appendFrameHeader(nil, len(payload), typ, flags, stream), payload...)
}

func hpackBlock(fields ...string) []byte {
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	for i := 0; i < len(fields); i += 2 {
		enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	return buf.Bytes()
}

// FuzzServerFrames drives a client with one open call by whatever bytes a
// server may send after the connection preface. However they break
// HTTP/2, the connection ends once the server closes its end (the
// client neither hangs nor panics), the call ends with a status, and the
// client allocates no more than fuzzAllocBound of the input's size.
func FuzzServerFrames(f *testing.F) {
	msg := append(binary.BigEndian.AppendUint32([]byte{0}, 3), "abc"...)
	ok := append(append(frameBytes(frameHeaders, flagEndHeaders, 1, hpackBlock(":status", "200", "content-type", "application/grpc")),
		frameBytes(frameData, 0, 1, msg)...),
		frameBytes(frameHeaders, flagEndHeaders|flagEndStream, 1, hpackBlock("grpc-status", "0"))...)
	f.Add(ok)
	f.Add(frameBytes(frameData, 0, 1, bytes.Repeat(msg, 30000)))                                 // past the window
	f.Add(frameBytes(frameData, 0, 1, binary.BigEndian.AppendUint32([]byte{0}, fuzzMaxMessage))) // a prefix claiming the most
	f.Add(frameBytes(frameData, 0, 7, []byte("x")))                                              // an idle stream
	f.Add(frameBytes(frameWindowUpdate, 0, 0, []byte{0x7f, 0xff, 0xff, 0xff}))                   // a window past 2^31-1
	f.Add(frameBytes(frameSettings, 0, 0, []byte{0, settingInitialWindowSize, 0x80, 0, 0, 0}))   // a bad setting
	f.Add(append(frameBytes(frameHeaders, 0, 1, hpackBlock(":status", "200")), frameBytes(frameContinuation, 0, 1, nil)...))
	bomb := hpackBlock("x-bin", strings.Repeat("A", 4000))
	f.Add(frameBytes(frameHeaders, flagEndHeaders, 1, append(bomb, bytes.Repeat([]byte{0x80 | 62}, 5000)...)))
	f.Fuzz(func(t *testing.T, frames []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		mine, peer := socketPair(t)
		go io.Copy(io.Discard, peer)
		c := New(mine, Options{Codec: rawCodec{}, MaxMessageSize: fuzzMaxMessage, Window: fuzzWindow, BufferSize: 64 << 10, MaxHeaderListSize: fuzzMaxHeaders})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		s, err := c.newStream(ctx, "/fuzz.Service/Call")
		if err != nil {
			t.Fatal(err)
		}
		ended := make(chan error, 1)
		go func() {
			for {
				if err := s.RecvMsg(nil); err != nil {
					ended <- err
					return
				}
			}
		}()
		peer.SetWriteDeadline(time.Now().Add(10 * time.Second))
		peer.Write(frames) // the client may end the connection first
		peer.Close()
		select {
		case <-c.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the connection did not end after the server closed its end")
		}
		select {
		case err := <-ended:
			if _, isStatus := status.FromError(err); !isStatus && err != io.EOF {
				t.Fatalf("the call ended with %v, not a status", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the call did not end with its connection")
		}
		c.Close()
		runtime.ReadMemStats(&after)
		if got, bound := after.TotalAlloc-before.TotalAlloc, fuzzAllocBound(len(frames)); got > bound {
			t.Fatalf("%d bytes of input made the client allocate %d bytes; bound %d", len(frames), got, bound)
		}
	})
}
