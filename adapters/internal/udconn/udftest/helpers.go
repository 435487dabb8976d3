package udftest

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/monovertex/monovertex/runner"
)

// StartSDK runs start, the Start of one of numaflow-go's own servers (which
// writes its server-info file and listens as a user's container does),
// until the test ends, and fails the test if the server does not stop
// cleanly then.
func StartSDK(t testing.TB, start func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- start(ctx) }()
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

// Connect calls an adapter's constructor with the 30 seconds a container
// has to come up in these tests, and fails the test if it returns an
// error; name is the constructor, for the message.
func Connect[A any](t testing.TB, name string, connect func(context.Context) (A, error)) A {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := connect(ctx)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
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
