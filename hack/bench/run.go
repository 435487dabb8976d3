package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// sideResult is what one measured side (runner, baseline or peer) yields.
type sideResult struct {
	rate     float64 // messages (or requests) per second
	p50, p99 float64 // ms, NaN when not measured
	rss      float64 // MiB, NaN when not measured
	gcs      float64 // the runner's garbage collections per second, NaN when not measured
	// cpu is the side's own process' CPU time per message in the window,
	// in µs: steadier than the rate on a shared machine.
	cpu float64
	// procs is the CPU time per message of each process of the side, by
	// kind (the runner and the SDK servers or function it drives), in µs;
	// cores is each one's CPU time over the window's length.
	procs, cores map[string]float64
	notes        []string
}

func nanResult() sideResult {
	return sideResult{rate: math.NaN(), p50: math.NaN(), p99: math.NaN(), rss: math.NaN(), cpu: math.NaN(), gcs: math.NaN()}
}

// profilePath names a CPU profile file for one side of a scenario, or ""
// without --profile and after the first round.
func (h *harness) profilePath(sc scenario, role string) string {
	if h.profileDir == "" || !sc.profile {
		return ""
	}
	return filepath.Join(h.profileDir, sanitize(strings.ReplaceAll(sc.name, "->", "_"))+"_"+sizeName(sc.size)+"."+role+".pprof")
}

// profileSeconds is the length of a CPU profile taken during the measured
// window (pprof takes whole seconds).
func (h *harness) profileSeconds() int {
	return max(1, int(h.duration.Seconds()))
}

// peerEnv is the environment of a benchpeer process: a whole-life CPU
// profile when --profile is set.
func (h *harness) peerEnv(sc scenario, role string) map[string]string {
	if p := h.profilePath(sc, role); p != "" {
		return map[string]string{"BENCH_CPUPROFILE": p}
	}
	return nil
}

// --- the runner ---

// runnerEnv is the environment every runner gets; extra adds the scenario's.
func (h *harness) runnerEnv(batch int, extra map[string]string) (map[string]string, string, error) {
	admin, err := freePort()
	if err != nil {
		return nil, "", err
	}
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	env := map[string]string{
		"MV_NAME":             "bench",
		"MV_ADMIN_PORT":       strconv.Itoa(admin),
		"PORT":                strconv.Itoa(port),
		"MV_LOG_LEVEL":        "warn",
		"MV_PPROF":            "true",
		"MV_READ_BATCH_SIZE":  strconv.Itoa(batch),
		"MV_INFLIGHT_BATCHES": strconv.Itoa(inflight),
	}
	if h.runnerProcs > 0 {
		env["GOMAXPROCS"] = strconv.Itoa(h.runnerProcs) // after --cpus' own in start
	}
	for k, v := range extra {
		env[k] = v
	}
	return env, "http://127.0.0.1:" + strconv.Itoa(admin), nil
}

// startRunner starts the runner and waits until it is ready.
func (h *harness) startRunner(sc scenario, env map[string]string, admin string) (*proc, error) {
	p, err := h.start("runner-"+sc.id(), h.runnerBin, nil, env, false)
	if err != nil {
		return nil, err
	}
	if err := waitUntil("the runner to be ready", 2*time.Minute, p, func() bool { return httpOK(admin + "/readyz") }); err != nil {
		p.stop(5 * time.Second)
		return nil, err
	}
	return p, nil
}

// statusDoc is the part of the runner's /status the bench reads.
type statusDoc struct {
	State     string           `json:"state"`
	Totals    map[string]int64 `json:"totals"`
	LastError *struct {
		Error string `json:"error"`
	} `json:"last_error"`
}

// runnerSnapshot is the runner's counters and histograms at one moment.
type runnerSnapshot struct {
	at      time.Time
	status  statusDoc
	metrics metrics
}

