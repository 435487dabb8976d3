package runner_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/runnertest"
)

// connecting is a Connect that fails its first failures attempts, then,
// when hold is set, waits for hold to close before it succeeds.
type connecting struct {
	failures int
	fail     error // what the failed attempts return
	hold     chan struct{}
	held     chan struct{} // closed when the attempt that waits for hold starts

	attempts  atomic.Int64
	connected atomic.Bool
	closed    atomic.Int64
}

func (c *connecting) Connect(ctx context.Context) error {
	n := c.attempts.Add(1)
	if int(n) <= c.failures {
		return fmt.Errorf("attempt %d: %w", n, c.fail)
	}
	if c.hold != nil {
		close(c.held)
		select {
		case <-c.hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	c.connected.Store(true)
	return nil
}

// connectingSink is a test sink with a Connect; a Write before Connect
// succeeded is counted.
type connectingSink struct {
	*runnertest.Sink
	*connecting
	early atomic.Int64
}

func (s *connectingSink) Write(ctx context.Context, msgs []*runner.Message) ([]runner.WriteResult, error) {
	if !s.connected.Load() {
		s.early.Add(1)
	}
	return s.Sink.Write(ctx, msgs)
}

func (s *connectingSink) Close(ctx context.Context) error {
	s.closed.Add(1)
	return s.Sink.Close(ctx)
}

// connectingSource is a test source with a Connect; a Read before Connect
// succeeded is counted.
type connectingSource struct {
	*runnertest.Source
	*connecting
	early atomic.Int64
}

func (s *connectingSource) Read(ctx context.Context, max int, timeout time.Duration) ([]*runner.Message, error) {
	if !s.connected.Load() {
		s.early.Add(1)
	}
	return s.Source.Read(ctx, max, timeout)
}

func (s *connectingSource) Close(ctx context.Context) error {
	s.closed.Add(1)
	return s.Source.Close(ctx)
}

func TestConnectIsRetriedWithBackoffAndReportedUntilItSucceeds(t *testing.T) {
	const failures = 3
	reg := prometheus.NewRegistry()
	conns, err := runner.NewConnections(reg, "mv", 0)
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.InfoLevel)
	src := runnertest.NewSource(runnertest.Messages(20))
	sink := &connectingSink{Sink: runnertest.NewSink(nil),
		connecting: &connecting{failures: failures, fail: errors.New("connection refused"), hold: make(chan struct{}), held: make(chan struct{})}}
	e, err := runner.NewPipeline(runner.Options{Name: "mv", Logger: zap.New(core).Sugar(), Registerer: reg, Connections: conns},
		runner.Pipeline{Source: src, Sink: sink, Kinds: struct{ Source, Sink, Fallback, OnSuccess string }{Sink: "test"}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Run(context.Background()) }()

	// The attempt after the failed ones waits: the state is now fixed.
	select {
	case <-sink.held:
	case <-time.After(time.Minute):
		t.Fatalf("no attempt %d within a minute; %d made", failures+1, sink.attempts.Load())
	}
	err = e.Ready(context.Background())
	if err == nil || !strings.Contains(err.Error(), "sink (test) not connected") || !strings.Contains(err.Error(), "3 attempts failed") ||
		!strings.Contains(err.Error(), "attempt 3: connection refused") {
		t.Fatalf("Ready while connecting: %v, want the sink not connected after 3 failed attempts, with the last error", err)
	}
	var sinkStatus runner.AdapterStatus
	for _, a := range e.Readiness(context.Background()) {
		if a.Name == "sink (test)" {
			sinkStatus = a
		}
	}
	if sinkStatus.Ready || !sinkStatus.Checked || sinkStatus.Connection != "connecting" || sinkStatus.ConnectFailures != failures ||
		!strings.Contains(sinkStatus.Error, "connection refused") {
		t.Fatalf("/status adapter while connecting: %+v", sinkStatus)
	}
	if st := e.Status(); st.State != "connecting" {
		t.Fatalf("state %q while connecting", st.State)
	}
	retries := logs.FilterMessage("cannot connect; retrying").All()
	if len(retries) != failures {
		t.Fatalf("%d retry lines, want one per failed attempt (%d)", len(retries), failures)
	}
	for i, l := range retries {
		f := l.ContextMap()
		if f["adapter"] != "sink (test)" || f["attempt"] != int64(i+1) || !strings.Contains(fmt.Sprint(f["error"]), "connection refused") {
			t.Fatalf("retry line %d: %v", i+1, f)
		}
	}
	if n := len(src.Acked()); n != 0 {
		t.Fatalf("%d messages acked before the sink connected", n)
	}

	close(sink.hold)
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	if n := sink.attempts.Load(); n != failures+1 {
		t.Fatalf("%d Connect attempts, want %d", n, failures+1)
	}
	if n := sink.early.Load(); n != 0 {
		t.Fatalf("%d writes before Connect succeeded", n)
	}
	if n := len(src.Acked()); n != 20 {
		t.Fatalf("%d of 20 acked after connecting", n)
	}
	if n := len(logs.FilterMessage("connected").All()); n != 1 {
		t.Fatalf("%d 'connected' lines, want 1", n)
	}
	for name, want := range map[string]float64{"monovtx_connection_failed_total": failures, "monovtx_connection_up_total": 1} {
		if got := gatherRole(t, reg, name, "sink"); got != want {
			t.Errorf("%s{role=sink} = %v, want %v", name, got, want)
		}
	}
	if got := gatherRole(t, reg, "monovtx_connected", "sink"); got != 1 {
		t.Errorf("monovtx_connected{role=sink} = %v, want 1", got)
	}
}

// gatherRole is the value of metric name's series for role.
func gatherRole(t *testing.T, reg *prometheus.Registry, name, role string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "role" && l.GetValue() == role {
					return m.GetCounter().GetValue() + m.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}

func TestConnectErrorsThatStopTheStartUp(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fail  error
		check func(error) bool
	}{
		{"fatal", runner.Fatal(errors.New("incompatible peer")), runner.IsFatal},
		{"setting the peer refuses", &runner.ConfigError{Var: "MV_TEST_STREAM", Value: "nope", Reason: "does not exist"},
			func(err error) bool { return errors.As(err, new(*runner.ConfigError)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := &connectingSource{Source: runnertest.NewSource(runnertest.Messages(5)),
				connecting: &connecting{failures: 1, fail: tc.fail}}
			// The sink connects only when told: the source's failure must
			// stop its loop too.
			sink := &connectingSink{Sink: runnertest.NewSink(nil),
				connecting: &connecting{failures: 1 << 30, fail: errors.New("refused")}}
			core, logs := observer.New(zapcore.InfoLevel)
			e, err := runner.NewPipeline(runner.Options{Logger: zap.New(core).Sugar()}, runner.Pipeline{Source: src, Sink: sink})
			if err != nil {
				t.Fatal(err)
			}
			err = e.Run(context.Background())
			if err == nil || !tc.check(err) || !strings.HasPrefix(err.Error(), "source: ") {
				t.Fatalf("run: %v, want the source's error, marked as it was", err)
			}
			if n := src.attempts.Load(); n != 1 {
				t.Fatalf("%d source attempts, want 1: such an error is not retried", n)
			}
			if src.early.Load() != 0 || sink.early.Load() != 0 || len(sink.WrittenIDs()) != 0 {
				t.Fatalf("reads %d, writes %d before connecting", src.early.Load(), sink.early.Load())
			}
			if src.closed.Load() != 1 || sink.closed.Load() != 1 {
				t.Fatalf("closed source %d, sink %d times; want once each", src.closed.Load(), sink.closed.Load())
			}
			for _, l := range logs.FilterMessage("cannot connect; retrying").All() {
				if l.ContextMap()["adapter"] == "source" {
					t.Fatalf("the stopping error was logged as retried: %v", l.ContextMap())
				}
			}
			if st := e.Status(); st.State != "stopped" {
				t.Fatalf("state %q after a failed start", st.State)
			}
		})
	}
}

func TestStopWhileConnectingIsACleanStop(t *testing.T) {
	src := runnertest.NewSource(runnertest.Messages(5))
	sink := &connectingSink{Sink: runnertest.NewSink(nil),
		connecting: &connecting{hold: make(chan struct{}), held: make(chan struct{})}}
	e, err := runner.NewPipeline(runner.Options{}, runner.Pipeline{Source: src, Sink: sink})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	select {
	case <-sink.held:
	case <-time.After(time.Minute):
		t.Fatal("Connect not called within a minute")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run stopped while connecting: %v, want nil", err)
	}
	if sink.closed.Load() != 1 || sink.early.Load() != 0 || len(src.Acked()) != 0 {
		t.Fatalf("closed %d, early writes %d, acked %d", sink.closed.Load(), sink.early.Load(), len(src.Acked()))
	}
}

// One adapter in two places (the same sink as sink and fallback) is
// connected once.
func TestAnAdapterInTwoPlacesConnectsOnce(t *testing.T) {
	src := runnertest.NewSource(runnertest.Messages(3))
	sink := &connectingSink{Sink: runnertest.NewSink(nil), connecting: &connecting{}}
	e, err := runner.NewPipeline(runner.Options{}, runner.Pipeline{Source: src, Sink: sink, Fallback: sink})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := sink.attempts.Load(); n != 1 {
		t.Fatalf("%d Connect calls, want 1", n)
	}
}
