package udsink_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/numaproj/numaflow-go/pkg/sinker"

	"github.com/monovertex/monovertex/adapters/internal/udconn"
	"github.com/monovertex/monovertex/adapters/internal/udconn/udftest"
	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/runnertest"
)

// failTwice is a sink container that fails each message twice before it
// writes it, keeping the retry_count each attempt carried.
type failTwice struct {
	mu       sync.Mutex
	attempts map[string][]string // by value: retry_count of each attempt
}

func (f *failTwice) Sink(_ context.Context, ch <-chan sinker.Datum) sinker.Responses {
	res := sinker.ResponsesBuilder()
	for d := range ch {
		v := string(d.Value())
		f.mu.Lock()
		f.attempts[v] = append(f.attempts[v], string(d.SystemMetadata().Value(runner.SinkMetadataGroup, runner.RetryCountKey)))
		n := len(f.attempts[v])
		f.mu.Unlock()
		if n <= 2 {
			res = res.Append(sinker.ResponseFailure(d.ID(), "not yet"))
			continue
		}
		res = res.Append(sinker.ResponseOK(d.ID()))
	}
	return res
}

// TestEngineStampsTheRetryCount: run by the engine, the container sees
// sink/retry_count 0, 1, 2 on a message's three attempts, as numaflow-core
// sends it, which needs the sink to be a runner.MetadataSink.
func TestEngineStampsTheRetryCount(t *testing.T) {
	dir := udftest.Dir(t)
	h := &failTwice{attempts: map[string][]string{}}
	serveSink(t, udconn.SinkEndpoint(dir, false), h)
	s := newSink(t, udftest.Settings(dir), runner.RoleSink)
	const n = 5
	src := runnertest.NewSource(runnertest.Messages(n))
	eng, err := runner.New(runner.Options{BatchSize: n}, src, nil, s, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The source ends once every message is acked; the deadline only
	// keeps a broken engine from hanging the test.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := eng.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if len(src.Acked()) != n {
		t.Fatalf("%d of %d acked", len(src.Acked()), n)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for v, got := range h.attempts {
		if len(got) != 3 || got[0] != "0" || got[1] != "1" || got[2] != "2" {
			t.Errorf("message %s: retry_count of its attempts %q, want [0 1 2]", v, got)
		}
	}
	if len(h.attempts) != n {
		t.Errorf("the container saw %d messages, want %d", len(h.attempts), n)
	}
}
