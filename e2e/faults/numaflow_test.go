package faults_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/monovertex/monovertex/internal/testutil"
)

// The Numaflow scenarios run cmd/example-udsource and cmd/example-udsink
// (the numaflow-go SDK's own servers) as processes; see e2e/numaflow for
// the kills of the source, transformer and sink containers, the container
// that never returns, and large payloads. These add the fallback sink
// container and sidecars that break the protocol.

// udPipeline is a set of Numaflow example containers and a runner sharing
// a socket directory (testutil.Examples, which also checks every process
// for data races at the end).
type udPipeline struct {
	*testutil.Examples
	total int
	env   map[string]string

	source, sink, fallback, runner *testutil.Process
}

func newUDPipeline(t *testing.T, total int) *udPipeline {
	p := &udPipeline{Examples: testutil.NewExamples(t, "mvfl"), total: total}
	p.env = p.RunnerEnv(map[string]string{
		"MV_NAME":            "faults-ud",
		"MV_READ_BATCH_SIZE": "200",
	})
	return p
}

func (p *udPipeline) startSource() {
	p.source = p.StartSource(p.total, nil)
}

// startSink starts example-udsink; fallbackEvery 0 writes everything.
func (p *udPipeline) startSink(fallbackEvery int) {
	p.sink = p.StartSink("example-udsink", "sink.out", map[string]string{"EXAMPLE_FALLBACK_EVERY": strconv.Itoa(fallbackEvery)})
}

func (p *udPipeline) startFallback() {
	p.fallback = p.StartSink("example-udsink-fallback", "fallback.out", map[string]string{"EXAMPLE_SINK_MODE": "fallback"})
}

// newFallbackPipeline starts example-udsource with total ids, example-udsink
// answering FALLBACK for every id divisible by fallbackEvery, and a second
// example-udsink as the runner's fallback sink; the test starts the runner.
func newFallbackPipeline(t *testing.T, total, fallbackEvery int) *udPipeline {
	p := newUDPipeline(t, total)
	p.env["MV_FALLBACK_SINK"] = "udsink"
	p.startSource()
	p.startSink(fallbackEvery)
	p.startFallback()
	return p
}

// mustFollowFallbackRule counts the ids of a newFallbackPipeline's sinks and
// fails the test if one is lost or not in the file the rule sends it to.
func (p *udPipeline) mustFollowFallbackRule(fallbackEvery int) udCount {
	p.T.Helper()
	c := p.count(func(n int) string {
		if n%fallbackEvery == 0 {
			return "fallback.out"
		}
		return "sink.out"
	}, "sink.out", "fallback.out")
	if c.lost > 0 || c.wrongPlace > 0 {
		p.T.Fatalf("%d ids lost, %d written where the rules do not send them", c.lost, c.wrongPlace)
	}
	return c
}

func (p *udPipeline) startRunner() { p.runner = p.StartRunner(p.env) }

// acked returns the ids in example-udsource's state file.
func (p *udPipeline) acked() map[int]bool { return p.ReadAcked("acked") }

// lines returns how often each message id appears well made in an
// example-udsink output file.
func (p *udPipeline) lines(name string) map[string]int {
	out := map[string]int{}
	for _, l := range p.ReadSinkLines(name) {
		if l.WellMade {
			out[l.ID]++
		}
	}
	return out
}

// waitAcked waits until n ids are acked, failing early if the runner exits.
func (p *udPipeline) waitAcked(n int, timeout time.Duration) {
	p.T.Helper()
	testutil.WaitFor(p.T, timeout, fmt.Sprintf("%d ids acked", n), func() bool {
		p.RunnerAlive()
		return len(p.acked()) >= n
	})
}

// checkAckedWereWritten checks that every acked id has its output in one of
// the files named; the acks are read first, so anything acked by then was
// written before.
func (p *udPipeline) checkAckedWereWritten(files ...string) int {
	p.T.Helper()
	acked := p.acked()
	have := map[string]bool{}
	for _, f := range files {
		for id := range p.lines(f) {
			have[id] = true
		}
	}
	for n := range acked {
		if !have[testutil.ExampleSourceID(n)] {
			p.T.Fatalf("id %d was acked but never written", n)
		}
	}
	return len(acked)
}

// udCount is the end count of a Numaflow scenario.
type udCount struct{ lost, wrongPlace, dupLines int }

