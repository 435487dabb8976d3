// Package udftest serves the Numaflow SDK's own gRPC services (numaflow-go
// sinker, sourcer, sourcetransformer) on a Unix socket inside a test, with
// the SDK's server-info file, and can crash and restart them the way a
// sidecar container crashes and is restarted by Kubernetes.
package udftest

import (
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/numaproj/numaflow-go/pkg/info"
	"google.golang.org/grpc"

	"github.com/monovertex/monovertex/adapters/internal/udconn"
)

// Dir returns a fresh short directory for sockets (t.TempDir paths can
// exceed the 108-byte limit of a Unix socket path).
func Dir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "mvudf")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// Settings returns adapter settings for dir with short timeouts for tests.
func Settings(dir string) udconn.Settings {
	return udconn.Settings{
		Dir:              dir,
		MaxMessageSize:   udconn.DefaultMaxMessageSize,
		ReconnectTimeout: 20 * time.Second,
		StartupTimeout:   20 * time.Second,
		CallTimeout:      20 * time.Second,
	}
}

// ServerInfo is what the SDK's servers write for container type ct.
func ServerInfo(ct info.ContainerType) *info.ServerInfo {
	si := info.GetDefaultServerInfo()
	si.MinimumNumaflowVersion = info.MinimumNumaflowVersion[ct]
	if si.Version == "" {
		// Test binaries may lack module versions; the SDK in go.mod is v0.12.0.
		si.Version = "v0.12.0"
	}
	return si
}

// Server is one SDK service on a Unix socket.
type Server struct {
	t        testing.TB
	ep       udconn.Endpoint
	info     *info.ServerInfo
	register func(*grpc.Server)

	mu  sync.Mutex
	srv *grpc.Server
}

// Start writes the server-info file for ep and serves the services that
// register adds. The server is stopped when the test ends.
func Start(t testing.TB, ep udconn.Endpoint, register func(*grpc.Server)) *Server {
	t.Helper()
	return StartWithInfo(t, ep, ServerInfo(ep.Container), register)
}

// StartWithInfo is Start with the server-info file's content given, for
// a server whose file says more than its container type (a map server's
// says its mode).
func StartWithInfo(t testing.TB, ep udconn.Endpoint, si *info.ServerInfo, register func(*grpc.Server)) *Server {
	t.Helper()
	s := &Server{t: t, ep: ep, info: si, register: register}
	s.Restart()
	t.Cleanup(s.Kill)
	return s
}

// Restart starts the server again with a fresh server-info file, as a
// restarted container does.
func (s *Server) Restart() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		s.t.Fatalf("udftest: %s restarted while running", s.ep.Name)
	}
	if err := info.Write(s.info, info.WithServerInfoFilePath(s.ep.InfoFile)); err != nil {
		s.t.Fatal(err)
	}
	os.Remove(s.ep.Socket)
	ln, err := net.Listen("unix", s.ep.Socket)
	if err != nil {
		s.t.Fatalf("udftest: listen on %s: %v", s.ep.Socket, err)
	}
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(udconn.DefaultMaxMessageSize), grpc.MaxSendMsgSize(udconn.DefaultMaxMessageSize))
	s.register(srv)
	s.srv = srv
	go srv.Serve(ln)
}

// Kill drops every connection at once, like a crashed container. The
// server-info file stays behind, as it does in a pod's shared volume.
func (s *Server) Kill() {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv != nil {
		srv.Stop()
	}
}

// WriteInfo replaces the server-info file with raw content (for
// compatibility tests).
func WriteInfo(t testing.TB, ep udconn.Endpoint, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(ep.InfoFile), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ep.InfoFile, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
