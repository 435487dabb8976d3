package contract_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/monovertex/monovertex/internal/testutil"
	"github.com/monovertex/monovertex/runner"
)

// setup says how one pipeline runs.
type setup struct {
	total int
	// sinkCondition sets MV_BYPASS_SINK (outputs matching no condition are
	// then dropped at the sink); the fallback and onSuccess conditions are
	// always set.
	sinkCondition bool
	streaming     bool
	concurrency   int
	// streams is MV_UDSINK_STREAMS; 0 leaves the default (1).
	streams int
	// unlocked runs the sinks without EXAMPLE_LOCK.
	unlocked bool
	// mapMode is example-udmap's EXAMPLE_MAP_MODE: unary (default), batch
	// or stream.
	mapMode string
}

// pipeline is one set of processes sharing a socket directory: the
// source, the transformer, the map, three sinks and the runner.
type pipeline struct {
	*testutil.Examples
	s     setup
	model *model

	runnerEnv                   map[string]string
	source, transformer, mapper *testutil.Process
	sinks                       map[string]*testutil.Process // by output file
}

func newPipeline(t *testing.T, s setup) *pipeline {
	p := &pipeline{Examples: testutil.NewExamples(t, "mvct"), s: s, model: newModel(s.total, s.sinkCondition), sinks: map[string]*testutil.Process{}}
	p.runnerEnv = p.RunnerEnv(map[string]string{
		"MV_NAME":              "contract",
		"MV_TRANSFORMER":       "udtransformer",
		"MV_UDF":               "udmap",
		"MV_FALLBACK_SINK":     "udsink",
		"MV_ON_SUCCESS_SINK":   "udsink",
		"MV_BYPASS_FALLBACK":   bypassFallback,
		"MV_BYPASS_ON_SUCCESS": bypassOnSuccess,
		"MV_READ_BATCH_SIZE":   "500",
	})
	if s.sinkCondition {
		p.runnerEnv["MV_BYPASS_SINK"] = bypassSink
	}
	if s.streaming {
		p.runnerEnv["MV_STREAMING"] = "true"
		p.runnerEnv["MV_CONCURRENCY"] = strconv.Itoa(s.concurrency)
	}
	if s.streams > 0 {
		p.runnerEnv["MV_UDSINK_STREAMS"] = strconv.Itoa(s.streams)
	}
	return p
}

func (p *pipeline) startSource() {
	p.source = p.StartSource(p.s.total, map[string]string{
		"EXAMPLE_NACK_LOG": p.File("nacks"), "EXAMPLE_STRICT_READS": "true",
	})
}

func (p *pipeline) startTransformer() {
	p.transformer = p.Start("example-udtransformer", "./cmd/example-udtransformer", map[string]string{
		"EXAMPLE_DROP_EVERY": strconv.Itoa(tDropEvery), "EXAMPLE_FANOUT_EVERY": strconv.Itoa(tFanoutEvery),
		"EXAMPLE_FANOUT": strconv.Itoa(tFanout), "EXAMPLE_NACK_EVERY": strconv.Itoa(tNackEvery),
	})
}

func (p *pipeline) startMap() {
	p.mapper = p.Start("example-udmap", "./cmd/example-udmap", map[string]string{
		"EXAMPLE_DROP_EVERY": strconv.Itoa(mDropEvery), "EXAMPLE_FANOUT_EVERY": strconv.Itoa(mFanoutEvery),
		"EXAMPLE_TAG_RULES": mTagRules, "EXAMPLE_MAP_MODE": p.s.mapMode,
	})
}

// startSink starts the example-udsink of one output file: the primary
// sink (fileSink), the fallback sink or the onSuccess sink.
func (p *pipeline) startSink(file string) {
	env := map[string]string{
		"EXAMPLE_OVERLAP_FILE": p.File(file + ".overlap"),
		"EXAMPLE_FAIL_EVERY":   strconv.Itoa(sFailEvery),
	}
	if !p.s.unlocked {
		env["EXAMPLE_LOCK"] = "true"
	}
	name := "example-udsink"
	switch file {
	case fileSink:
		env["EXAMPLE_FALLBACK_EVERY"] = strconv.Itoa(sFallbackEvery)
		env["EXAMPLE_NACK_EVERY"] = strconv.Itoa(sNackEvery)
		env["EXAMPLE_NACK_DELAY_MS"] = strconv.Itoa(sNackDelayMS)
		env["EXAMPLE_ONSUCCESS_EVERY"] = strconv.Itoa(sOnSuccessEvery)
	case fileFallback:
		env["EXAMPLE_SINK_MODE"] = "fallback"
		name += "-fallback"
	case fileOnSuccess:
		env["EXAMPLE_SINK_MODE"] = "onsuccess"
		name += "-onsuccess"
	}
	p.sinks[file] = p.StartSink(name, file, env)
}

