package runner_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/runnertest"
)

// TestRetryAfterStretchesTheBackoff: a failure marked RetryAfter (a 429
// or 503 with Retry-After) is retried no sooner than it asked, although
// MV_RETRY_INTERVAL is a microsecond, and the retry still spends a step.
func TestRetryAfterStretchesTheBackoff(t *testing.T) {
	const wait = 300 * time.Millisecond
	var mu sync.Mutex
	tries := map[string][]time.Time{}
	sink := runnertest.NewSink(func(m *runner.Message, attempt int) runner.WriteResult {
		mu.Lock()
		tries[m.ID] = append(tries[m.ID], time.Now())
		mu.Unlock()
		if attempt == 1 {
			return runner.WriteResult{Status: runner.WriteFailed, Err: runner.RetryAfter(errors.New("503 Service Unavailable"), wait)}
		}
		return runner.WriteResult{}
	})
	src := runnertest.NewSource(runnertest.Messages(20))
	e := run(t, runner.Options{BatchSize: 10, OnFailure: runner.OnFailureDrop, Retry: runner.RetryPolicy{Interval: time.Microsecond, Steps: 1}}, src, nil, sink, nil)
	if st := e.Status().Totals; st.Acked != 20 || st.Written != 20 || st.Dropped != 0 {
		t.Fatalf("totals %+v, want 20 acked and written", st)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, ts := range tries {
		if len(ts) != 2 {
			t.Fatalf("%s tried %d times, want 2", id, len(ts))
		}
		if gap := ts[1].Sub(ts[0]); gap < wait {
			t.Errorf("%s retried %v after a Retry-After of %v", id, gap, wait)
		}
	}
}
