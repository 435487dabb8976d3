// Package udftest serves the Numaflow SDK's own gRPC services (numaflow-go
// sinker, sourcer, sourcetransformer) on a Unix socket inside a test, with
// the SDK's server-info file, and can crash and restart them the way a
// sidecar container crashes and is restarted by Kubernetes. It also holds
// what the adapters' tests share: the SDK servers' own start, the waits and
// counters of the restart and concurrency tests, and the scenarios that
// hold for both transformer adapters (udtransformer and udmap).
package udftest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/numaproj/numaflow-go/pkg/info"
	"google.golang.org/grpc"

	"github.com/monovertex/monovertex/adapters/internal/udconn"
	"github.com/monovertex/monovertex/runner"
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
		Transport:        udconn.TransportWire,
	}
}

// Transports are the values of MV_UDF_TRANSPORT; the adapters run their
// conformance suites over each.
var Transports = []string{udconn.TransportWire, udconn.TransportGRPCGo}

// SettingsFor is Settings with transport tr.
func SettingsFor(dir, tr string) udconn.Settings {
	s := Settings(dir)
	s.Transport = tr
	return s
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
func (s *Server) Restart() { s.RestartWith(nil) }

// RestartWith is Restart with the server-info file's content replaced by
// si (nil keeps it), as a container restarted on a new image writes.
func (s *Server) RestartWith(si *info.ServerInfo) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if si != nil {
		s.info = si
	}
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

// SDKServer is what every numaflow-go server's NewServer returns.
type SDKServer interface{ Start(context.Context) error }

// StartSDK runs a server made by newServer, one of numaflow-go's own
// servers (which writes its server-info file and listens as a user's
// container does), until the test ends, and fails the test if the server
// does not stop cleanly then. A numaflow-go server stops itself when a
// stream fails (a source's read stream closed by the client while the
// server sends is one), which in a pod ends the container and the kubelet
// starts it again; so does StartSDK, with a new server, at most 20 times.
func StartSDK(t testing.TB, newServer func() SDKServer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		for restarts := 0; ; restarts++ {
			err := newServer().Start(ctx)
			if ctx.Err() != nil || restarts == 20 {
				done <- err
				return
			}
			t.Logf("SDK server stopped by itself (%v); starting it again, as the kubelet restarts a container", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("SDK server: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("SDK server did not stop")
		}
	})
}

// Connect calls an adapter's constructor and then, as the engine does,
// its Connect, with the 30 seconds a container has to come up in these
// tests, and fails the test if either returns an error; name is the
// constructor, for the message.
func Connect[A any](t testing.TB, name string, build func(context.Context) (A, error)) A {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := build(ctx)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if c, ok := any(a).(runner.Connector); ok {
		if err := c.Connect(ctx); err != nil {
			t.Fatalf("%s: Connect: %v", name, err)
		}
	}
	return a
}

// WaitNotReady waits up to 10 seconds for ready, an adapter's Ready, to
// fail after its container was killed: the connection watcher notices the
// drop without a call.
func WaitNotReady(t testing.TB, ready func(context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for ready(context.Background()) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("still ready 10s after the container died")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WantReconnectTimeout calls call, an adapter call on a container that
// was killed and stays away, every 100ms for up to 15 seconds until it
// fails for good, and fails the test unless that error names
// MV_UDF_RECONNECT_TIMEOUT, the setting that decided it.
func WantReconnectTimeout(t testing.TB, call func() error) {
	t.Helper()
	var err error
	for start := time.Now(); time.Since(start) < 15*time.Second; time.Sleep(100 * time.Millisecond) {
		if err = call(); runner.IsFatal(err) {
			break
		}
	}
	if !runner.IsFatal(err) || !strings.Contains(err.Error(), "MV_UDF_RECONNECT_TIMEOUT") {
		t.Fatalf("want a fatal error naming MV_UDF_RECONNECT_TIMEOUT, got %v", err)
	}
}

// Reports keeps the container errors an adapter reports to it (a
// runner.ErrorReporter), for tests of what reaches the status page.
type Reports struct {
	mu   sync.Mutex
	errs []runner.ContainerError
}

// ReportContainerError records e.
func (r *Reports) ReportContainerError(e runner.ContainerError) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, e)
}

// Errors returns the errors reported so far, oldest first.
func (r *Reports) Errors() []runner.ContainerError {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]runner.ContainerError(nil), r.errs...)
}

