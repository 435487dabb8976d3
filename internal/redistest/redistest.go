// Package redistest runs a real redis-server (the Debian package, which
// .ci/run installs) on a free loopback port for tests, without persistence,
// and can restart it on the same port to test what survives an outage.
package redistest

import (
	"bytes"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/monovertex/monovertex/internal/testutil"
)

// Server is a redis-server process owned by one test.
type Server struct {
	t    testing.TB
	bin  string
	port int

	mu  sync.Mutex
	cmd *exec.Cmd
	out *bytes.Buffer
}

// Start starts redis-server on a free 127.0.0.1 port and stops it when the
// test ends. It skips the test, saying why, when the binary is not installed.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not installed (apt-get install redis-server; .ci/run installs it): " + err.Error())
	}
	// A port of FreePort's, which nothing else takes while redis-server is
	// down between a Restart's stop and start.
	s := &Server{t: t, bin: bin, port: testutil.FreePort(t)}
	s.start()
	t.Cleanup(s.Stop)
	return s
}

// URL is the server's redis:// URL, database 0.
func (s *Server) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", s.port) }

// Addr is the server's host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

func (s *Server) start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := &bytes.Buffer{}
	cmd := exec.Command(s.bin, "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--protected-mode", "no", "--loglevel", "warning")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start redis-server: %v", err)
	}
	s.cmd, s.out = cmd, out
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", s.Addr(), 200*time.Millisecond); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			s.t.Fatalf("redis-server did not listen on %s within 10s: %s", s.Addr(), out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the server (its data is gone: there is no persistence). It is
// safe to call twice.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.cmd = nil
}

// Restart stops the server, waits down, and starts an empty one on the
// same port: what a Redis pod restarting without persistence looks like.
func (s *Server) Restart(down time.Duration) {
	s.t.Helper()
	s.Stop()
	time.Sleep(down)
	s.start()
}
