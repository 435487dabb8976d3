// Package ratelimit_test runs the real runner binary with a read rate limit
// shared through a real redis-server, restarts Redis mid-run, and counts
// that every message reached the sink.
package ratelimit_test

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/monovertex/monovertex/internal/redistest"
	"github.com/monovertex/monovertex/internal/testutil"
)

// sinkIDs counts the log sink's lines per message ID.
func sinkIDs(t *testing.T, out string) map[string]int {
	t.Helper()
	ids := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		_, rest, ok := strings.Cut(sc.Text(), " id=")
		if !ok {
			continue
		}
		q, err := strconv.QuotedPrefix(rest)
		if err != nil {
			t.Fatalf("log sink line without a quoted id: %q", sc.Text())
		}
		id, _ := strconv.Unquote(q)
		ids[id]++
	}
	return ids
}

// scrape returns the value of a metric line (name with its labels) in the
// runner's /metrics, or -1.
func scrape(t *testing.T, p *testutil.Process, name string) float64 {
	code, body := testutil.Get(t, p.AdminURL+"/metrics")
	if code != 200 {
		return -1
	}
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}

// Two runners share MV_RATE_LIMIT_MAX through Redis; Redis is killed and
// restarted empty while they read. Both go on with their last agreed
// share, rejoin the new server, finish, exit 0, and every message of both
// generators reached the sink.
func TestRedisRestartMidRunLosesNothing(t *testing.T) {
	srv := redistest.Start(t)
	const perRunner = 1500
	var runners []*testutil.Process
	for r := range 2 {
		runners = append(runners, testutil.StartRunner(t, map[string]string{
			"MV_NAME":                 "rl",
			"MV_REPLICA":              strconv.Itoa(r),
			"MV_SOURCE":               "generator",
			"MV_GENERATOR_RPU":        "100000",
			"MV_GENERATOR_TOTAL":      strconv.Itoa(perRunner),
			"MV_SINK":                 "log",
			"MV_READ_BATCH_SIZE":      "25",
			"MV_RATE_LIMIT_MAX":       "500",
			"MV_RATE_LIMIT_MIN":       "100",
			"MV_RATE_LIMIT_RAMP_UP":   "2s",
			"MV_RATE_LIMIT_STORE":     "redis",
			"MV_RATE_LIMIT_REDIS_URL": srv.URL(),
			"MV_RATE_LIMIT_TTL":       "5s",
		}))
	}
	sharing := func(n int) func() bool {
		return func() bool {
			for _, p := range runners {
				st, err := p.Status()
				if err != nil || st.RateLimit == nil || st.RateLimit.Replicas != n || st.RateLimit.Store != "redis" {
					return false
				}
			}
			return true
		}
	}
	testutil.WaitFor(t, 20*time.Second, "both runners sharing the limit", sharing(2))
	testutil.WaitFor(t, 10*time.Second, "both runners reading", func() bool {
		for _, p := range runners {
			if st, err := p.Status(); err != nil || st.Totals.Read == 0 {
				return false
			}
		}
		return true
	})
	before := make([]int64, 2)
	for i, p := range runners {
		st, _ := p.Status()
		before[i] = st.Totals.Read
		if st.Totals.Read >= perRunner {
			t.Fatalf("runner %d read all %d messages before the restart; the limit did not hold it back", i, perRunner)
		}
	}

	srv.Restart(1500 * time.Millisecond)
	for i, p := range runners {
		if n := scrape(t, p, "monovtx_rate_limit_store_errors_total"); n <= 0 {
			t.Fatalf("runner %d counted %v store errors across a Redis restart, want some", i, n)
		}
	}
	testutil.WaitFor(t, 10*time.Second, "both runners sharing again after the restart", sharing(2))

	for i, p := range runners {
		if code := p.Wait(60 * time.Second); code != 0 {
			t.Fatalf("runner %d exited %d", i, code)
		}
		stop := testutil.StopLine(t, p.Stderr.String())
		if stop.Read != perRunner || stop.Acked != perRunner || stop.Written != perRunner {
			t.Fatalf("runner %d: read %d, acked %d, written %d; want %d each", i, stop.Read, stop.Acked, stop.Written, perRunner)
		}
		ids := sinkIDs(t, p.Stdout.String())
		for seq := range perRunner {
			if id := fmt.Sprintf("%d-%d", i, seq); ids[id] == 0 {
				t.Fatalf("runner %d: message %s never reached the sink (%d distinct IDs written)", i, id, len(ids))
			}
		}
		t.Logf("runner %d: %d read before the restart, %d written in all, %d distinct IDs", i, before[i], stop.Written, len(ids))
	}
}
