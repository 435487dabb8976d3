package runner_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/monovertex/monovertex/internal/testutil"
)

// TestProbesAnswerWithOneCPUUnderLoad runs the runner binary as a pod with
// a one-CPU limit runs it (GOMAXPROCS=1) with a source that never blocks
// (an unthrottled generator into blackhole) and probes its admin port
// while it moves messages. Without the read loop's yield the read loop and
// the batch goroutines kept the one P for seconds and /status answered
// after 4-10 s (hack/bench/RESULTS.md); a kubelet probe times out after 1 s
// by default. The bound here is a generous liveness bound, not a speed
// assertion: every probe must answer within 10 s, and the runner must be
// acking between probes, so the probes really ran under load.
func TestProbesAnswerWithOneCPUUnderLoad(t *testing.T) {
	p := testutil.StartRunner(t, map[string]string{
		"GOMAXPROCS":            "1",
		"MV_NAME":               "onecpu",
		"MV_LOG_LEVEL":          "warn",
		"MV_SOURCE":             "generator",
		"MV_GENERATOR_RPU":      "10000000", // the generator's most: reads never block
		"MV_GENERATOR_DURATION": "1s",
		"MV_SINK":               "blackhole",
	})
	p.WaitReady(time.Minute)
	client := &http.Client{Timeout: 10 * time.Second}
	var lastAcked int64 = -1
	for i := range 6 {
		time.Sleep(300 * time.Millisecond)
		for _, path := range []string{"/livez", "/readyz", "/metrics"} {
			start := time.Now()
			resp, err := client.Get(p.AdminURL + path)
			if err != nil {
				t.Fatalf("probe %d: GET %s with GOMAXPROCS=1 under load: %v (after %v)", i, path, err, time.Since(start))
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("probe %d: GET %s answered %s", i, path, resp.Status)
			}
		}
		st, err := p.Status()
		if err != nil {
			t.Fatalf("probe %d: /status with GOMAXPROCS=1 under load: %v", i, err)
		}
		acked := st.Totals.Acked
		if acked <= lastAcked {
			t.Fatalf("probe %d: acked %d, not more than %d at the probe before: the runner was not under load", i, acked, lastAcked)
		}
		lastAcked = acked
	}
}
