package udwire

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// rawSock reads and writes a non-blocking socket with raw system calls,
// waiting in Go's network poller only when the socket has nothing to read
// or no room to write.
//
// Why not net.Conn's Read and Write: a long system call through the
// runtime's entersyscall makes sysmon hand the goroutine's P to another
// thread, and those thread wake-ups were a large share of the runner's CPU
// at 1 MiB (hack/bench/RESULTS.md, "The runner's own gRPC transport"). A
// call on a non-blocking socket never waits, it copies at most the socket
// buffer, so holding the P through it costs nothing.
type rawSock struct {
	rc syscall.RawConn
}

// newRawSock wraps nc when it is a Unix or TCP socket; otherwise ok is
// false and the caller uses nc as it is.
func newRawSock(nc net.Conn) (*rawSock, bool) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, false
	}
	return &rawSock{rc: rc}, true
}

// Read reads into p, waiting for data if there is none.
func (r *rawSock) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, errno, err := call(r.rc.Read, syscall.SYS_READ, unsafe.Pointer(&p[0]), uintptr(len(p)))
	return readResult("read", n, errno, err)
}

// readv reads into the buffers iov points to, in order, waiting for data
// if there is none.
func (r *rawSock) readv(iov []syscall.Iovec) (int, error) {
	n, errno, err := call(r.rc.Read, syscall.SYS_READV, unsafe.Pointer(&iov[0]), uintptr(len(iov)))
	return readResult("readv", n, errno, err)
}

// readResult makes a raw read's outcome an io.Reader's: an errno is an
// error naming op, and nothing read the end of the stream.
func readResult(op string, n int, errno syscall.Errno, err error) (int, error) {
	switch {
	case err != nil:
		return 0, err
	case errno != 0:
		return 0, os.NewSyscallError(op, errno)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// call makes system call trap on the socket's descriptor with arguments
// buf and a3 as a raw call, through wait (the RawConn's Read or Write),
// which parks the goroutine in the poller while the call says EAGAIN.
// buf stays an unsafe.Pointer until the call itself, so the collector
// keeps (and, on a stack, moves) what it points to.
func call(wait func(func(fd uintptr) bool) error, trap uintptr, buf unsafe.Pointer, a3 uintptr) (n int, errno syscall.Errno, err error) {
	err = wait(func(fd uintptr) bool {
		for {
			r1, _, e := syscall.RawSyscall(trap, fd, uintptr(buf), a3)
			switch e {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false
			}
			n, errno = int(r1), e
			return true
		}
	})
	return n, errno, err
}

// maxIovecs is Linux's IOV_MAX: the most vectors one writev takes.
const maxIovecs = 1024

// writeBuffers writes every byte of bufs, waiting for room as needed.
func (r *rawSock) writeBuffers(bufs [][]byte) error {
	iov := make([]syscall.Iovec, 0, min(len(bufs), maxIovecs))
	for len(bufs) > 0 {
		iov = iov[:0]
		for _, b := range bufs {
			if len(iov) == maxIovecs {
				break
			}
			if len(b) > 0 {
				v := syscall.Iovec{Base: &b[0]}
				v.SetLen(len(b))
				iov = append(iov, v)
			}
		}
		if len(iov) == 0 {
			return nil
		}
		n, errno, err := call(r.rc.Write, syscall.SYS_WRITEV, unsafe.Pointer(&iov[0]), uintptr(len(iov)))
		if err != nil {
			return err
		}
		if errno != 0 {
			return os.NewSyscallError("writev", errno)
		}
		// Drop what was written.
		for n > 0 && len(bufs) > 0 {
			if len(bufs[0]) <= n {
				n -= len(bufs[0])
				bufs = bufs[1:]
				continue
			}
			bufs[0] = bufs[0][n:]
			n = 0
		}
		for len(bufs) > 0 && len(bufs[0]) == 0 {
			bufs = bufs[1:]
		}
	}
	return nil
}

// tryWrite writes what of b the socket takes now, without waiting, and
// returns how much; an error leaves it to the writer goroutine's next
// write to find and report.
func (r *rawSock) tryWrite(b []byte) int {
	n := 0
	_ = r.rc.Write(func(fd uintptr) bool {
		for {
			w, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
			if e == syscall.EINTR {
				continue
			}
			if e == 0 {
				n = int(w)
			}
			return true
		}
	})
	return n
}