// Overlap counts the handler calls of a test container running at once
// and keeps the most seen, for tests of the adapters' concurrency bounds.
type Overlap struct {
	now, most atomic.Int64
}

// Enter counts a call as running; the call ends with the function it
// returns.
func (o *Overlap) Enter() (leave func()) {
	n := o.now.Add(1)
	for {
		m := o.most.Load()
		if n <= m || o.most.CompareAndSwap(m, n) {
			break
		}
	}
	return func() { o.now.Add(-1) }
}

// Most is the most calls that ran at once.
func (o *Overlap) Most() int64 { return o.most.Load() }

// Transformer is what the udtransformer and udmap adapters both are: the
// scenarios below hold for either.
type Transformer interface {
	runner.Transformer
	Ready(context.Context) error
	SetConcurrency(n int)
}

// EventTime is the event time of the messages Msgs makes.
var EventTime = time.UnixMilli(1_700_000_000_000).UTC()

// Msgs makes one message per value, with ids m0, m1, ..., the key "k" and
// EventTime.
func Msgs(values ...string) []*runner.Message {
	out := make([]*runner.Message, len(values))
	for i, v := range values {
		out[i] = &runner.Message{ID: fmt.Sprintf("m%d", i), Keys: []string{"k"}, Value: []byte(v), EventTime: EventTime}
	}
	return out
}

// The scenarios expect the container's reference handler to return each
// value as it came, except that "fanout" becomes three copies, "hang"
// answers after 3s and "late..." after a delay of its own.

// TransformSurvivesRestart kills srv under tr, waits until tr is no longer
// ready, restarts srv half a second later and checks that the engine's
// retries (no fatal error) get a transform through.
func TransformSurvivesRestart(t *testing.T, tr Transformer, srv *Server) {
	t.Helper()
	ctx := context.Background()
	if _, err := tr.Transform(ctx, Msgs("a")); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	WaitNotReady(t, tr.Ready)
	go func() {
		time.Sleep(500 * time.Millisecond)
		srv.Restart()
	}()
	var res []runner.TransformResult
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		if res, err = tr.Transform(ctx, Msgs("b", "fanout")); err == nil {
			break
		}
		if runner.IsFatal(err) {
			t.Fatalf("fatal during a short restart: %v", err)
		}
	}
	if err != nil {
		t.Fatalf("no transform after restart: %v", err)
	}
	if len(res[0].Outputs) != 1 || len(res[1].Outputs) != 3 {
		t.Fatalf("results after restart: %+v", res)
	}
}

// TransformCallTimeoutResets checks, on tr made with a short
// MV_UDF_CALL_TIMEOUT, that a call the container never answers in time
// fails naming it, and that the next call, on a new stream, works.
func TransformCallTimeoutResets(t *testing.T, tr Transformer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := tr.Transform(ctx, Msgs("a", "hang"))
	if err == nil || !strings.Contains(err.Error(), "MV_UDF_CALL_TIMEOUT") {
		t.Fatalf("transform with a message the container never answers in time: %v, want a call-timeout error", err)
	}
	// The engine retries on a new stream, which works.
	res, err := tr.Transform(ctx, Msgs("b", "c"))
	if err != nil {
		t.Fatalf("transform after the reset: %v", err)
	}
	if len(res) != 2 || string(res[0].Outputs[0].Value) != "b" || string(res[1].Outputs[0].Value) != "c" {
		t.Fatalf("results after the reset: %+v", res)
	}
}

