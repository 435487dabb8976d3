package faults_test

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/monovertex/monovertex/internal/procstat"
	"github.com/monovertex/monovertex/internal/testutil"
)

// rssSampler reads a process's VmRSS every interval until stopped.
type rssSampler struct {
	mu      sync.Mutex
	samples []int64
	stop    chan struct{}
	done    chan struct{}
}

func sampleRSS(pid int, every time.Duration) *rssSampler {
	s := &rssSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			if v, err := procstat.RSS(pid); err == nil {
				s.mu.Lock()
				s.samples = append(s.samples, v)
				s.mu.Unlock()
			}
			select {
			case <-t.C:
			case <-s.stop:
				return
			}
		}
	}()
	return s
}

// finish stops sampling and returns the samples.
func (s *rssSampler) finish() []int64 {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples
}

func peak(v []int64) int64 {
	var m int64
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

const (
	slowBatch    = 200
	slowInflight = 4
	slowPayload  = 32 << 10
)

func slowSinkEnv(f *jsFixture, url string) map[string]string {
	env := ceSinkEnv(f, url)
	env["MV_READ_BATCH_SIZE"] = strconv.Itoa(slowBatch)
	env["MV_INFLIGHT_BATCHES"] = strconv.Itoa(slowInflight)
	env["MV_CE_SINK_CONCURRENCY"] = "32"
	env["MV_CE_SINK_TIMEOUT"] = "1s"
	env["MV_RETRY_STEPS"] = "unlimited"
	return env
}

// slowRule answers each event after 50ms, and the first attempt of one in
// fifty after 1.5s, past MV_CE_SINK_TIMEOUT=1s: that attempt times out, is
// not accepted, and must be retried.
func slowRule(r *receiver) func(id string) time.Duration {
	var mu sync.Mutex
	seen := map[string]bool{}
	return func(id string) time.Duration {
		seq := seqOf(id)
		mu.Lock()
		first := !seen[id]
		seen[id] = true
		mu.Unlock()
		if first && seq%50 == 0 {
			return 1500 * time.Millisecond
		}
		return 50 * time.Millisecond
	}
}

// TestSlowSinkKeepsMemoryBounded moves a few times more data than the
// engine may hold (MV_READ_BATCH_SIZE x payload x MV_INFLIGHT_BATCHES)
// through a sink that answers each event after 50ms and lets one in fifty
// first attempts run past MV_CE_SINK_TIMEOUT. The runner's RSS, sampled
// from /proc every 100ms, must not grow from the second quarter of the run
// to the last and must stay within its start plus a multiple of that bound
// (both without the race detector, whose shadow memory grows with every
// allocation), the GC goal must stay within a small multiple of that bound,
// and every timed-out delivery is retried, so nothing is lost.
func TestSlowSinkKeepsMemoryBounded(t *testing.T) {
	n := pick(4000, 20000)
	f := newJS(t)
	r := startReceiver(t)
	r.delay = slowRule(r)
	f.PublishAll(n, slowPayload)
	bound := int64(slowBatch * slowPayload * slowInflight)

	p := startRunner(t, slowSinkEnv(f, r.URL))
	base, err := procstat.RSS(p.Cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	s := sampleRSS(p.Cmd.Process.Pid, 100*time.Millisecond)
	start := time.Now()
	var heapMax float64
	type goalAt struct {
		at   time.Duration
		goal float64
	}
	var goals []goalAt
	stopHeap := make(chan struct{})
	heapDone := make(chan struct{})
	go func() {
		defer close(heapDone)
		for {
			inuse := goMetric(p, "go_memstats_heap_inuse_bytes")
			heapMax = max(heapMax, inuse)
			goals = append(goals, goalAt{time.Since(start), goMetric(p, "go_memstats_next_gc_bytes")})
			select {
			case <-stopHeap:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	f.waitReceived(n, 180*time.Second, r)
	close(stopHeap)
	<-heapDone
	took := time.Since(start)
	samples := s.finish()
	// The GC goal after the ramp-up (the first quarter of the run, as for
	// the RSS below): when reading starts, a collection can find the live
	// heap several times what the one before found, and the goal of that
	// one cycle is then the new live heap times the percent the pacer set
	// for the small one (up to 3x at the 16 MiB floor). That is the likely
	// reading of CI at 559720d, where the goal reached 247 MiB with at most
	// 84 MiB of heap in use (not confirmed: the log did not say when; it
	// does now). A runner keeping what it moved grows its goal for the
	// whole run, and is caught after the ramp-up.
	var goalMax, goalAll float64
	var goalAllAt time.Duration
	for _, g := range goals {
		if g.goal > goalAll {
			goalAll, goalAllAt = g.goal, g.at
		}
		if g.at >= took/4 {
			goalMax = max(goalMax, g.goal)
		}
	}
	c := mustHaveAll(t, n, r)
	if len(samples) < 10 {
		t.Fatalf("only %d RSS samples", len(samples))
	}
	// The first quarter is the ramp-up to the steady state; compare the
	// second quarter of the run with the last.
	q := len(samples) / 4
	first, second := peak(samples[q:2*q]), peak(samples[3*q:])
	top := peak(samples)
	st, _ := p.Status()
	t.Logf("moved %d x %d KiB (%s, %.1fx the in-flight bound of %s) in %v (%.0f msg/s); RSS at start %s, peak %s (second quarter %s, last quarter %s); Go heap in use peaked at %s, GC goal at %s after the ramp-up (%s at %v over the whole run); %d first attempts timed out and were retried; runner read %d acked %d sink errors %d",
		n, slowPayload>>10, mib(int64(n)*slowPayload), float64(int64(n)*slowPayload)/float64(bound), mib(bound), took.Round(time.Millisecond), float64(n)/took.Seconds(),
		mib(base), mib(top), mib(first), mib(second), mib(int64(heapMax)), mib(int64(goalMax)), mib(int64(goalAll)), goalAllAt.Round(time.Millisecond), n/50, st.Totals.Read, st.Totals.Acked, st.Totals.SinkErrors)
	// Flat: the end of the run, with far more data moved, needs no more
	// memory than after the ramp-up. With the race detector the RSS is
	// mostly its shadow memory (four times the heap here), which grows with
	// the addresses the heap has used, so 10-35 % more in the last quarter
	// than in the second, at this commit and before it alike; and the Go
	// heap's level follows the machine's load, not only what the runner
	// keeps: with e2e/contract running beside it, its median went from 55
	// to 85 MiB between those quarters with nothing leaking, and a quarter's
	// peak depends on whether a sample caught the top of the sawtooth (CI
	// once saw 81 MiB in the second quarter, 111 in the last). So with the
	// race detector the bound on the GC goal below is the check: a sink
	// keeping a copy of every payload took the goal to 310-364 MiB (four
	// runs), the bound is 182; nothing leaking, 84-112 MiB under that load.
	// The quarters compare only when the run moved at least 20x the bound
	// (MV_FAULTS_LONG=1): in the short run (5x, about 11 s) the RSS is
	// still climbing to its level when the run ends, with nothing leaking
	// (second / last quarter 113-126 / 126-158 MiB in nine runs here, the
	// long run 169-173 / 173 MiB), and the runner's pacer holds the heap's
	// goal at its peak for 10 s. There the bounds on the goal and the peak
	// below catch a runner keeping what it moved: with the CloudEvents
	// sink keeping a copy of every payload (tried, two runs) the goal
	// reached 274-287 MiB against 182, the RSS 274-295 MiB.
	if !raceBuild && int64(n)*slowPayload >= 20*bound && second > first+first/4+(8<<20) {
		t.Fatalf("RSS grew from %s in the second quarter of the run to %s in the last", mib(first), mib(second))
	}
	// The GC goal is at most twice the live heap, or the live heap + 16 MiB
	// while that is more (the runner's pacer lowers GOGC=100 for pooled
	// payloads and gives a small heap at least 16 MiB of headroom): what
	// the runner keeps alive must stay within a small multiple of the
	// in-flight bound, and far below the data moved.
	if limit := 2 * (3*bound + 16<<20); int64(goalMax) > limit {
		t.Fatalf("the GC goal reached %s after the ramp-up: the live heap exceeds 3 x the in-flight bound %s + 16 MiB", mib(int64(goalMax)), mib(bound))
	}
	// RSS: without the race detector (whose shadow memory grows with every
	// allocation) it must stay within the start plus a multiple of the bound.
	if limit := base + 6*bound + 32<<20; !raceBuild && top > limit {
		t.Fatalf("RSS peaked at %s, above start %s + 6 x the in-flight bound %s + 32 MiB", mib(top), mib(base), mib(bound))
	}
	if st.Totals.SinkErrors == 0 {
		t.Fatalf("no delivery timed out: the test proves nothing about timeouts")
	}
	stopClean(t, p)
	report(t, result{
		Scenario: "slow sink (50ms per event, 1 in 50 first attempts past the 1s timeout)", Messages: n, Lost: c.lost,
		Duplicated: strconv.Itoa(c.dups), Recovery: "-",
		Notes: fmt.Sprintf("RSS %s -> peak %s, quarters 2 / 4 %s / %s, GC goal %s (bound %s = %d x %d KiB x %d); %.0f msg/s", mib(base), mib(top), mib(first), mib(second), mib(int64(goalMax)), mib(bound), slowBatch, slowPayload>>10, slowInflight, float64(n)/took.Seconds()),
	})
}

// TestSigtermDuringSlowSink stops the runner while it writes to the slow
// sink: it finishes what it holds within MV_SHUTDOWN_TIMEOUT, exits 0 with
// read = acked, and a new runner moves the rest.
func TestSigtermDuringSlowSink(t *testing.T) {
	n := pick(2000, 10000)
	f := newJS(t)
	r := startReceiver(t)
	r.delay = slowRule(r)
	f.PublishAll(n, 1024)
	env := slowSinkEnv(f, r.URL)
	p := startRunner(t, env)
	testutil.WaitFor(t, 60*time.Second, "a quarter delivered", func() bool { return r.distinct() >= n/4 })
	code, took := sigterm(t, p, 30*time.Second)
	read, acked := lastTotals(t, p)
	accepted := r.distinct()
	t.Logf("SIGTERM with the slow sink: exit %d after %v; read %d acked %d; receiver holds %d", code, took.Round(time.Millisecond), read, acked, accepted)
	if code != 0 || took > 13*time.Second {
		t.Fatalf("exit %d after %v; want 0 within MV_SHUTDOWN_TIMEOUT=10s", code, took)
	}
	if read != acked || acked > int64(accepted) {
		t.Fatalf("after the drain: read %d acked %d, receiver holds %d", read, acked, accepted)
	}
	c, recovered := f.restartAndReceive(t, env, n, 180*time.Second, r, p)
	report(t, result{
		Scenario: "SIGTERM while writing to the slow sink, then restart", Messages: n, Lost: c.lost,
		Duplicated: strconv.Itoa(c.dups), Recovery: round(recovered),
		Notes: fmt.Sprintf("exit 0 after %s with read = acked; restart to all delivered", round(took)),
	})
}
