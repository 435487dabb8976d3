// Package numaflow_test runs the runner binary with Numaflow user-defined
// source, transformer and sinks built with the numaflow-go SDK
// (cmd/example-ud*), each a separate process on Unix sockets, and checks
// delivery by counting: every id the source made is acked exactly when its
// outputs were written, fallback-written or dropped, the output files match
// the example programs' rules exactly, and nothing is lost when a container
// is killed and restarted, or never comes back.
package numaflow_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/monovertex/monovertex/internal/testutil"
)

// The example programs' rules (see their package comments).
const (
	dropEvery     = 10 // n%10 == 0 dropped by the transformer
	fanoutEvery   = 10 // n%10 == 1 fanned out
	fanout        = 3
	fallbackEvery = 7  // n%7 == 0 answered FALLBACK by the sink
	failEvery     = 13 // n%13 == 5 failed once per sink process
	nackEvery     = 50 // n%50 == 2 nacked once per transformer process
)

var eventBase = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// expected returns the output IDs the sink and the fallback sink must hold
// for ids 0..total-1, each mapped to its n.
func expected(total int) (sink, fallback map[string]int) {
	sink, fallback = map[string]int{}, map[string]int{}
	for n := 0; n < total; n++ {
		if n%dropEvery == 0 {
			continue
		}
		target := sink
		if n%fallbackEvery == 0 {
			target = fallback
		}
		if n%fanoutEvery == 1 {
			for k := 0; k < fanout; k++ {
				target[testutil.ExampleSourceID(n)+"-"+strconv.Itoa(k)] = n
			}
			continue
		}
		target[testutil.ExampleSourceID(n)] = n
	}
	return sink, fallback
}

// pipeline is one set of processes sharing a socket directory.
type pipeline struct {
	*testutil.Examples
	total int
	size  int

	runnerEnv                           map[string]string
	source, transformer, sink, fallback *testutil.Process
}

func newPipeline(t *testing.T, total, size int) *pipeline {
	p := &pipeline{Examples: testutil.NewExamples(t, "mvnf"), total: total, size: size}
	p.runnerEnv = p.RunnerEnv(map[string]string{
		"MV_TRANSFORMER":     "udtransformer",
		"MV_FALLBACK_SINK":   "udsink",
		"MV_READ_BATCH_SIZE": "500",
	})
	return p
}

func (p *pipeline) startSource() {
	p.source = p.StartSource(p.total, map[string]string{"EXAMPLE_MSG_SIZE": strconv.Itoa(p.size)})
}

func (p *pipeline) startTransformer() {
	p.transformer = p.Start("example-udtransformer", "./cmd/example-udtransformer", map[string]string{
		"EXAMPLE_NACK_EVERY": strconv.Itoa(nackEvery),
	})
}

func (p *pipeline) startSink() {
	p.sink = p.StartSink("example-udsink", "sink.out", nil)
}

func (p *pipeline) startFallback() {
	p.fallback = p.StartSink("example-udsink-fallback", "fallback.out", map[string]string{"EXAMPLE_SINK_MODE": "fallback"})
}

func (p *pipeline) startAll() {
	p.startSource()
	p.startTransformer()
	p.startSink()
	p.startFallback()
	p.startRunner()
}

func (p *pipeline) startRunner() { p.StartRunner(p.runnerEnv) }

// acked returns the runner's count of acked input messages.
func (p *pipeline) ackedByRunner() int64 {
	st, err := p.Runner.Status()
	if err != nil {
		return -1
	}
	return st.Totals.Acked
}

// waitForProgress waits until the source's state file holds at least n ids.
func (p *pipeline) waitForAcked(n int, timeout time.Duration) {
	p.T.Helper()
	testutil.WaitFor(p.T, timeout, fmt.Sprintf("%d ids acked", n), func() bool {
		p.RunnerAlive()
		return len(p.ReadAcked("acked")) >= n
	})
}

// checkNothingUnwrittenAcked checks, at this moment, that every acked id
// has all its outputs in the output files (or was dropped). The acks are
// read first: anything acked by then was written before.
func (p *pipeline) checkNothingUnwrittenAcked() int {
	p.T.Helper()
	acked := p.ReadAcked("acked")
	have := map[string]bool{}
	for _, f := range []string{"sink.out", "fallback.out"} {
		for _, l := range p.ReadSinkLines(f) {
			have[l.ID] = true
		}
	}
	wantSink, wantFallback := expected(p.total)
	for _, want := range []map[string]int{wantSink, wantFallback} {
		for id, n := range want {
			if acked[n] && !have[id] {
				p.T.Fatalf("id %d was acked but its output %s was never written", n, id)
			}
		}
	}
	return len(acked)
}

