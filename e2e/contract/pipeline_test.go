package contract_test

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
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
	t     *testing.T
	s     setup
	dir   string // sockets and server-info files
	work  string // state, output, nack and overlap files
	model *model

	runnerEnv                   map[string]string
	source, transformer, mapper *testutil.Process
	sinks                       map[string]*testutil.Process // by output file
	runner                      *testutil.Process
	all                         []*testutil.Process
}

func newPipeline(t *testing.T, s setup) *pipeline {
	// A short socket directory: Unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "mvct")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	p := &pipeline{t: t, s: s, dir: dir, work: t.TempDir(), model: newModel(s.total, s.sinkCondition), sinks: map[string]*testutil.Process{}}
	t.Cleanup(p.checkNoRaces)
	p.runnerEnv = map[string]string{
		"MV_NAME":                  "contract",
		"MV_SOURCE":                "udsource",
		"MV_TRANSFORMER":           "udtransformer",
		"MV_UDF":                   "udmap",
		"MV_SINK":                  "udsink",
		"MV_FALLBACK_SINK":         "udsink",
		"MV_ON_SUCCESS_SINK":       "udsink",
		"MV_BYPASS_FALLBACK":       bypassFallback,
		"MV_BYPASS_ON_SUCCESS":     bypassOnSuccess,
		"MV_UDS_DIR":               dir,
		"MV_READ_BATCH_SIZE":       "500",
		"MV_READ_TIMEOUT":          "100ms",
		"MV_PENDING_INTERVAL":      "200ms",
		"MV_UDF_RECONNECT_TIMEOUT": "30s",
		"MV_UDF_STARTUP_TIMEOUT":   "60s",
		"MV_SHUTDOWN_TIMEOUT":      "10s",
	}
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

func (p *pipeline) file(name string) string { return filepath.Join(p.work, name) }

func (p *pipeline) track(proc *testutil.Process) *testutil.Process {
	p.all = append(p.all, proc)
	return proc
}

// checkNoRaces fails the test if any process (built with -race when the
// tests run with it) reported a data race.
func (p *pipeline) checkNoRaces() {
	for _, proc := range p.all {
		if strings.Contains(proc.Stderr.String(), "WARNING: DATA RACE") {
			p.t.Errorf("%s reported a data race:\n%s", proc.Name, tailOf(proc.Stderr.String()))
		}
	}
}

func tailOf(s string) string {
	if len(s) > 6000 {
		return "..." + s[len(s)-6000:]
	}
	return s
}

func (p *pipeline) startSource() {
	p.source = p.track(testutil.Start(p.t, "example-udsource", testutil.Build(p.t, "./cmd/example-udsource"), map[string]string{
		"MV_UDS_DIR": p.dir, "EXAMPLE_TOTAL": strconv.Itoa(p.s.total),
		"EXAMPLE_STATE_FILE": p.file("acked"), "EXAMPLE_NACK_LOG": p.file("nacks"),
		"EXAMPLE_STRICT_READS": "true",
	}))
}

func (p *pipeline) startTransformer() {
	p.transformer = p.track(testutil.Start(p.t, "example-udtransformer", testutil.Build(p.t, "./cmd/example-udtransformer"), map[string]string{
		"MV_UDS_DIR":         p.dir,
		"EXAMPLE_DROP_EVERY": strconv.Itoa(tDropEvery), "EXAMPLE_FANOUT_EVERY": strconv.Itoa(tFanoutEvery),
		"EXAMPLE_FANOUT": strconv.Itoa(tFanout), "EXAMPLE_NACK_EVERY": strconv.Itoa(tNackEvery),
	}))
}

func (p *pipeline) startMap() {
	p.mapper = p.track(testutil.Start(p.t, "example-udmap", testutil.Build(p.t, "./cmd/example-udmap"), map[string]string{
		"MV_UDS_DIR":         p.dir,
		"EXAMPLE_DROP_EVERY": strconv.Itoa(mDropEvery), "EXAMPLE_FANOUT_EVERY": strconv.Itoa(mFanoutEvery),
		"EXAMPLE_TAG_RULES": mTagRules, "EXAMPLE_MAP_MODE": p.s.mapMode,
	}))
}

// startSink starts the example-udsink of one output file: the primary
// sink (fileSink), the fallback sink or the onSuccess sink.
func (p *pipeline) startSink(file string) {
	env := map[string]string{
		"MV_UDS_DIR":           p.dir,
		"EXAMPLE_OUT_FILE":     p.file(file),
		"EXAMPLE_OVERLAP_FILE": p.file(file + ".overlap"),
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
	p.sinks[file] = p.track(testutil.Start(p.t, name, testutil.Build(p.t, "./cmd/example-udsink"), env))
}

// buildAll builds every program before any starts, so a slow -race build
// does not count against a container's startup timeout.
func buildAll(t *testing.T) {
	for _, pkg := range []string{"./cmd/runner", "./cmd/example-udsource", "./cmd/example-udtransformer", "./cmd/example-udmap", "./cmd/example-udsink"} {
		testutil.Build(t, pkg)
	}
}

func (p *pipeline) startAll() {
	buildAll(p.t)
	p.startSource()
	p.startTransformer()
	p.startMap()
	for _, f := range outFiles {
		p.startSink(f)
	}
	p.runner = p.track(testutil.StartRunner(p.t, p.runnerEnv))
	p.runner.WaitReady(90 * time.Second)
}

// alive fails the test if the runner or the source has exited: the source
// exits 3 when its reads or acks overlap.
func (p *pipeline) alive() {
	p.t.Helper()
	if p.runner.Exited() {
		p.t.Fatalf("runner exited with %d:\n%s", p.runner.ExitCode(), tailOf(p.runner.Stderr.String()))
	}
	if p.source.Exited() {
		p.t.Fatalf("example-udsource exited with %d:\n%s", p.source.ExitCode(), tailOf(p.source.Stderr.String()))
	}
}

// readAcked returns the ids in the example source's state file.
func (p *pipeline) readAcked() map[int]bool {
	p.t.Helper()
	b, err := os.ReadFile(p.file("acked"))
	if err != nil && !os.IsNotExist(err) {
		p.t.Fatal(err)
	}
	acked := map[int]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		if n, err := strconv.Atoi(l); err == nil {
			acked[n] = true
		}
	}
	return acked
}

// waitForAcked waits until the source's state file holds at least n ids,
// checking now and then that nothing was acked before it was final.
func (p *pipeline) waitForAcked(n int, timeout time.Duration) {
	p.t.Helper()
	last := time.Now()
	testutil.WaitFor(p.t, timeout, fmt.Sprintf("%d ids acked", n), func() bool {
		p.alive()
		if time.Since(last) > 2*time.Second {
			last = time.Now()
			p.checkNothingAckedEarly()
		}
		return len(p.readAcked()) >= n
	})
}

// line is one line of an example-udsink output file.
type line struct {
	id      string
	n       int
	size    int
	keys    string
	eventMS int64
	ok      bool
}

// readOutput parses an output file; a line cut short by a kill is skipped.
func (p *pipeline) readOutput(file string) []line {
	p.t.Helper()
	b, err := os.ReadFile(p.file(file))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		p.t.Fatal(err)
	}
	var out []line
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) != 6 {
			continue
		}
		n, err1 := strconv.Atoi(f[1])
		size, err2 := strconv.Atoi(f[2])
		et, err3 := strconv.ParseInt(f[4], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		out = append(out, line{id: f[0], n: n, size: size, keys: f[3], eventMS: et, ok: f[5] == "ok"})
	}
	return out
}

