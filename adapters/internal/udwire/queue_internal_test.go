package udwire

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

// socketPair returns the two ends of a connected Unix stream socket.
func socketPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var ends [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		ends[i] = c
	}
	return ends[0], ends[1]
}

// TestSmallFramesWrittenAtOnceKeepTheirOrder: frames queued while the
// socket is free are written by the caller at once; once the socket is
// full what a write left over goes back in front of the batch, so the
// peer gets every frame in the order queued, from callers on several
// goroutines.
func TestSmallFramesWrittenAtOnceKeepTheirOrder(t *testing.T) {
	mine, peer := socketPair(t)
	defer peer.Close()
	c := New(mine, Options{})
	defer c.Close()
	if c.raw == nil {
		t.Fatal("a Unix socket has raw system calls")
	}
	const chunk, per, callers = 1000, 250, 8 // 2 MB: ten times the socket's buffer
	var want []byte                          // what was queued, in the order queued (under c.bmu)
	var wg sync.WaitGroup
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				c.queue(func(b []byte) []byte {
					start := len(b)
					b = binary.BigEndian.AppendUint32(b, uint32(g<<16|i))
					b = append(b, bytes.Repeat([]byte{byte(i)}, chunk-4)...)
					want = append(want, b[start:]...)
					return b
				})
			}
		}()
	}
	// The peer reads only after the socket filled up.
	time.Sleep(100 * time.Millisecond)
	initial := len(preface) + frameHeaderLen + 3*6
	got := make([]byte, initial+callers*per*chunk)
	peer.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadFull(peer, got); err != nil {
		t.Fatalf("reading what was queued: %v", err)
	}
	wg.Wait()
	if string(got[:len(preface)]) != preface {
		t.Fatalf("the stream does not start with the client preface: %q", got[:len(preface)])
	}
	if rest := got[initial:]; !bytes.Equal(rest, want) {
		for i := range rest {
			if rest[i] != want[i] {
				t.Fatalf("the frames differ from byte %d of %d on: the order queued was not kept", i, len(want))
			}
		}
	}
}
