package udftest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/monovertex/monovertex/runner"
)

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
