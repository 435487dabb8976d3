// Package faults_test is the fault, bad-input and security suite: it runs
// the runner binary against real peers (an in-process nats-server with
// JetStream, Numaflow SDK containers as processes, CloudEvents receivers and
// functions on 127.0.0.1), breaks one of them (kill -9, outage, timeouts,
// garbage, slow answers, protocol violations, SIGTERM in the middle), and
// ends every scenario by counting: each message the source produced is in
// the sink or the fallback sink or was dropped on purpose, and the source
// has nothing left unacked. RELIABILITY.md holds the figures of a real run
// and the command that reproduces them.
//
// The default run fits in a few minutes on 2 cores; MV_FAULTS_LONG=1 runs
// the longer variants (more messages, more kills). MV_FAULTS_REPORT=<file>
// appends one JSON line per scenario with its figures.
package faults_test

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/monovertex/monovertex/internal/natstest"
	"github.com/monovertex/monovertex/internal/procstat"
	"github.com/monovertex/monovertex/internal/testutil"
)

// long reports whether the longer variants were asked for.
func long() bool { return os.Getenv("MV_FAULTS_LONG") == "1" }

// pick returns short, or long when MV_FAULTS_LONG=1.
func pick(short, longer int) int {
	if long() {
		return longer
	}
	return short
}

// result is one row of the reliability table.
type result struct {
	Scenario   string `json:"scenario"`
	Messages   int    `json:"messages"`
	Lost       int    `json:"lost"`
	Duplicated string `json:"duplicated"`
	Recovery   string `json:"recovery"`
	Notes      string `json:"notes,omitempty"`
}

var reportMu sync.Mutex

// report logs a scenario's figures and, with MV_FAULTS_REPORT set, appends
// them to that file as one JSON line.
func report(t *testing.T, r result) {
	t.Helper()
	t.Logf("RELIABILITY | %s | %d | %d | %s | %s | %s", r.Scenario, r.Messages, r.Lost, r.Duplicated, r.Recovery, r.Notes)
	path := os.Getenv("MV_FAULTS_REPORT")
	if path == "" {
		return
	}
	reportMu.Lock()
	defer reportMu.Unlock()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Errorf("report: %v", err)
		return
	}
	defer f.Close()
	b, _ := json.Marshal(r)
	fmt.Fprintf(f, "%s\n", b)
}

// round formats a duration for the table.
func round(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(100 * time.Millisecond).String()
}

// noRaces fails the test if a process built with -race reported a race.
func noRaces(t *testing.T, procs ...*testutil.Process) {
	t.Helper()
	for _, p := range procs {
		if p != nil && strings.Contains(p.Stderr.String(), "WARNING: DATA RACE") {
			t.Errorf("%s reported a data race:\n%s", p.Name, testutil.Tail(p.Stderr.String(), 8000))
		}
	}
}

// sigterm sends SIGTERM and returns the exit code and how long the exit took.
func sigterm(t *testing.T, p *testutil.Process, wait time.Duration) (int, time.Duration) {
	t.Helper()
	start := time.Now()
	p.Signal(syscall.SIGTERM)
	code := p.Wait(wait)
	return code, time.Since(start)
}

// startRunner starts the runner with env and waits until it is ready.
func startRunner(t *testing.T, env map[string]string) *testutil.Process {
	t.Helper()
	p := testutil.StartRunner(t, env)
	p.WaitReady(60 * time.Second)
	return p
}

// restart starts a new runner with env after an earlier one stopped, waits
// until it is ready and until settled returns, and says how long that took
// from the start: the scenario's recovery.
func restart(t *testing.T, env map[string]string, settled func()) (*testutil.Process, time.Duration) {
	t.Helper()
	restarted := time.Now()
	p := startRunner(t, env)
	settled()
	return p, time.Since(restarted)
}

// stopClean ends a scenario: the runner p must exit 0 within 30s of
// SIGTERM, and neither it nor the runners the test started before it
// (earlier) may have reported a data race.
func stopClean(t *testing.T, p *testutil.Process, earlier ...*testutil.Process) {
	t.Helper()
	name := "runner"
	if len(earlier) > 0 {
		name = "second runner"
	}
	if code, took := sigterm(t, p, 30*time.Second); code != 0 {
		t.Fatalf("%s exited %d after SIGTERM (%v)", name, code, took)
	}
	noRaces(t, append(earlier, p)...)
}

// restartAndCount starts a new runner with env after the runner earlier
// stopped, waits until all n messages are settled, fails the test if one
// is lost, and stops the new runner cleanly. It returns the count and how
// long the new runner took to finish.
func (f *jsFixture) restartAndCount(t *testing.T, env map[string]string, n int, earlier *testutil.Process) (natstest.Tally, time.Duration) {
	t.Helper()
	p, recovered := restart(t, env, func() { f.WaitSettled(n, 120*time.Second) })
	tl := f.Count(n, true)
	tl.MustBeComplete(t)
	stopClean(t, p, earlier)
	return tl, recovered
}

// jsFixture is the JetStream pipeline fixture (natstest.Pipeline) with the
// fault tests' own additions.
type jsFixture struct{ *natstest.Pipeline }

func newJS(t *testing.T) *jsFixture { return &jsFixture{natstest.NewPipeline(t)} }

// The fixture's stream and consumer names, as the fault tests name them.
const (
	inStream  = natstest.InStream
	outStream = natstest.OutStream
	fbStream  = natstest.FBStream
	consumer  = natstest.Consumer
)

// totals fetches /status; an error is reported as a zero status.
func totals(p *testutil.Process) (read, acked, written int64) {
	st, err := p.Status()
	if err != nil {
		return -1, -1, -1
	}
	return st.Totals.Read, st.Totals.Acked, st.Totals.Written
}

// lastTotals reads the read and acked totals of the runner's "runner
// stopped" log line, for a runner that has exited.
func lastTotals(t *testing.T, p *testutil.Process) (read, acked int64) {
	t.Helper()
	st := testutil.StopLine(t, p.Stderr.String())
	return st.Read, st.Acked
}

// goMetric reads an unlabelled metric (such as go_goroutines) from the
// runner's /metrics; -1 if it is missing.
func goMetric(p *testutil.Process, name string) float64 {
	return procstat.Metric(p.AdminURL+"/metrics", name, nil)
}

// checkShutdown judges a SIGTERM whose drain could not finish (a peer was
// down): the contract is exit 0 within MV_SHUTDOWN_TIMEOUT (drain and close
// share the budget; unfinished work is handed back, never acked). It
// returns a note for the table.
func checkShutdown(t *testing.T, code int, took, budget time.Duration, why string) string {
	t.Helper()
	if code != 0 || took > budget+2*time.Second {
		t.Fatalf("SIGTERM with the %s: exit %d after %v; want 0 within MV_SHUTDOWN_TIMEOUT=%v", why, code, took.Round(time.Millisecond), budget)
	}
	return fmt.Sprintf("exit %d after %s (MV_SHUTDOWN_TIMEOUT=%v)", code, round(took), budget)
}
