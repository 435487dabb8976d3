//go:build linux

package udwire

import (
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/monovertex/monovertex/internal/payloadpool"
)

// Zero-copy writes of large payloads.
//
// A large message's payload is handed to the kernel by reference: its
// pages go into a pipe with vmsplice(2) and from there into the socket
// with splice(2), which Linux turns into a send of the pages themselves
// (MSG_SPLICE_PAGES since 6.5; unix_stream_sendpage before), so the only
// copy of the bytes is the container's read. writev(2) copied each MiB
// into fresh socket buffers instead: `go run -C hack/bench
// ./cmd/spliceprobe` measured 241-243 µs of the sender's CPU per MiB for
// writev and 57-67 for vmsplice and splice (hack/bench RESULTS.md,
// "Large payloads sent without a copy").
//
// The price is that the kernel reads the pages after the system call
// returned, until the peer has read them: a buffer whose bytes are still
// queued on the peer's socket must not be written. So every spliced
// payload is pinned (payloadpool.PinBytes: a released pooled buffer it
// lies in waits, and the collector keeps its memory), and so are the
// bytes this side copied around it (frame headers, the encoded fields).
// The pins end once the socket's send queue is seen empty (SIOCOUTQ, the
// bytes of every socket buffer this side sent that the peer has not yet
// consumed): then no page is the kernel's any more. The queue is checked
// as frames arrive, before each direct write and, while pins wait, every
// millisecond; after the connection closed, on a second descriptor of
// the socket kept for that, until the peer read or closed its end.

// zcMinPart is the smallest part of a message sent by reference: smaller
// ones are copied, where a pin costs more than the copy.
const zcMinPart = 16 << 10

// zeroCopy is a connection's splicing state. The pipe is used under the
// connection's wmu; the rest under mu.
type zeroCopy struct {
	pr, pw int // the pipe's ends; -1 once closed
	dup    int // the socket's second descriptor; -1 once closed

	mu       sync.Mutex
	held     []*holding // sends done whose bytes the kernel may still hold
	inflight int        // sends under way
	closed   bool       // the connection ended
	armed    bool       // a timed check is due
	waiting  atomic.Int32
	checks   atomic.Int64 // SIOCOUTQ calls, for the tests
}

// spliced counts the bytes written by splicing, for the tests to see
// which path a send took.
var spliced atomic.Int64

// holding is what one send pinned and the bytes it copied around them.
type holding struct {
	pins  []*payloadpool.Pin
	sides [][]byte
}

// Linux constants syscall does not name.
const (
	spliceNonblock = 0x2
	fSetPipeSize   = 1031
	fDupCloexec    = 1030
	siocOutq       = 0x5411
)

// newZeroCopy makes the pipe and the second descriptor for raw's socket,
// or returns nil where splicing is not to be had.
func newZeroCopy(raw *rawSock) *zeroCopy {
	if raw == nil || !spliceWorks() {
		return nil
	}
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		return nil
	}
	// A pipe of 1 MiB (the unprivileged limit) takes a 1 MiB message in
	// a few calls; a smaller one still works, in more.
	_, _, _ = syscall.Syscall(syscall.SYS_FCNTL, uintptr(p[1]), fSetPipeSize, 1<<20)
	dup := -1
	err := raw.rc.Control(func(fd uintptr) {
		r, _, e := syscall.Syscall(syscall.SYS_FCNTL, fd, fDupCloexec, 0)
		if e == 0 {
			dup = int(r)
		}
	})
	if err != nil || dup < 0 {
		syscall.Close(p[0])
		syscall.Close(p[1])
		return nil
	}
	return &zeroCopy{pr: p[0], pw: p[1], dup: dup}
}

// spliceWorks says whether this kernel splices to a Unix socket and lets
// this process do it (a seccomp profile may not): found out once, on a
// socket pair of its own.
var spliceWorks = sync.OnceValue(func() bool {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer syscall.Close(fds[0])
	defer syscall.Close(fds[1])
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		return false
	}
	defer syscall.Close(p[0])
	defer syscall.Close(p[1])
	msg := []byte("monovertex splice probe")
	iov := syscall.Iovec{Base: &msg[0]}
	iov.SetLen(len(msg))
	n, _, e := syscall.Syscall6(syscall.SYS_VMSPLICE, uintptr(p[1]), uintptr(unsafe.Pointer(&iov)), 1, spliceNonblock, 0, 0)
	if e != 0 || int(n) != len(msg) {
		return false
	}
	n, _, e = syscall.Syscall6(syscall.SYS_SPLICE, uintptr(p[0]), 0, uintptr(fds[0]), 0, uintptr(len(msg)), spliceNonblock)
	if e != 0 || int(n) != len(msg) {
		return false
	}
	got := make([]byte, len(msg))
	if n, err := syscall.Read(fds[1], got); err != nil || string(got[:n]) != string(msg) {
		return false
	}
	return true
})

// usable says whether the pipe still works; wmu is held.
func (z *zeroCopy) usable() bool { return z != nil && z.pr >= 0 }