// verify waits until every id is acked and pending is 0, then checks the
// output files against the rules exactly.
func (p *pipeline) verify(timeout time.Duration) {
	p.T.Helper()
	p.waitForAcked(p.total, timeout)
	testutil.WaitFor(p.T, 30*time.Second, "the source's pending to reach 0", func() bool {
		st, err := p.Runner.Status()
		return err == nil && st.Pending == 0
	})
	wantSink, wantFallback := expected(p.total)
	dups := 0
	for _, c := range []struct {
		file string
		want map[string]int
	}{{"sink.out", wantSink}, {"fallback.out", wantFallback}} {
		got := map[string]bool{}
		for _, l := range p.ReadSinkLines(c.file) {
			n, ok := c.want[l.ID]
			if !ok {
				p.T.Fatalf("%s has id %s (n=%d), which the rules do not send there", c.file, l.ID, l.N)
			}
			if got[l.ID] {
				dups++
			}
			got[l.ID] = true
			p.checkLine(l, n)
		}
		if len(got) != len(c.want) {
			missing := 0
			for id := range c.want {
				if !got[id] {
					missing++
				}
			}
			p.T.Fatalf("%s has %d distinct ids, the rules want %d (%d missing)", c.file, len(got), len(c.want), missing)
		}
		p.T.Logf("%s: %d distinct ids, as the rules say", c.file, len(got))
	}
	st, err := p.Runner.Status()
	if err != nil {
		p.T.Fatal(err)
	}
	p.T.Logf("runner totals: read %d acked %d nacked %d written %d fallback %d dropped %d sink errors %d; %d duplicate lines (allowed)",
		st.Totals.Read, st.Totals.Acked, st.Totals.Nacked, st.Totals.Written, st.Totals.FallbackWritten, st.Totals.Dropped, st.Totals.SinkErrors, dups)
}

// checkLine checks one written message against the source and transformer rules.
func (p *pipeline) checkLine(l testutil.SinkLine, n int) {
	p.T.Helper()
	wantSize := len(strconv.Itoa(n))
	if p.size > wantSize+1 {
		wantSize = p.size
	}
	wantKeys := "even"
	switch {
	case n%fanoutEvery == 1:
		wantKeys = "fan" + l.ID[strings.LastIndexByte(l.ID, '-')+1:]
	case n%2 == 1:
		wantKeys = "odd"
	}
	wantET := eventBase.Add(time.Duration(n)*time.Millisecond + time.Hour).UnixMilli()
	if l.N != n || l.Size != wantSize || !l.WellMade || l.Keys != wantKeys || l.EventMS != wantET {
		p.T.Fatalf("output %s: n=%d size=%d well-made=%v keys=%q event=%d; want n=%d size=%d well-made keys=%q event=%d",
			l.ID, l.N, l.Size, l.WellMade, l.Keys, l.EventMS, n, wantSize, wantKeys, wantET)
	}
}

func TestEveryMessageIsAckedExactlyWhenFinal(t *testing.T) {
	const total = 30_000
	p := newPipeline(t, total, 0)
	p.startAll()
	p.verify(150 * time.Second)
	p.checkNothingUnwrittenAcked()
	st, _ := p.Runner.Status()
	// Nacks from the transformer went back to the source and were read again.
	if st.Totals.Nacked < int64(total/nackEvery) {
		t.Fatalf("runner nacked %d messages, want at least the %d the transformer nacks", st.Totals.Nacked, total/nackEvery)
	}
	p.StopRunner()
}

func TestAContainerKilledMidStreamIsWaitedForAndNothingIsLost(t *testing.T) {
	for _, victim := range []string{"sink", "transformer", "source"} {
		t.Run(victim, func(t *testing.T) {
			const total = 8_000
			p := newPipeline(t, total, 0)
			p.startAll()
			p.waitForAcked(total/4, 90*time.Second)
			pid := p.Runner.Cmd.Process.Pid
			var restart func()
			switch victim {
			case "sink":
				p.sink.Kill()
				restart = p.startSink
			case "transformer":
				p.transformer.Kill()
				restart = p.startTransformer
			case "source":
				p.source.Kill()
				restart = p.startSource
			}
			testutil.WaitFor(t, 10*time.Second, "/readyz to report the container away", func() bool { return p.Runner.Readyz() == http.StatusServiceUnavailable })
			p.checkNothingUnwrittenAcked()
			// While the container is away the runner stops reading: the
			// batches it holds fill the in-flight slots.
			time.Sleep(2 * time.Second)
			st1, err1 := p.Runner.Status()
			time.Sleep(time.Second)
			st2, err2 := p.Runner.Status()
			if err1 != nil || err2 != nil || st1.Totals.Read != st2.Totals.Read {
				t.Fatalf("the runner kept reading while the %s was away: %d then %d (%v %v)", victim, st1.Totals.Read, st2.Totals.Read, err1, err2)
			}
			p.checkNothingUnwrittenAcked()
			restarted := time.Now()
			restart()
			p.verify(120 * time.Second)
			t.Logf("all %d ids final %v after the %s restarted", total, time.Since(restarted).Round(time.Millisecond), victim)
			if p.Runner.Exited() || p.Runner.Cmd.Process.Pid != pid {
				t.Fatalf("the runner restarted")
			}
			if !strings.Contains(p.Runner.Stderr.String(), "reconnected to Numaflow container") {
				t.Fatalf("no reconnect logged")
			}
			if p.Runner.Readyz() != http.StatusOK {
				t.Fatalf("not ready after the %s came back", victim)
			}
			p.StopRunner()
		})
	}
}