// count checks every id 0..total-1 is in the file fileOf(n) says, once or
// more, and nowhere else.
func (p *udPipeline) count(fileOf func(n int) string, files ...string) udCount {
	p.T.Helper()
	var c udCount
	got := map[string]map[string]int{}
	for _, f := range files {
		got[f] = p.lines(f)
	}
	for n := 0; n < p.total; n++ {
		id := testutil.ExampleSourceID(n)
		want := fileOf(n)
		if got[want][id] == 0 {
			c.lost++
		} else {
			c.dupLines += got[want][id] - 1
		}
		for _, f := range files {
			if f != want && got[f][id] > 0 {
				c.wrongPlace++
			}
		}
	}
	return c
}

// TestFallbackSinkContainerKilledMidStream kills the fallback sink
// container with SIGKILL while messages flow and starts it again a few
// seconds later: the runner waits for it without restarting, acks nothing
// that was not written, and ends with every id in the file its rules say.
func TestFallbackSinkContainerKilledMidStream(t *testing.T) {
	const fallbackEvery = 7 // example-udsink answers FALLBACK for n%7 == 0
	total := pick(10_000, 50_000)
	p := newFallbackPipeline(t, total, fallbackEvery)
	p.startRunner()
	pid := p.runner.Cmd.Process.Pid
	p.waitAcked(total/4, 90*time.Second)

	p.fallback.Kill()
	killed := time.Now()
	testutil.WaitFor(t, 10*time.Second, "/readyz to report the fallback sink away", func() bool { return p.runner.Readyz() == http.StatusServiceUnavailable })
	p.checkAckedWereWritten("sink.out", "fallback.out")
	// Every batch holds messages for the fallback sink, so the in-flight
	// slots fill and reading stops while it is away.
	time.Sleep(2 * time.Second)
	r1, _, _ := totals(p.runner)
	time.Sleep(time.Second)
	r2, _, _ := totals(p.runner)
	if r1 != r2 {
		t.Fatalf("the runner kept reading while the fallback sink was away: %d then %d", r1, r2)
	}
	ackedDuring := p.checkAckedWereWritten("sink.out", "fallback.out")
	if ackedDuring >= total {
		t.Fatalf("everything was acked before the kill; the test proves nothing")
	}
	restarted := time.Now()
	p.startFallback()
	p.waitAcked(total, 120*time.Second)
	recovered := time.Since(restarted)
	testutil.WaitFor(t, 30*time.Second, "pending 0", func() bool {
		st, err := p.runner.Status()
		return err == nil && st.Pending == 0
	})
	if p.runner.Exited() || p.runner.Cmd.Process.Pid != pid {
		t.Fatalf("the runner restarted")
	}
	c := p.mustFollowFallbackRule(fallbackEvery)
	st, _ := p.runner.Status()
	t.Logf("fallback sink away %v; all %d ids acked %v after it came back; runner: read %d acked %d written %d fallback %d; %d duplicate lines",
		restarted.Sub(killed).Round(time.Millisecond), total, recovered.Round(time.Millisecond), st.Totals.Read, st.Totals.Acked, st.Totals.Written, st.Totals.FallbackWritten, c.dupLines)
	if code, took := sigterm(t, p.runner, 30*time.Second); code != 0 {
		t.Fatalf("runner exited %d after SIGTERM (%v)", code, took)
	}
	report(t, result{
		Scenario: "fallback sink container kill -9, restarted after 3s", Messages: total, Lost: c.lost,
		Duplicated: fmt.Sprintf("%d lines", c.dupLines), Recovery: round(recovered),
		Notes: fmt.Sprintf("%d acked before the kill; restart to all acked", ackedDuring),
	})
}

