//go:build unix

package cewire

import (
	"net"
	"syscall"
)

// peekIdle looks at an idle connection's socket without waiting or taking
// anything from it: usable is false when the peer closed the connection or
// sent bytes unasked. ok is false when the connection is not a socket it
// can look at this way.
func peekIdle(conn net.Conn) (usable, ok bool) {
	sc, isSocket := conn.(syscall.Conn)
	if !isSocket {
		return false, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false, false
	}
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, rerr = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true // never wait for readability
	})
	if err != nil {
		return false, true
	}
	// Nothing to read is an open, quiet connection; a read that succeeds
	// finds the peer's close (0 bytes) or an unasked answer.
	return rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK, true
}
