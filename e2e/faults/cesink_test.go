package faults_test

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/monovertex/monovertex/internal/testutil"
)

// outage drives a receiver through 503 for d, then gone for d, and checks
// while it lasts that the runner acks no more messages than the sinks took
// (written counts them). With only the failing sink, written is frozen, so
// nothing is acked beyond what was written before the outage (acks of those
// may still land late). It returns when the receiver is back.
func outage(t *testing.T, p *testutil.Process, r *receiver, d time.Duration, written func() int) {
	t.Helper()
	for _, phase := range []string{"503", "down"} {
		r.setMode(phase)
		// Acks of events accepted just before the switch may still land.
		time.Sleep(300 * time.Millisecond)
		_, acked0, _ := totals(p)
		accepted0 := r.distinct()
		end := time.Now().Add(d - 300*time.Millisecond)
		for time.Now().Before(end) {
			// Acks first: whatever was acked by then was written before.
			_, acked, _ := totals(p)
			if w := written(); acked > int64(w) {
				t.Fatalf("%s: the runner acked %d messages, the sinks took %d", phase, acked, w)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if r.distinct() != accepted0 {
			t.Fatalf("%s: the receiver accepted events while it was failing", phase)
		}
		_, acked1, _ := totals(p)
		t.Logf("sink %s for %v: runner acked %d -> %d (sink holds %d)", phase, d, acked0, acked1, accepted0)
	}
	r.setMode("ok")
}

// sinkOutage publishes n messages over about 6s, starts the runner with
// env, and once events flow takes the first receiver through the outage
// (503 for 2s, then gone for 2s) while the rest (the fallback sink) stay up.
// It returns the runner, the time from the sink's return to its next
// event, and what the sink held at its return, once the receivers hold all
// n messages.
func (f *jsFixture) sinkOutage(t *testing.T, n int, env map[string]string, rs ...*receiver) (p *testutil.Process, recovered time.Duration, before int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	published := f.pace(ctx, n, 64, 6*time.Second)
	p = startRunner(t, env)
	r := rs[0]
	testutil.WaitFor(t, 30*time.Second, "events flowing", func() bool { return r.distinct() >= 500 })

	outage(t, p, r, 2*time.Second, func() int {
		held := 0
		for _, s := range rs {
			held += s.distinct()
		}
		return held
	})
	back := time.Now()
	before = r.distinct()
	testutil.WaitFor(t, 30*time.Second, "events flowing again", func() bool { return r.distinct() > before })
	recovered = time.Since(back)
	if err := <-published; err != nil {
		t.Fatal(err)
	}
	f.waitReceived(n, 120*time.Second, rs...)
	return p, recovered, before
}

// TestCloudEventsSinkOutageWithRetry: the sink answers 503, then is gone,
// then is back, for far longer than the retry steps last. With
// MV_ON_FAILURE=retry nothing is acked while it is down and every message
// arrives after.
func TestCloudEventsSinkOutageWithRetry(t *testing.T) {
	n := pick(6000, 30000)
	f, r, env := newCESink(t)
	env["MV_ON_FAILURE"] = "retry"
	p, recovered, before := f.sinkOutage(t, n, env, r)
	accepted, failed := r.snapshot()
	c := countIDs(n, accepted)
	read, acked, _ := totals(p)
	if c.lost > 0 {
		t.Fatalf("%d of %d messages lost", c.lost, n)
	}
	if len(failed) == 0 {
		t.Fatalf("the receiver answered no 503: the test proves nothing")
	}
	t.Logf("all %d messages arrived, %d after the sink came back (first within %v); %d distinct ids answered 503; runner read %d acked %d; %d delivered twice",
		n, n-before, recovered.Round(time.Millisecond), len(failed), read, acked, c.dups)
	stopClean(t, p)
	report(t, result{
		Scenario: "CloudEvents sink 503 2s then gone 2s, MV_ON_FAILURE=retry", Messages: n, Lost: c.lost,
		Duplicated: strconv.Itoa(c.dups), Recovery: round(recovered),
		Notes: "retry window 3 x 50ms; acks never passed what the sink had taken",
	})
}

// TestCloudEventsSinkOutageWithFallback: the same outage with
// MV_ON_FAILURE=fallback and two retry steps. Messages the sink answered 503
// on all three attempts are exhausted and must be in the fallback sink;
// messages that only met refused connections must not be there, because a
// call in which no message could connect waits and retries without
// spending retry steps; nothing is lost or in both sinks.
//
// At the moment the sink goes away one call can mix answers (503, or a
// connection reset mid-request) with refused connections; then every
// message of that call spends a step, the refused ones included, and a
// message can reach the fallback sink with fewer than three 503s seen by
// the receiver. The test counts these as "exhausted at the cut" and checks
// that each still met at least one real failure answer.
func TestCloudEventsSinkOutageWithFallback(t *testing.T) {
	n := pick(6000, 30000)
	const steps = 2
	f, r, env := newCESink(t)
	fb := startReceiver(t)
	env["MV_ON_FAILURE"] = "fallback"
	env["MV_RETRY_STEPS"] = strconv.Itoa(steps)
	env["MV_RETRY_INTERVAL"] = "20ms"
	env["MV_FALLBACK_SINK"] = "cloudevents"
	env["MV_FALLBACK_SINK_URL"] = fb.URL
	p, recovered, _ := f.sinkOutage(t, n, env, r, fb)
	accepted, failed := r.snapshot()
	fallen, _ := fb.snapshot()
	c := countIDs(n, accepted, fallen)
	if c.lost > 0 || c.inBoth > 0 {
		t.Fatalf("%d of %d messages lost, %d in both sinks", c.lost, n, c.inBoth)
	}
	var onlyRefused, missing []string
	exhausted, atCut := 0, 0
	for id := range fallen {
		switch k := failed[id]; {
		case k == 0:
			onlyRefused = append(onlyRefused, id)
		case k < steps+1:
			atCut++
		}
	}
	for id, k := range failed {
		if k >= steps+1 {
			exhausted++
			if fallen[id] == 0 {
				missing = append(missing, fmt.Sprintf("%s (%d failures)", id, k))
			}
		}
	}
	sort.Strings(onlyRefused)
	sort.Strings(missing)
	if len(onlyRefused) > 0 {
		t.Fatalf("%d messages reached the fallback sink having met only refused connections (first %.5v): a sink that is away must not spend retry steps", len(onlyRefused), onlyRefused)
	}
	if len(missing) > 0 {
		t.Fatalf("%d messages were answered 503 on all %d attempts but are not in the fallback sink (first %.5v)", len(missing), steps+1, missing)
	}
	if exhausted == 0 {
		t.Fatalf("no message was exhausted: the test proves nothing")
	}
	if atCut > 400 { // at most one read batch per in-flight slot is caught in the cut
		t.Fatalf("%d messages reached the fallback sink with fewer than %d failure answers: more than the calls in flight when the sink went away", atCut, steps+1)
	}
	read, acked, _ := totals(p)
	t.Logf("fallback sink holds %d messages: the %d answered 503 on every attempt and %d exhausted at the cut; sink %d; runner read %d acked %d; %d delivered twice",
		len(fallen), exhausted, atCut, len(accepted), read, acked, c.dups)
	stopClean(t, p)
	report(t, result{
		Scenario: "CloudEvents sink 503 2s then gone 2s, MV_ON_FAILURE=fallback, 2 steps", Messages: n, Lost: c.lost,
		Duplicated: strconv.Itoa(c.dups), Recovery: round(recovered),
		Notes: fmt.Sprintf("fallback: %d answered 503 x3 + %d exhausted at the cut; 0 only refused", exhausted, atCut),
	})
}

// TestSigtermDuringSinkOutage stops the runner while the sink is gone: it
// must exit within MV_SHUTDOWN_TIMEOUT having acked nothing unwritten, and
// a new runner delivers everything once the sink is back.
func TestSigtermDuringSinkOutage(t *testing.T) {
	n := pick(4000, 20000)
	f, r, env := newCESink(t)
	env["MV_SHUTDOWN_TIMEOUT"] = "3s"
	f.PublishAll(n/2, 64)
	p := startRunner(t, env)
	testutil.WaitFor(t, 30*time.Second, "events flowing", func() bool { return r.distinct() >= 200 })
	r.setMode("down")
	time.Sleep(500 * time.Millisecond)
	accepted := r.distinct()
	code, took := sigterm(t, p, 30*time.Second)
	read, acked := lastTotals(t, p)
	t.Logf("SIGTERM with the sink gone: exit %d after %v; read %d acked %d, receiver holds %d", code, took.Round(time.Millisecond), read, acked, accepted)
	if acked > int64(accepted) {
		t.Fatalf("the runner acked %d messages, the sink accepted %d", acked, accepted)
	}
	exitNote := checkShutdown(t, code, took, 3*time.Second, "CloudEvents sink gone")
	r.setMode("ok")
	f.Publish(context.Background(), n/2, n, 1000, 64, 0)
	c, recovered := f.restartAndReceive(t, env, n, 120*time.Second, r, p)
	report(t, result{
		Scenario: "SIGTERM while the CloudEvents sink is gone, then restart", Messages: n, Lost: c.lost,
		Duplicated: strconv.Itoa(c.dups), Recovery: round(recovered),
		Notes: exitNote + "; restart to all delivered",
	})
}
