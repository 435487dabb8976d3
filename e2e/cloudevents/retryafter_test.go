package cloudevents_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// TestRunnerHonoursRetryAfter runs the runner binary against a sink that
// answers each event's first delivery with 429 Retry-After: 1 (even
// events) or 503 Retry-After: 3600 (odd), and takes the second. With
// MV_RETRY_INTERVAL=1ms the retry comes no sooner than the header asks,
// bounded by MV_CE_SINK_RETRY_AFTER_MAX=2s (so the hour is two seconds),
// and every event is delivered: Knative's dispatcher's rule
// (pkg/kncloudevents/retries.go, retryAfterMax).
func TestRunnerHonoursRetryAfter(t *testing.T) {
	var mu sync.Mutex
	tries := map[string][]time.Time{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("Ce-Id")
		mu.Lock()
		tries[id] = append(tries[id], time.Now())
		n := len(tries[id])
		mu.Unlock()
		if n > 1 {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		var i int
		fmt.Sscanf(id, "ev-%d", &i)
		if i%2 == 0 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.Header().Set("Retry-After", "3600")
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	p := startHTTPRunner(t, "ra", map[string]string{
		"K_SINK":                     srv.URL,
		"MV_CE_SINK_RETRY_AFTER_MAX": "2s",
		"MV_RETRY_INTERVAL":          "1ms",
	})
	const n = 10
	waitOK(t, sendEvents(p, "ra", 0, n))
	mu.Lock()
	defer mu.Unlock()
	if len(tries) != n {
		t.Fatalf("%d events reached the sink, want %d", len(tries), n)
	}
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("ev-%d", i)
		ts := tries[id]
		want := time.Second
		if i%2 == 1 {
			want = 2 * time.Second
		}
		if len(ts) != 2 {
			t.Errorf("%s delivered %d times, want 2", id, len(ts))
			continue
		}
		if gap := ts[1].Sub(ts[0]); gap < want {
			t.Errorf("%s retried %v after its refusal, want at least %v", id, gap, want)
		} else {
			t.Logf("%s retried %v after its refusal (at least %v)", id, gap.Round(time.Millisecond), want)
		}
	}
}
