package udwire

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// socketPair is a connected pair of Unix stream sockets: unlike net.Pipe,
// the client's end has raw system calls, so it reads in place and writes
// without waiting.
func socketPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var conns [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), fmt.Sprintf("socketpair-%d", i))
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	return conns[0], conns[1]
}

// clientStart is how many bytes New writes first with Options{}: the
// preface and a SETTINGS frame of four settings (no window update at the
// default window).
const clientStart = len(preface) + frameHeaderLen + 4*6

// TestWhatAWriteLeftGoesFirst: after a partial write the batch is the
// rest of what was written, then what others queued meanwhile.
func TestWhatAWriteLeftGoesFirst(t *testing.T) {
	for _, c := range []struct {
		out    string
		n      int
		queued string
		want   string
	}{
		{"abcdef", 2, "XY", "cdefXY"},
		{"abcdef", 0, "", "abcdef"},
		{"abcdef", 0, "XY", "abcdefXY"},
		{"abcdef", 5, "XYZWV", "fXYZWV"},
	} {
		if got := string(unwritten([]byte(c.out), c.n, []byte(c.queued))); got != c.want {
			t.Errorf("unwritten(%q, %d, %q) = %q, want %q", c.out, c.n, c.queued, got, c.want)
		}
	}
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
	got := make([]byte, clientStart+callers*per*chunk)
	peer.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadFull(peer, got); err != nil {
		t.Fatalf("reading what was queued: %v", err)
	}
	wg.Wait()
	if string(got[:len(preface)]) != preface {
		t.Fatalf("the stream does not start with the client preface: %q", got[:len(preface)])
	}
	if rest := got[clientStart:]; !bytes.Equal(rest, want) {
		for i := range rest {
			if rest[i] != want[i] {
				t.Fatalf("the frames differ from byte %d of %d on: the order queued was not kept", i, len(want))
			}
		}
	}
}

// TestAControlFrameIsOnTheSocketWhenQueueReturns: with the socket free, the
// goroutine that queues a window update writes it before queue returns.
// With one P and no yield in between, the writer goroutine cannot have
// run, so the frame is there only if queue wrote it itself.
func TestAControlFrameIsOnTheSocketWhenQueueReturns(t *testing.T) {
	mine, peer := socketPair(t)
	defer peer.Close()
	c := New(mine, Options{})
	defer c.Close()
	initial := make([]byte, clientStart)
	peer.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadFull(peer, initial); err != nil { // the writer goroutine is idle after this
		t.Fatalf("reading the preface and settings: %v", err)
	}
	rc, err := peer.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for i := range 20 {
		time.Sleep(time.Millisecond) // let the writer goroutine park again
		c.queue(func(b []byte) []byte { return appendWindowUpdate(b, 0, uint32(i+1)) })
		var got [frameHeaderLen + 4]byte
		var n uintptr
		var errno syscall.Errno
		rc.Control(func(fd uintptr) {
			n, _, errno = syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&got[0])), uintptr(len(got)), syscall.MSG_DONTWAIT, 0, 0)
		})
		if errno != 0 {
			t.Fatalf("update %d: nothing on the socket when queue returned (%v): the writer goroutine was left to write it", i, errno)
		}
		if int(n) != len(got) {
			t.Fatalf("update %d: %d bytes on the socket when queue returned, want %d", i, n, len(got))
		}
		if want := appendWindowUpdate(nil, 0, uint32(i+1)); !bytes.Equal(got[:], want) {
			t.Fatalf("update %d: read % x, want % x", i, got, want)
		}
	}
}
