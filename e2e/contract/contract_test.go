// Package contract_test checks Numaflow's container contract end to end:
// the runner binary with a user-defined source, a source transformer, a map
// UDF and three user-defined sinks (sink, fallback sink, onSuccess sink),
// each a numaflow-go SDK server in its own process on a Unix socket
// (cmd/example-ud*), written the way Numaflow users write them: a source
// that is not safe for concurrent reads (it exits if two Read or two Ack
// calls overlap) and sinks that hold a mutex across their whole handler
// and record how many handler calls overlap.
//
// Tens of thousands of messages go through failures, fallbacks, ON_SUCCESS
// with replacement messages, NACK with a delay, transformer and map drops
// and fan-outs, and tags routed by bypass conditions to each of the three
// sinks. At the end every id is acked, every output is in exactly the file
// the example programs' rules send it to (the onSuccess file besides the
// sink's where the rules say so), no ack came before its outputs were
// written, each sink saw one handler call at a time, every nacked id came
// back no sooner than its delay, and the runner's totals agree with the
// files. The same holds in streaming mode, and when the sink, the
// onSuccess sink or the map container is killed with SIGKILL and restarted
// mid-stream under the same runner process.
package contract_test

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestSinkContractHoldsInBatchMode(t *testing.T) {
	p := newPipeline(t, setup{total: 30_000, sinkCondition: true})
	p.startAll()
	p.verify(150*time.Second, true)
	st := p.status()
	if st.Mode != "batch" || len(st.Chain) != 6 || st.Bypass == nil ||
		st.Bypass.Sink != bypassSink || st.Bypass.Fallback != bypassFallback || st.Bypass.OnSuccess != bypassOnSuccess {
		t.Fatalf("/status: mode %q, chain %v, bypass %+v", st.Mode, st.Chain, st.Bypass)
	}
	t.Logf("chain: %s", strings.Join(st.Chain, " -> "))
	p.StopRunner()
}

func TestSinkContractHoldsInStreamingMode(t *testing.T) {
	p := newPipeline(t, setup{total: 20_000, streaming: true, concurrency: 400})
	p.startAll()
	p.verify(150*time.Second, true)
	if st := p.status(); st.Mode != "streaming" {
		t.Fatalf("status mode %q, want streaming", st.Mode)
	}
	p.StopRunner()
}

func TestAKilledContainerIsWaitedForAndNothingIsLost(t *testing.T) {
	for _, c := range []struct {
		victim    string
		streaming bool
		mapMode   string
	}{{"sink", false, ""}, {"onsuccess", false, ""}, {"map", false, ""}, {"map", true, "stream"}, {"sink", true, "stream"}} {
		victim, name := c.victim, c.victim
		if c.streaming {
			name += " in streaming mode with a map stream"
		}
		t.Run(name, func(t *testing.T) {
			p := newPipeline(t, setup{total: 8_000, streaming: c.streaming, concurrency: 400, mapMode: c.mapMode})
			p.startAll()
			p.waitForAcked(p.s.total/4, 90*time.Second)
			pid := p.Runner.Cmd.Process.Pid
			var restart func()
			switch victim {
			case "sink":
				p.sinks[fileSink].Kill()
				restart = func() { p.startSink(fileSink) }
			case "onsuccess":
				p.sinks[fileOnSuccess].Kill()
				restart = func() { p.startSink(fileOnSuccess) }
			case "map":
				p.mapper.Kill()
				restart = p.startMap
			}
			killed := time.Now()
			away := false
			for time.Since(killed) < 5*time.Second && !away {
				away = p.Runner.Readyz() == http.StatusServiceUnavailable
				time.Sleep(50 * time.Millisecond)
			}
			time.Sleep(time.Second)
			acked := p.checkNothingAckedEarly()
			t.Logf("%s killed with %d of %d ids acked; /readyz reported it away: %v", victim, acked, p.s.total, away)
			restarted := time.Now()
			restart()
			p.verify(120*time.Second, false)
			t.Logf("all %d ids final %v after the %s restarted", p.s.total, time.Since(restarted).Round(time.Millisecond), victim)
			if p.Runner.Exited() || p.Runner.Cmd.Process.Pid != pid {
				t.Fatalf("the runner did not finish the run in the same process")
			}
			if !strings.Contains(p.Runner.Stderr.String(), "reconnected") {
				t.Errorf("no reconnect logged by the runner")
			}
			p.StopRunner()
		})
	}
}

func TestConcurrentSinkStreamsOnlyWhenAskedFor(t *testing.T) {
	p := newPipeline(t, setup{total: 10_000, streams: 3, unlocked: true, mapMode: "batch"})
	p.startAll()
	fig := p.verify(120*time.Second, true)
	t.Logf("MV_UDSINK_STREAMS=3 with unlocked sinks: at most %d (sink), %d (fallback), %d (onSuccess) overlapping handler calls",
		fig.overlap[fileSink], fig.overlap[fileFallback], fig.overlap[fileOnSuccess])
	p.StopRunner()
}