func snapshot(ctx context.Context, admin string) (runnerSnapshot, error) {
	var s runnerSnapshot
	before := time.Now()
	if err := getJSON(ctx, admin+"/status", &s.status); err != nil {
		return s, fmt.Errorf("runner /status: %w", err)
	}
	s.at = before.Add(time.Since(before) / 2)
	body, err := getBody(ctx, admin+"/metrics")
	if err != nil {
		return s, fmt.Errorf("runner /metrics: %w", err)
	}
	if s.metrics, err = parseProm(string(body)); err != nil {
		return s, fmt.Errorf("runner /metrics: %w", err)
	}
	return s, nil
}

// measureRunner waits for the warm-up, then measures the runner over the
// window: acked messages per second from /status, batch processing time
// quantiles from the monovtx_processing_time histogram, peak RSS from
// /proc. during runs alongside the window (a load generator) when set.
func (h *harness) measureRunner(ctx context.Context, sc scenario, p *proc, admin string, companions []*proc) (sideResult, error) {
	r := nanResult()
	var snaps []runnerSnapshot
	w, err := h.measuredWindow(ctx, sc, "runner", admin+"/debug/pprof/profile", append([]*proc{p}, companions...), func() error {
		s, err := snapshot(ctx, admin)
		snaps = append(snaps, s)
		return err
	})
	if err != nil {
		return r, err
	}
	s0, s1 := snaps[0], snaps[1]
	acked := s1.status.Totals["acked"] - s0.status.Totals["acked"]
	r.cpu = w.cpu[0].perMsg(float64(acked))
	r.procs, r.cores = w.split(float64(acked))
	prof := w.profile
	if rss, err := peakRSSMiB(p.cmd.Process.Pid); err == nil {
		r.rss = rss
	}
	if err := prof(); err != nil {
		r.notes = append(r.notes, "runner profile: "+err.Error())
	}
	// What the heap holds at the window's end, to tell payloads from the
	// rest of the RSS: the runtime's memory statistics as they are
	// (debug=1), then a profile of what is live after a collection (gc=1).
	if path := h.profilePath(sc, "runner-heap"); path != "" {
		err := saveURL(admin+"/debug/pprof/heap?debug=1", strings.TrimSuffix(path, ".pprof")+".txt", 30*time.Second)
		if err == nil {
			err = saveURL(admin+"/debug/pprof/heap?gc=1", path, 30*time.Second)
		}
		if err != nil {
			r.notes = append(r.notes, "runner heap profile: "+err.Error())
		}
	}
	if s1.status.State != "running" {
		return r, fmt.Errorf("the runner is %q, not running, at the end of the window", s1.status.State)
	}
	r.rate = float64(acked) / s1.at.Sub(s0.at).Seconds()
	if n0, n1 := summaryCount(s0.metrics, "go_gc_duration_seconds"), summaryCount(s1.metrics, "go_gc_duration_seconds"); n1 >= n0 && n1 > 0 {
		r.gcs = (n1 - n0) / s1.at.Sub(s0.at).Seconds()
	}
	hist := bucketDelta(histogram(s0.metrics, "monovtx_processing_time"), histogram(s1.metrics, "monovtx_processing_time"))
	r.p50 = bucketQuantile(0.5, hist) / 1000
	r.p99 = bucketQuantile(0.99, hist) / 1000
	r.notes = append(r.notes, problems(s0.status, s1.status)...)
	return r, nil
}

// problems reports counters that should not move in a benchmark.
func problems(s0, s1 statusDoc) []string {
	var out []string
	for _, k := range []string{"nacked", "sink_errors", "transformer_errors", "ack_errors", "fallback_errors", "dropped", "fallback_written"} {
		if d := s1.Totals[k] - s0.Totals[k]; d > 0 {
			out = append(out, fmt.Sprintf("runner counted %d %s during the window", d, k))
		}
	}
	if s1.LastError != nil && (s0.LastError == nil || s0.LastError.Error != s1.LastError.Error) {
		out = append(out, "runner last_error: "+s1.LastError.Error)
	}
	return out
}