// buildAll builds every program before any starts, so a slow -race build
// does not count against a container's startup timeout.
func buildAll(t *testing.T) {
	for _, pkg := range []string{"./cmd/runner", "./cmd/example-udsource", "./cmd/example-udtransformer", "./cmd/example-udmap", "./cmd/example-udsink"} {
		testutil.Build(t, pkg)
	}
}

func (p *pipeline) startAll() {
	buildAll(p.T)
	p.startSource()
	p.startTransformer()
	p.startMap()
	for _, f := range outFiles {
		p.startSink(f)
	}
	p.StartRunner(p.runnerEnv)
}

// alive fails the test if the runner or the source has exited: the source
// exits 3 when its reads or acks overlap.
func (p *pipeline) alive() {
	p.T.Helper()
	p.RunnerAlive()
	if p.source.Exited() {
		p.T.Fatalf("example-udsource exited with %d:\n%s", p.source.ExitCode(), testutil.Tail(p.source.Stderr.String(), 6000))
	}
}

// waitForAcked waits until the source's state file holds at least n ids,
// checking now and then that nothing was acked before it was final.
func (p *pipeline) waitForAcked(n int, timeout time.Duration) {
	p.T.Helper()
	last := time.Now()
	testutil.WaitFor(p.T, timeout, fmt.Sprintf("%d ids acked", n), func() bool {
		p.alive()
		if time.Since(last) > 2*time.Second {
			last = time.Now()
			p.checkNothingAckedEarly()
		}
		return len(p.ReadAcked("acked")) >= n
	})
}

// checkNothingAckedEarly checks, at this moment, that every acked id has
// all its outputs in the files the model puts them in. The acks are read
// first: anything acked by then was written before.
func (p *pipeline) checkNothingAckedEarly() int {
	p.T.Helper()
	acked := p.ReadAcked("acked")
	have := map[[2]string]bool{}
	for _, f := range outFiles {
		for _, l := range p.ReadSinkLines(f) {
			have[[2]string{f, l.ID}] = true
		}
	}
	for n := range acked {
		for _, o := range p.model.outputsOf[n] {
			if !have[o] {
				p.T.Fatalf("id %d was acked but its output %s is not in %s", n, o[1], o[0])
			}
		}
	}
	return len(acked)
}

// nackEvent is one line of the source's nack log.
type nackEvent struct {
	id        int
	ms        int64
	delay     int64 // -1 for a redelivery
	redeliver bool
}

func (p *pipeline) readNackLog() []nackEvent {
	p.T.Helper()
	b, err := os.ReadFile(p.File("nacks"))
	if err != nil && !os.IsNotExist(err) {
		p.T.Fatal(err)
	}
	var evs []nackEvent
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Split(l, "\t")
		if len(f) < 3 {
			continue
		}
		id, err1 := strconv.Atoi(f[0])
		ms, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil {
			p.T.Fatalf("nack log line %q", l)
		}
		ev := nackEvent{id: id, ms: ms, delay: -1, redeliver: f[2] == "redeliver"}
		if !ev.redeliver {
			if ev.delay, err = strconv.ParseInt(f[2], 10, 64); err != nil {
				p.T.Fatalf("nack log line %q", l)
			}
		}
		evs = append(evs, ev)
	}
	return evs
}

// overlap reads the highest number of overlapping handler calls a sink
// recorded; 0 if it recorded none.
func (p *pipeline) overlap(file string) int {
	p.T.Helper()
	b, err := os.ReadFile(p.File(file + ".overlap"))
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		p.T.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		p.T.Fatalf("overlap file of %s: %q", file, b)
	}
	return n
}

// status fetches the runner's /status, failing the test on an error.
func (p *pipeline) status() runner.Status {
	p.T.Helper()
	st, err := p.Runner.Status()
	if err != nil {
		p.T.Fatalf("runner /status: %v", err)
	}
	return st
}