// TransformEachKeepsTheAnswersBeforeATimeout checks, on tr made with a
// short MV_UDF_CALL_TIMEOUT, that a call whose "hang" message the container
// does not answer in time hands over the results that came before it
// fails (answered: the container answers each message on its own, not
// once per batch), and none for "hang".
func TransformEachKeepsTheAnswersBeforeATimeout(t *testing.T, tr runner.EachTransformer, answered bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := map[int]string{}
	err := tr.TransformEach(ctx, Msgs("a", "hang", "b"), func(k int, r runner.TransformResult) {
		if _, twice := got[k]; twice {
			t.Errorf("message %d handed over twice", k)
		}
		if r.Err != nil || len(r.Outputs) != 1 {
			t.Errorf("message %d: %+v, want one output", k, r)
			return
		}
		got[k] = string(r.Outputs[0].Value)
	})
	if err == nil || !strings.Contains(err.Error(), "MV_UDF_CALL_TIMEOUT") {
		t.Fatalf("transform with a message the container never answers in time: %v, want a call-timeout error", err)
	}
	want := map[int]string{}
	if answered {
		want = map[int]string{0: "a", 2: "b"}
		if !strings.Contains(err.Error(), "no response for 1 of 3") {
			t.Errorf("error %q, want it to count the one message without an answer", err)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("handed over %v before the timeout, want %v", got, want)
	}
}

// TransformMatchesOutOfOrder sends 300 "late-i" values, answered in
// whatever order the container finishes them, and checks that each result
// is its own input's.
func TransformMatchesOutOfOrder(t *testing.T, tr Transformer) {
	t.Helper()
	var in []string
	for i := 0; i < 300; i++ {
		in = append(in, fmt.Sprintf("late-%d", i))
	}
	res, err := tr.Transform(context.Background(), Msgs(in...))
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if len(r.Outputs) != 1 || string(r.Outputs[0].Value) != in[i] {
			t.Fatalf("result %d: %+v, want %q", i, r, in[i])
		}
	}
}

// TransformWithinConcurrency sets tr's concurrency to 3, makes four
// concurrent calls of 25 messages each, checks every result, and checks
// that the container's handler, counted by calls, never ran more than 3
// at once (numaflow-core's spec.limits.concurrency bounds the requests on
// the one stream); what names the handler in the message.
func TransformWithinConcurrency(t *testing.T, tr Transformer, calls *Overlap, what string) {
	t.Helper()
	tr.SetConcurrency(3)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			vals := make([]string, 25)
			for i := range vals {
				vals[i] = fmt.Sprintf("c%d-%d", c, i)
			}
			res, err := tr.Transform(context.Background(), Msgs(vals...))
			if err == nil {
				for i, r := range res {
					if len(r.Outputs) != 1 || string(r.Outputs[0].Value) != vals[i] {
						err = fmt.Errorf("result %d: %+v", i, r)
						break
					}
				}
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if m := calls.Most(); m < 1 || m > 3 {
		t.Fatalf("%d %s calls at once, want 1..3 (MV_CONCURRENCY=3)", m, what)
	}
}

// Stream is the server side of one of the SDKs' bidirectional streams
// (MapFn, SinkFn, SourceTransformFn, ...).
type Stream[Req, Resp any] interface {
	Recv() (*Req, error)
	Send(*Resp) error
}

// ServeStream answers s as numaflow-go's servers open a stream, for
// hand-made servers that answer what the SDKs never send: it receives the
// client's handshake, sends handshake, then hands each further request to
// each until the client ends the stream (nil) or each fails (its error).
func ServeStream[Req, Resp any](s Stream[Req, Resp], handshake *Resp, each func(*Req) error) error {
	if _, err := s.Recv(); err != nil {
		return err
	}
	if err := s.Send(handshake); err != nil {
		return err
	}
	for {
		req, err := s.Recv()
		if err != nil {
			return nil
		}
		if err := each(req); err != nil {
			return err
		}
	}
}