// startProfile fetches a CPU profile of the measured window from a pprof
// endpoint in the background; the returned func waits for it. Without
// --profile it does nothing.
func (h *harness) startProfile(sc scenario, role, url string) func() error {
	path := h.profilePath(sc, role)
	if path == "" {
		return func() error { return nil }
	}
	secs := h.profileSeconds()
	done := make(chan error, 1)
	go func() {
		done <- saveURL(url+"?seconds="+strconv.Itoa(secs), path, time.Duration(secs+30)*time.Second)
	}()
	return func() error { return <-done }
}

// runRunnerSide starts the runner with env, measures it and stops it.
// companions are the processes the runner drives (SDK servers, the
// function), whose CPU time is counted beside the runner's.
func (h *harness) runRunnerSide(ctx context.Context, sc scenario, batch int, extra map[string]string, companions ...*proc) (sideResult, error) {
	env, admin, err := h.runnerEnv(batch, merge(extra, sc.env))
	if err != nil {
		return nanResult(), err
	}
	p, err := h.startRunner(sc, env, admin)
	if err != nil {
		return nanResult(), err
	}
	defer p.stop(15 * time.Second)
	r, err := h.measureRunner(ctx, sc, p, admin, companions)
	if err != nil {
		return r, fmt.Errorf("%w\n%s", err, p.logTail(10))
	}
	return r, nil
}

// generatorEnv makes the generator produce as fast as it is read.
func generatorEnv(size int) map[string]string {
	return map[string]string{
		"MV_SOURCE":             "generator",
		"MV_GENERATOR_RPU":      "10000000", // the generator's most
		"MV_GENERATOR_DURATION": "1s",
		"MV_GENERATOR_MSG_SIZE": strconv.Itoa(size),
		// One payload for every message, as Benthos generate with a
		// constant mapping: the scenarios measure what follows the source.
		"MV_GENERATOR_FIXED_PAYLOAD": "true",
	}
}

// payloadPerMessage has the generator build each message's payload, as
// Benthos generate makes a message per call: the runner side its peer is
// held against.
var payloadPerMessage = map[string]string{"MV_GENERATOR_FIXED_PAYLOAD": "false"}

func merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// runnerRecord sets the record fields every runner scenario shares.
func runnerRecord(rec *record, sc scenario, batch int, latency string) {
	rec.BatchSize, rec.InflightBatches = batch, inflight
	rec.RSSBoundMB = rssBound(batch, sc.size, inflight)
	rec.LatencySource = latency
}

const batchLatency = "runner monovtx_processing_time (per batch, read to ack)"

// --- baselines run by benchpeer ---

// peerResult is what a benchpeer baseline prints.
type peerResult struct {
	Msgs    int64   `json:"msgs"`
	Bytes   int64   `json:"bytes"`
	Seconds float64 `json:"seconds"`
	Errors  int64   `json:"errors"`
	// CPUSeconds is the baseline's own CPU time in the window.
	CPUSeconds float64 `json:"cpu_seconds"`
}

// runPeerMeasure runs a measuring benchpeer subcommand to its end and
// returns its rate.
func (h *harness) runPeerMeasure(ctx context.Context, sc scenario, role, sub string, args []string) (sideResult, error) {
	r := nanResult()
	args = append([]string{sub}, append(args, "-warmup", h.warmup.String(), "-duration", h.duration.String())...)
	p, err := h.start(role+"-"+sc.id(), h.peerBin, args, h.peerEnv(sc, role), true)
	if err != nil {
		return r, err
	}
	stopOnCancel := context.AfterFunc(ctx, func() { p.stop(2 * time.Second) })
	defer stopOnCancel()
	if err := p.wait(h.warmup + h.duration + time.Minute); err != nil {
		return r, err
	}
	var res peerResult
	if err := lastJSONLine(p.stdout.String(), &res); err != nil {
		return r, fmt.Errorf("%s: %w\n%s", p.name, err, p.logTail(10))
	}
	if res.Seconds <= 0 || res.Msgs <= 0 {
		return r, fmt.Errorf("%s moved no messages (errors: %d)\n%s", p.name, res.Errors, p.logTail(10))
	}
	if res.Errors > 0 {
		return r, fmt.Errorf("%s had %d failed calls\n%s", p.name, res.Errors, p.logTail(10))
	}
	r.rate = float64(res.Msgs) / res.Seconds
	if res.CPUSeconds > 0 {
		r.cpu = res.CPUSeconds / float64(res.Msgs) * 1e6
	}
	return r, nil
}