func TestASinkThatNeverComesBackStopsTheRunnerAndNothingIsLost(t *testing.T) {
	const total = 8_000
	p := newPipeline(t, total, 0)
	p.runnerEnv["MV_UDF_RECONNECT_TIMEOUT"] = "3s"
	p.startAll()
	p.waitForAcked(total/4, 90*time.Second)
	p.sink.Kill()
	start := time.Now()
	code := p.Runner.Wait(60 * time.Second)
	if code == 0 {
		t.Fatalf("runner exited 0 after losing its sink for good")
	}
	if took := time.Since(start); took < 3*time.Second {
		t.Fatalf("runner gave up after %v, before MV_UDF_RECONNECT_TIMEOUT=3s", took)
	}
	lines := strings.Split(strings.TrimRight(p.Runner.Stderr.String(), "\n"), "\n")
	if last := lines[len(lines)-1]; !strings.Contains(last, "MV_UDF_RECONNECT_TIMEOUT") || !strings.Contains(last, "sink.sock") {
		t.Fatalf("the last line does not say which container stayed away past MV_UDF_RECONNECT_TIMEOUT: %q", last)
	} else {
		t.Logf("exit line: %s", last)
	}
	acked := p.checkNothingUnwrittenAcked()
	if acked >= total {
		t.Fatalf("everything acked before the sink died; the test proves nothing")
	}
	t.Logf("runner exited %d after %v with %d of %d ids acked", code, time.Since(start).Round(time.Millisecond), acked, total)
	p.startSink()
	p.startRunner()
	p.verify(120 * time.Second)
	p.StopRunner()
}

// Large payloads alias pooled receive buffers that the engine hands back
// after each ack (payloadpool): verify checks every output's bytes against
// its ID, so a buffer reused while a message still needed it shows up as
// an output carrying another message's number.
func TestLargePayloadsFlowThrough(t *testing.T) {
	for _, c := range []struct {
		name        string
		total, size int
	}{{"1MiB", 40, 1 << 20}, {"64KiB", 600, 64 << 10}} {
		t.Run(c.name, func(t *testing.T) {
			p := newPipeline(t, c.total, c.size)
			p.runnerEnv["MV_READ_BATCH_SIZE"] = "8"
			p.startAll()
			p.verify(120 * time.Second)
			for _, l := range p.ReadSinkLines("sink.out") {
				if l.Size != c.size {
					t.Fatalf("output %s has %d bytes, want %d", l.ID, l.Size, c.size)
				}
			}
			p.StopRunner()
		})
	}
}

func TestIncompatibleServerInfoExitsTwo(t *testing.T) {
	bin := testutil.BuildRunner(t)
	for _, c := range []struct {
		name, content, want string
	}{
		{"sdk too old", `{"protocol":"uds","language":"go","version":"v0.8.0","minimum_numaflow_version":"1.2.0-rc4","metadata":null}U+005C__END__`, "go SDK version v0.8.0 is too old"},
		{"numaflow too old for the sdk", `{"protocol":"uds","language":"python","version":"0.30.0","minimum_numaflow_version":"9.0.0-z"}U+005C__END__`, "needs Numaflow 9.0.0 or newer"},
		{"end marker never comes", `{"protocol":"uds","language":"go","version":"v0.12.0"}`, "no end marker"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, err := os.MkdirTemp("", "mvnf")
			if err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(dir)
			if err := os.WriteFile(filepath.Join(dir, "sinker-server-info"), []byte(c.content), 0o644); err != nil {
				t.Fatal(err)
			}
			r := testutil.Start(t, "runner", bin, map[string]string{
				"MV_SINK": "udsink", "MV_UDS_DIR": dir, "MV_UDF_STARTUP_TIMEOUT": "30s",
				"PORT": strconv.Itoa(testutil.FreePort(t)), "MV_ADMIN_PORT": strconv.Itoa(testutil.FreePort(t)),
			})
			if code := r.Wait(30 * time.Second); code != 2 {
				t.Fatalf("exit code %d, want 2:\n%s", code, r.Stderr.String())
			}
			lines := strings.Split(strings.TrimRight(r.Stderr.String(), "\n"), "\n")
			last := lines[len(lines)-1]
			if !strings.Contains(last, c.want) || !strings.Contains(last, "sinker-server-info") {
				t.Fatalf("last stderr line %q does not say %q and name the file", last, c.want)
			}
			t.Logf("%s", last)
		})
	}
}