// checkNothingAckedEarly checks, at this moment, that every acked id has
// all its outputs in the files the model puts them in. The acks are read
// first: anything acked by then was written before.
func (p *pipeline) checkNothingAckedEarly() int {
	p.t.Helper()
	acked := p.readAcked()
	have := map[[2]string]bool{}
	for _, f := range outFiles {
		for _, l := range p.readOutput(f) {
			have[[2]string{f, l.id}] = true
		}
	}
	for n := range acked {
		for _, o := range p.model.outputsOf[n] {
			if !have[o] {
				p.t.Fatalf("id %d was acked but its output %s is not in %s", n, o[1], o[0])
			}
		}
	}
	return len(acked)
}

// stopRunner sends SIGTERM and expects a clean exit.
func (p *pipeline) stopRunner() {
	p.t.Helper()
	p.runner.Signal(syscall.SIGTERM)
	if code := p.runner.Wait(30 * time.Second); code != 0 {
		p.t.Fatalf("runner exit code %d after SIGTERM:\n%s", code, tailOf(p.runner.Stderr.String()))
	}
}

func readyz(p *testutil.Process) int {
	c := http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(p.AdminURL + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// nackEvent is one line of the source's nack log.
type nackEvent struct {
	id        int
	ms        int64
	delay     int64 // -1 for a redelivery
	redeliver bool
}

func (p *pipeline) readNackLog() []nackEvent {
	p.t.Helper()
	b, err := os.ReadFile(p.file("nacks"))
	if err != nil && !os.IsNotExist(err) {
		p.t.Fatal(err)
	}
	var evs []nackEvent
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Split(l, "\t")
		if len(f) != 3 {
			continue
		}
		id, err1 := strconv.Atoi(f[0])
		ms, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil {
			p.t.Fatalf("nack log line %q", l)
		}
		ev := nackEvent{id: id, ms: ms, delay: -1, redeliver: f[2] == "redeliver"}
		if !ev.redeliver {
			if ev.delay, err = strconv.ParseInt(f[2], 10, 64); err != nil {
				p.t.Fatalf("nack log line %q", l)
			}
		}
		evs = append(evs, ev)
	}
	return evs
}

// overlap reads the highest number of overlapping handler calls a sink
// recorded; 0 if it recorded none.
func (p *pipeline) overlap(file string) int {
	p.t.Helper()
	b, err := os.ReadFile(p.file(file + ".overlap"))
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		p.t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		p.t.Fatalf("overlap file of %s: %q", file, b)
	}
	return n
}

// status fetches the runner's /status, failing the test on an error.
func (p *pipeline) status() runner.Status {
	p.t.Helper()
	st, err := p.runner.Status()
	if err != nil {
		p.t.Fatalf("runner /status: %v", err)
	}
	return st
}