// --- generator -> blackhole ---

func (h *harness) sidesGeneratorBlackhole(sc scenario, rec *record) ([]side, func(), error) {
	batch := batchFor(sc.size)
	runnerRecord(rec, sc, batch, batchLatency)
	return []side{
		{"runner", func(ctx context.Context, sc scenario) (sideResult, error) {
			return h.runRunnerSide(ctx, sc, batch, merge(generatorEnv(sc.size), map[string]string{"MV_SINK": "blackhole"}))
		}},
		{"runner-copy", func(ctx context.Context, sc scenario) (sideResult, error) {
			sc.profile = false // the runner's profile files are the shared payload's
			return h.runRunnerSide(ctx, sc, batch, merge(generatorEnv(sc.size), payloadPerMessage, map[string]string{"MV_SINK": "blackhole"}))
		}},
		{"peer", func(ctx context.Context, sc scenario) (sideResult, error) {
			return h.runBenthos(ctx, sc, benthosGenerate(sc.size, batch, nil), nil)
		}},
	}, func() {}, nil
}

// --- Numaflow SDK servers on Unix sockets ---

// startSDK starts the SDK servers a scenario uses in a fresh directory and
// waits for their server-info files and sockets.
func (h *harness) startSDK(sc scenario, transform bool, role string) (string, []*proc, error) {
	// Unix socket paths must stay under 108 bytes: a short directory in /tmp.
	dir, err := os.MkdirTemp("", "mvb")
	if err != nil {
		return "", nil, err
	}
	servers := []struct{ sub, sock, info string }{
		{"udsource", "source.sock", "sourcer-server-info"},
		{"udsink", "sink.sock", "sinker-server-info"},
	}
	if transform {
		servers = append(servers, struct{ sub, sock, info string }{"udtransformer", "sourcetransform.sock", "sourcetransformer-server-info"})
	}
	var procs []*proc
	fail := func(err error) (string, []*proc, error) {
		stopAll(procs)
		os.RemoveAll(dir)
		return "", nil, err
	}
	for _, s := range servers {
		args := []string{s.sub, "-dir", dir}
		if s.sub == "udsource" {
			args = append(args, "-size", strconv.Itoa(sc.size))
		}
		p, err := h.start(s.sub+"-"+role+"-"+sc.id(), h.peerBin, args, h.peerEnv(sc, role+"-"+s.sub), false)
		if err != nil {
			return fail(err)
		}
		procs = append(procs, p)
		sock, info := filepath.Join(dir, s.sock), filepath.Join(dir, s.info)
		if err := waitUntil(s.sub+" server-info and socket", 30*time.Second, p, func() bool {
			return exists(sock) && exists(info)
		}); err != nil {
			return fail(err)
		}
	}
	return dir, procs, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func stopAll(ps []*proc) {
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Add(1)
		go func() { defer wg.Done(); p.stop(5 * time.Second) }()
	}
	wg.Wait()
}