// begin counts a send that may pin bytes.
func (z *zeroCopy) begin() {
	z.mu.Lock()
	z.inflight++
	z.mu.Unlock()
}

// finish hands over what a send pinned, once none of its system calls
// is under way, and sees whether the kernel still holds it.
func (z *zeroCopy) finish(h *holding) {
	z.mu.Lock()
	z.inflight--
	if len(h.pins) > 0 || len(h.sides) > 0 {
		z.held = append(z.held, h)
		z.waiting.Store(int32(len(z.held)))
	}
	z.mu.Unlock()
	z.check()
}

// check ends the pins of every finished send once the socket's send
// queue is empty, and otherwise looks again a little later.
func (z *zeroCopy) check() {
	z.mu.Lock()
	if len(z.held) == 0 {
		z.closeIfDone()
		z.mu.Unlock()
		return
	}
	z.checks.Add(1)
	var queued int32
	_, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(z.dup), siocOutq, uintptr(unsafe.Pointer(&queued)))
	if e != 0 || queued != 0 {
		// Still queued (or, never seen, the descriptor failed: then the
		// pins stay, which costs memory and never a payload).
		if !z.armed {
			z.armed = true
			d := 20 * time.Millisecond
			if z.closed {
				d = 100 * time.Millisecond
			}
			time.AfterFunc(d, func() {
				z.mu.Lock()
				z.armed = false
				z.mu.Unlock()
				z.check()
			})
		}
		z.mu.Unlock()
		return
	}
	held := z.held
	z.held = nil
	z.waiting.Store(0)
	z.closeIfDone()
	z.mu.Unlock()
	for _, h := range held {
		for _, p := range h.pins {
			p.Unpin()
		}
	}
}

// closeIfDone closes the pipe and the second descriptor once the
// connection ended and nothing is pinned or being sent; z.mu is held.
func (z *zeroCopy) closeIfDone() {
	if !z.closed || z.inflight > 0 || len(z.held) > 0 || z.dup < 0 {
		return
	}
	syscall.Close(z.dup)
	z.dup = -1
	if z.pr >= 0 {
		syscall.Close(z.pr)
		syscall.Close(z.pw)
		z.pr, z.pw = -1, -1
	}
}

// close is called as the connection ends, after its descriptor closed:
// the second one shuts the socket down, so the container sees the end
// even while this side waits for it to let go of the pages.
func (z *zeroCopy) close() {
	if z == nil {
		return
	}
	z.mu.Lock()
	z.closed = true
	if z.dup >= 0 {
		_ = syscall.Shutdown(z.dup, syscall.SHUT_RDWR)
	}
	z.mu.Unlock()
	z.check()
}

// write sends every byte iov points to on raw's socket by way of the
// pipe; wmu is held. On an error the pipe is closed (it may hold pages),
// and later writes copy.
func (z *zeroCopy) write(raw *rawSock, iov []syscall.Iovec) error {
	inPipe, total := 0, 0
	defer func() { spliced.Add(int64(total)) }()
	for len(iov) > 0 || inPipe > 0 {
		if len(iov) > 0 {
			n, _, e := syscall.RawSyscall6(syscall.SYS_VMSPLICE, uintptr(z.pw), uintptr(unsafe.Pointer(&iov[0])), uintptr(min(len(iov), maxIovecs)), spliceNonblock, 0, 0)
			switch e {
			case 0:
				inPipe += int(n)
				iov = advance(iov, int(n))
			case syscall.EAGAIN, syscall.EINTR: // the pipe is full: drain it first
			default:
				z.breakPipe()
				return os.NewSyscallError("vmsplice", e)
			}
		}
		if inPipe == 0 {
			continue
		}
		var serr syscall.Errno
		err := raw.rc.Write(func(fd uintptr) bool {
			for {
				n, _, e := syscall.RawSyscall6(syscall.SYS_SPLICE, uintptr(z.pr), 0, fd, 0, uintptr(inPipe), spliceNonblock)
				switch e {
				case syscall.EINTR:
					continue
				case syscall.EAGAIN:
					return false
				case 0:
					inPipe -= int(n)
					total += int(n)
				default:
					serr = e
				}
				return true
			}
		})
		if err == nil && serr != 0 {
			err = os.NewSyscallError("splice", serr)
		}
		if err != nil {
			z.breakPipe()
			return err
		}
	}
	return nil
}

// breakPipe closes the pipe, dropping what it holds; wmu is held.
func (z *zeroCopy) breakPipe() {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.pr >= 0 {
		syscall.Close(z.pr)
		syscall.Close(z.pw)
		z.pr, z.pw = -1, -1
	}
}

// advance drops n bytes from the front of v.
func advance(v []syscall.Iovec, n int) []syscall.Iovec {
	for n > 0 && len(v) > 0 {
		if int(v[0].Len) <= n {
			n -= int(v[0].Len)
			v = v[1:]
			continue
		}
		v[0].Base = (*byte)(unsafe.Add(unsafe.Pointer(v[0].Base), n))
		v[0].SetLen(int(v[0].Len) - n)
		n = 0
	}
	return v
}
