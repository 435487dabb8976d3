package udconn_test

import (
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/monovertex/monovertex/adapters/internal/udconn"
	"github.com/monovertex/monovertex/adapters/internal/udconn/udftest"
)

// sendBuffer is a socket's SO_SNDBUF as Linux reports it (twice what was
// asked for, for its bookkeeping).
func sendBuffer(t *testing.T, fd int) int {
	t.Helper()
	v, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_SNDBUF)
	if err != nil {
		t.Fatalf("SO_SNDBUF of fd %d: %v", fd, err)
	}
	return v
}

// clientsOf lists the descriptors of this process that are Unix stream
// sockets connected to the socket at path: the dialling ends.
func clientsOf(t *testing.T, path string) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	var fds []int
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if typ, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_TYPE); err != nil || typ != syscall.SOCK_STREAM {
			continue
		}
		if peer, err := syscall.Getpeername(fd); err == nil {
			if u, ok := peer.(*syscall.SockaddrUnix); ok && u.Name == path {
				fds = append(fds, fd)
			}
		}
	}
	return fds
}

// TestContainerConnectionsAskForALargeSendBuffer checks that the runner's
// connection to a container has the send buffer udconn asks for, larger
// than what a plain dial of the same socket gets.
func TestContainerConnectionsAskForALargeSendBuffer(t *testing.T) {
	raw, err := os.ReadFile("/proc/sys/net/core/wmem_max")
	if err != nil {
		t.Skipf("no net.core.wmem_max: %v", err)
	}
	wmemMax, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatalf("net.core.wmem_max %q: %v", raw, err)
	}
	want := 2 * min(udconn.SendBufferSize, wmemMax)

	dir := udftest.Dir(t)
	ep := udconn.SinkEndpoint(dir, false)
	serveSink(t, ep)
	plain, err := net.Dial("unix", ep.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	f, err := plain.(*net.UnixConn).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if def := sendBuffer(t, int(f.Fd())); def >= want {
		t.Skipf("a plain socket already gets %d bytes (net.core.wmem_default), as much as udconn asks for (%d): nothing to tell apart", def, want)
	}

	before := map[int]bool{}
	for _, fd := range clientsOf(t, ep.Socket) {
		before[fd] = true
	}
	c := connect(t, ep, udftest.Settings(dir))
	if err := c.Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, fd := range clientsOf(t, ep.Socket) {
		if !before[fd] {
			got = append(got, sendBuffer(t, fd))
		}
	}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("send buffers of the runner's new connections to the container %v: want one of %d bytes (2 x min(%d, net.core.wmem_max %d))", got, want, udconn.SendBufferSize, wmemMax)
	}
}