// sidesUDS runs the runner (with its defaults: MV_UDSINK_STREAMS unset),
// the concurrent bare gRPC client and the sequential one, each against
// fresh SDK servers (the SDK servers stop themselves when a client breaks a
// stream).
func (h *harness) sidesUDS(sc scenario, rec *record) ([]side, func(), error) {
	transform := strings.Contains(sc.name, "udtransformer")
	batch := batchFor(sc.size)
	runnerRecord(rec, sc, batch, batchLatency)
	// onFreshSDK is a side that runs against its own SDK servers.
	onFreshSDK := func(role string, run func(ctx context.Context, sc scenario, dir string, servers []*proc) (sideResult, error)) side {
		return side{role, func(ctx context.Context, sc scenario) (sideResult, error) {
			dir, servers, err := h.startSDK(sc, transform, role)
			if err != nil {
				return nanResult(), err
			}
			defer os.RemoveAll(dir)
			defer stopAll(servers)
			return run(ctx, sc, dir, servers)
		}}
	}
	// bareClient is a side of a benchpeer gRPC client.
	bareClient := func(role, sub string, extra ...string) side {
		return onFreshSDK(role, func(ctx context.Context, sc scenario, dir string, _ []*proc) (sideResult, error) {
			args := append([]string{"-dir", dir, "-batch", strconv.Itoa(batch)}, extra...)
			if transform {
				args = append(args, "-transform")
			}
			return h.runPeerMeasure(ctx, sc, role, sub, args)
		})
	}
	return []side{
		onFreshSDK("runner", func(ctx context.Context, sc scenario, dir string, servers []*proc) (sideResult, error) {
			env := map[string]string{"MV_SOURCE": "udsource", "MV_SINK": "udsink", "MV_UDS_DIR": dir}
			if transform {
				env["MV_TRANSFORMER"] = "udtransformer"
			}
			return h.runRunnerSide(ctx, sc, batch, env, servers...)
		}),
		bareClient("baseline", "grpc-baseline", "-inflight", strconv.Itoa(inflight)),
		bareClient("sequential", "grpc-sequential"),
	}, func() {}, nil
}

// --- CloudEvents transformer ---

// sidesCloudEvents runs the runner, the bare client and Benthos against one
// function process.
func (h *harness) sidesCloudEvents(sc scenario, rec *record) ([]side, func(), error) {
	batch := batchFor(sc.size)
	conc := h.concurrency
	runnerRecord(rec, sc, batch, batchLatency)
	rec.Concurrency = conc
	fn, addr, err := h.startListening("function-"+sc.id(), h.peerBin, addrArgs("function"), nil)
	if err != nil {
		return nil, nil, err
	}
	url := "http://" + addr + "/"
	cleanup := func() { fn.stop(5 * time.Second) }
	ceEnv := map[string]string{
		"MV_TRANSFORMER":             "cloudevents",
		"MV_TRANSFORMER_URL":         url,
		"MV_TRANSFORMER_CONCURRENCY": strconv.Itoa(conc),
		"MV_SINK":                    "blackhole",
	}
	return []side{
		{"runner", func(ctx context.Context, sc scenario) (sideResult, error) {
			return h.runRunnerSide(ctx, sc, batch, merge(generatorEnv(sc.size), ceEnv), fn)
		}},
		{"runner-copy", func(ctx context.Context, sc scenario) (sideResult, error) {
			sc.profile = false // the runner's profile files are the shared payload's
			return h.runRunnerSide(ctx, sc, batch, merge(generatorEnv(sc.size), payloadPerMessage, ceEnv), fn)
		}},
		{"baseline", func(ctx context.Context, sc scenario) (sideResult, error) {
			return h.runPeerMeasure(ctx, sc, "baseline", "ce-baseline",
				[]string{"-url", url, "-size", strconv.Itoa(sc.size), "-concurrency", strconv.Itoa(conc)})
		}},
		{"peer", func(ctx context.Context, sc scenario) (sideResult, error) {
			return h.runBenthos(ctx, sc, benthosGenerate(sc.size, 1, &benthosHTTP{url: url, threads: conc}), nil)
		}},
	}, cleanup, nil
}

// --- HTTP source ---