// TestSigtermWhileFallbackContainerAway stops the runner while the fallback
// sink container is down and messages wait for it: the runner exits within
// MV_SHUTDOWN_TIMEOUT having acked nothing unwritten; with the container
// and a new runner back, every id ends in the file its rules say.
func TestSigtermWhileFallbackContainerAway(t *testing.T) {
	const fallbackEvery = 7
	total := pick(6_000, 30_000)
	p := newFallbackPipeline(t, total, fallbackEvery)
	p.env["MV_SHUTDOWN_TIMEOUT"] = "3s"
	p.startRunner()
	p.waitAcked(total/4, 90*time.Second)
	p.fallback.Kill()
	testutil.WaitFor(t, 10*time.Second, "/readyz to report the fallback sink away", func() bool { return p.runner.Readyz() == http.StatusServiceUnavailable })
	time.Sleep(time.Second)
	code, took := sigterm(t, p.runner, 30*time.Second)
	ackedAtStop := p.checkAckedWereWritten("sink.out", "fallback.out")
	t.Logf("SIGTERM with the fallback sink away: exit %d after %v; %d of %d ids acked, all of them written", code, took.Round(time.Millisecond), ackedAtStop, total)
	exitNote := checkShutdown(t, code, took, 3*time.Second, "fallback sink container away")
	restarted := time.Now()
	p.startFallback()
	p.startRunner()
	p.waitAcked(total, 120*time.Second)
	recovered := time.Since(restarted)
	c := p.mustFollowFallbackRule(fallbackEvery)
	if code, took := sigterm(t, p.runner, 30*time.Second); code != 0 {
		t.Fatalf("second runner exited %d after SIGTERM (%v)", code, took)
	}
	report(t, result{
		Scenario: "SIGTERM while the fallback sink container is away, then restart", Messages: total, Lost: c.lost,
		Duplicated: fmt.Sprintf("%d lines", c.dupLines), Recovery: round(recovered),
		Notes: exitNote + "; restart to all acked",
	})
}

// TestEveryContainerSigtermedAtOnce is a pod deletion as the kubelet does
// it: SIGTERM reaches the runner and its Numaflow containers at the same
// moment. The numaflow-go servers answer with GOAWAY and keep serving the
// streams they have for up to 15 s (the SDK's GracefulStop); the runner
// must finish what it read over those streams instead of waiting for the
// containers to come back, so that every message read is written and acked
// before the containers go.
func TestEveryContainerSigtermedAtOnce(t *testing.T) {
	for _, transport := range []string{"udwire", "grpc-go"} {
		t.Run(transport, func(t *testing.T) { everyContainerSigtermedAtOnce(t, transport) })
	}
}

func everyContainerSigtermedAtOnce(t *testing.T, transport string) {
	total := pick(200_000, 1_000_000)
	p := newUDPipeline(t, total)
	p.env["MV_SHUTDOWN_TIMEOUT"] = "45s"
	p.env["MV_UDF_TRANSPORT"] = transport
	p.startSource()
	p.startSink(0)
	transformer := p.Start("example-udtransformer", "./cmd/example-udtransformer", map[string]string{"EXAMPLE_DROP_EVERY": "0", "EXAMPLE_FANOUT_EVERY": "0"})
	p.env["MV_TRANSFORMER"] = "udtransformer"
	p.startRunner()
	p.waitAcked(2_000, 60*time.Second)
	start := time.Now()
	for _, c := range []*testutil.Process{p.runner, p.source, transformer, p.sink} {
		c.Signal(syscall.SIGTERM)
	}
	code := p.runner.Wait(60 * time.Second)
	took := time.Since(start)
	for _, c := range []*testutil.Process{p.source, transformer, p.sink} {
		c.Wait(30 * time.Second)
	}
	stop := testutil.StopLine(t, p.runner.Stderr.String())
	acked := p.checkAckedWereWritten("sink.out")
	written := len(p.lines("sink.out"))
	t.Logf("SIGTERM to all four at once: runner exit %d after %v; read %d, written %d, acked %d, nacked %d; source state %d acked ids, sink file %d ids",
		code, took.Round(time.Millisecond), stop.Read, stop.Written, stop.Acked, stop.Nacked, acked, written)
	switch {
	case code != 0:
		t.Fatalf("runner exited %d:\n%s", code, testutil.Tail(p.runner.Stderr.String(), 4000))
	case stop.Read != stop.Acked+stop.Nacked:
		t.Fatalf("read %d, acked %d, nacked %d: %d messages left unfinished when the containers went", stop.Read, stop.Acked, stop.Nacked, stop.Read-stop.Acked-stop.Nacked)
	case int64(acked) != stop.Acked:
		t.Fatalf("the source recorded %d acks, the runner counted %d", acked, stop.Acked)
	case strings.Contains(p.runner.Stderr.String(), "giving up on the Numaflow container"):
		t.Fatalf("the runner gave up on a container that was stopping gracefully:\n%s", testutil.Tail(p.runner.Stderr.String(), 4000))
	}
	report(t, result{Scenario: "SIGTERM to the runner and every Numaflow container at once (a pod deletion), " + transport, Messages: int(stop.Read), Lost: 0,
		Duplicated: "0", Recovery: round(took), Notes: fmt.Sprintf("%d read, all written and acked before the containers' GracefulStop ended", stop.Read)})
}