func (h *harness) sidesHTTPSource(sc scenario, rec *record) ([]side, func(), error) {
	conc := h.concurrency
	batch := batchFor(sc.size)
	runnerRecord(rec, sc, batch, "client (per request, POST to answer)")
	rec.Concurrency = conc
	return []side{
		{"runner", func(ctx context.Context, sc scenario) (sideResult, error) {
			return h.runHTTPRunner(ctx, sc, batch, conc)
		}},
		{"baseline", func(ctx context.Context, sc scenario) (sideResult, error) {
			r := nanResult()
			p, addr, err := h.startListening("http-server-"+sc.id(), h.peerBin, addrArgs("http-server"), h.peerEnv(sc, "baseline"))
			if err != nil {
				return r, err
			}
			defer p.stop(5 * time.Second)
			var cpu *cpuMeter
			lr, err := h.load(ctx, "http://"+addr+"/", sc.size, conc, func() { cpu = startCPU(p.cmd.Process.Pid) }, nil)
			r.rate, r.p50, r.p99 = lr.rate, lr.p50, lr.p99
			if err == nil {
				r.cpu = cpu.perMsg(float64(lr.answered))
			}
			return r, err
		}},
		{"peer", func(ctx context.Context, sc scenario) (sideResult, error) {
			// Benthos http_server -> drop answers after the output acked.
			var lr loadResult
			r, err := h.runBenthos(ctx, sc, benthosHTTPServer(), func(base string, pid int) (float64, float64, error) {
				var err error
				var cpu *cpuMeter
				lr, err = h.load(ctx, base+"/post", sc.size, conc, func() { cpu = startCPU(pid) }, nil)
				if err != nil {
					return lr.rate, math.NaN(), err
				}
				return lr.rate, cpu.perMsg(float64(lr.answered)), nil
			})
			r.p50, r.p99 = lr.p50, lr.p99
			return r, err
		}},
	}, func() {}, nil
}

// runHTTPRunner drives the runner's HTTP source with the load client: the
// client measures rate and latency; the runner's /status confirms that
// every answered request was acked.
func (h *harness) runHTTPRunner(ctx context.Context, sc scenario, batch, conc int) (sideResult, error) {
	r := nanResult()
	env, admin, err := h.runnerEnv(batch, map[string]string{"MV_SOURCE": "http", "MV_SINK": "blackhole"})
	if err != nil {
		return r, err
	}
	p, err := h.startRunner(sc, env, admin)
	if err != nil {
		return r, err
	}
	defer p.stop(15 * time.Second)
	url := "http://127.0.0.1:" + env["PORT"] + "/"
	var s0, s1 runnerSnapshot
	var snapErr error
	var cpu *cpuMeter
	prof := func() error { return nil }
	lr, err := h.load(ctx, url, sc.size, conc, func() {
		s0, snapErr = snapshot(ctx, admin)
		cpu = startCPU(p.cmd.Process.Pid)
		prof = h.startProfile(sc, "runner", admin+"/debug/pprof/profile")
	}, func() {
		if snapErr == nil {
			s1, snapErr = snapshot(ctx, admin)
		}
	})
	if e := prof(); e != nil {
		r.notes = append(r.notes, "runner profile: "+e.Error())
	}
	if err == nil {
		err = snapErr
	}
	if err != nil {
		return r, fmt.Errorf("%w\n%s", err, p.logTail(10))
	}
	r.rate, r.p50, r.p99 = lr.rate, lr.p50, lr.p99
	r.cpu = cpu.perMsg(float64(lr.answered))
	if rss, e := peakRSSMiB(p.cmd.Process.Pid); e == nil {
		r.rss = rss
	}
	acked := float64(s1.status.Totals["acked"]-s0.status.Totals["acked"]) / s1.at.Sub(s0.at).Seconds()
	if math.Abs(acked-lr.rate) > 0.1*lr.rate {
		r.notes = append(r.notes, fmt.Sprintf("runner acked %.0f msgs/s while the client counted %.0f answers/s", acked, lr.rate))
	}
	r.notes = append(r.notes, problems(s0.status, s1.status)...)
	return r, nil
}

// --- Unix-socket pump ---

func (h *harness) sidesPump(sc scenario, rec *record) ([]side, func(), error) {
	rec.Notes = append(rec.Notes, "msgs/s counts chunks of the payload size written through one Unix socket")
	return []side{
		{"pump", func(ctx context.Context, sc scenario) (sideResult, error) {
			return h.runPeerMeasure(ctx, sc, "pump", "pump", []string{"-size", strconv.Itoa(sc.size)})
		}},
	}, func() {}, nil
}
