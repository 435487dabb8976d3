package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

const promText = `# HELP monovtx_processing_time Time from read to ack of a batch, in microseconds.
# TYPE monovtx_processing_time histogram
monovtx_processing_time_bucket{mvtx_name="local",mvtx_replica="0",le="100"} 10
monovtx_processing_time_bucket{mvtx_name="local",mvtx_replica="0",le="200"} 60
monovtx_processing_time_bucket{mvtx_name="local",mvtx_replica="0",le="400"} 90
monovtx_processing_time_bucket{mvtx_name="local",mvtx_replica="0",le="+Inf"} 100
monovtx_processing_time_sum{mvtx_name="local",mvtx_replica="0"} 2.5e+04
monovtx_processing_time_count{mvtx_name="local",mvtx_replica="0"} 100
monovtx_ack_total{mvtx_name="local",mvtx_replica="0"} 1.234e+06
build_info{commit="a\"b",version="v1,2"} 1
go_goroutines 12 1700000000000
`

func TestParseProm(t *testing.T) {
	m, err := parseProm(promText)
	if err != nil {
		t.Fatal(err)
	}
	// 9 samples: 6 of the histogram (4 buckets, sum, count), 3 others.
	samples := 0
	for _, f := range m {
		for _, mt := range f.GetMetric() {
			if h := mt.GetHistogram(); h != nil {
				samples += len(h.GetBucket()) + 2 // the buckets, _sum and _count
			} else {
				samples++
			}
		}
	}
	if len(m) != 4 || samples != 9 {
		t.Fatalf("got %d families, %d samples; want 4, 9", len(m), samples)
	}
	if got := counter(m, "monovtx_ack_total"); got != 1234000 {
		t.Errorf("monovtx_ack_total = %v, want 1234000", got)
	}
	if got := counter(m, "go_goroutines"); got != 12 {
		t.Errorf("a sample with a timestamp: go_goroutines = %v, want 12", got)
	}
	labels := map[string]string{}
	for _, l := range m["build_info"].GetMetric()[0].GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	if labels["commit"] != `a"b` || labels["version"] != "v1,2" {
		t.Errorf("escaped and comma label values: %v", labels)
	}
	h := histogram(m, "monovtx_processing_time")
	if len(h) != 4 || !math.IsInf(h[3].le, 1) || h[1].count != 60 || h[3].count != 100 {
		t.Fatalf("histogram = %v", h)
	}
}

func TestParsePromRejectsBrokenLines(t *testing.T) {
	for _, line := range []string{`x{a="b} 1`, `x{a=b} 1`, `x`, `x{a="b"}`, `x abc`} {
		if _, err := parseProm(line); err == nil {
			t.Errorf("%q parsed without error", line)
		}
	}
}

func TestBucketQuantile(t *testing.T) {
	b := []bucket{{100, 10}, {200, 60}, {400, 90}, {math.Inf(1), 100}}
	cases := []struct {
		q, want float64
	}{
		{0.05, 50},  // inside the first bucket, from 0
		{0.10, 100}, // exactly at a bound
		{0.50, 180}, // 40 of the 50 in (100,200]
		{0.90, 400},
		{0.99, 400}, // in +Inf: the last finite bound
	}
	for _, c := range cases {
		if got := bucketQuantile(c.q, b); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("q%.2f = %v, want %v", c.q, got, c.want)
		}
	}
	if !math.IsNaN(bucketQuantile(0.5, []bucket{{100, 0}, {math.Inf(1), 0}})) {
		t.Error("no observations should give NaN")
	}
	if !math.IsNaN(bucketQuantile(0.5, nil)) {
		t.Error("no buckets should give NaN")
	}
}

func TestBucketDeltaIsTheWindow(t *testing.T) {
	before := []bucket{{100, 10}, {200, 20}, {math.Inf(1), 20}}
	after := []bucket{{100, 10}, {200, 120}, {math.Inf(1), 120}}
	d := bucketDelta(before, after)
	if d[0].count != 0 || d[1].count != 100 || d[2].count != 100 {
		t.Fatalf("delta = %v", d)
	}
	// All 100 window observations are in (100,200]: the median is 150.
	if got := bucketQuantile(0.5, d); got != 150 {
		t.Errorf("median of the window = %v, want 150", got)
	}
}

func TestPercentile(t *testing.T) {
	v := []float64{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	cases := map[float64]float64{0: 1, 0.1: 1, 0.5: 5, 0.9: 9, 0.99: 10, 1: 10}
	for q, want := range cases {
		if got := percentile(append([]float64(nil), v...), q); got != want {
			t.Errorf("p%v = %v, want %v", q*100, got, want)
		}
	}
	if !math.IsNaN(percentile(nil, 0.5)) {
		t.Error("percentile of nothing should be NaN")
	}
}

func TestMedian(t *testing.T) {
	if got := median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("median odd = %v", got)
	}
	if got := median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("median even = %v", got)
	}
	in := []float64{3, 1}
	median(in)
	if in[0] != 3 {
		t.Error("median must not reorder its input")
	}
}

func TestParseKinds(t *testing.T) {
	help := "Runner:\n  MV_NAME  local\n\nKinds: MV_SOURCE: generator, udsource; MV_TRANSFORMER: none, udtransformer; MV_SINK: blackhole, log, udsink; MV_FALLBACK_SINK: none, blackhole\n\nSource generator:\n"
	k, line := parseKinds(help)
	if !k["MV_SOURCE"]["udsource"] || !k["MV_SINK"]["blackhole"] || k["MV_TRANSFORMER"]["cloudevents"] {
		t.Fatalf("kinds = %v", k)
	}
	if line == "" {
		t.Error("the kinds line should be returned for the header")
	}
	h := &harness{kinds: k}
	missing := h.missingKinds([]string{"MV_SOURCE=generator", "MV_TRANSFORMER=cloudevents", "MV_SOURCE=http"})
	if len(missing) != 2 || missing[0] != "MV_TRANSFORMER=cloudevents" || missing[1] != "MV_SOURCE=http" {
		t.Errorf("missing = %v", missing)
	}
	if k, _ := parseKinds("no kinds here"); k != nil {
		t.Errorf("help without Kinds: got %v", k)
	}
	// The block form the runner prints today: one indented line per variable.
	block := "Kinds:\n  MV_SOURCE: generator, http\n  MV_SINK: blackhole, log\n\nSource generator:\n  MV_GENERATOR_RPU  5\n"
	k, line = parseKinds(block)
	if !k["MV_SOURCE"]["http"] || !k["MV_SINK"]["log"] || len(k) != 2 || k["MV_GENERATOR_RPU"] != nil {
		t.Fatalf("block kinds = %v", k)
	}
	if line != "MV_SOURCE: generator, http; MV_SINK: blackhole, log" {
		t.Errorf("block kinds line = %q", line)
	}
}

func TestParseVmHWM(t *testing.T) {
	if kb, ok := parseVmHWM("VmHWM:\t  123456 kB"); !ok || kb != 123456 {
		t.Errorf("got %v %v", kb, ok)
	}
	for _, l := range []string{"VmRSS:\t 1 kB", "VmHWM: 12", "VmHWM: x kB"} {
		if _, ok := parseVmHWM(l); ok {
			t.Errorf("%q parsed", l)
		}
	}
}

func TestSumStat(t *testing.T) {
	var m map[string]json.RawMessage
	raw := `{"output_sent{label=\"\",path=\"root.output\"}":100,"output_sent_total":7,"output_sent":5,"input_latency_ns":{"p50":1}}`
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		t.Fatal(err)
	}
	if got := sumStat(m, "output_sent"); got != 105 {
		t.Errorf("sumStat = %v, want 105 (labelled and bare, not output_sent_total)", got)
	}
}

func TestLastJSONLine(t *testing.T) {
	var r peerResult
	out := "2026/01/01 log line\n{\"msgs\":1}\n{\"msgs\":42,\"bytes\":43008,\"seconds\":2}\n"
	if err := lastJSONLine(out, &r); err != nil || r.Msgs != 42 || r.Seconds != 2 {
		t.Fatalf("got %+v, %v", r, err)
	}
	if err := lastJSONLine("no json", &r); err == nil {
		t.Error("output without JSON should fail")
	}
}

func TestSelectScenarios(t *testing.T) {
	all := selectScenarios(catalogue(), nil)
	ids := map[string]bool{}
	for _, s := range all {
		if ids[s.id()] {
			t.Errorf("duplicate scenario %s", s.id())
		}
		ids[s.id()] = true
	}
	for _, want := range []string{"generator->blackhole/1KiB", "udsource->udsink/1MiB", "udsource->udtransformer->udsink/64KiB",
		"generator->cloudevents->blackhole/1MiB", "http->blackhole/1KiB", "uds-pump/1MiB"} {
		if !ids[want] {
			t.Errorf("catalogue lacks %s", want)
		}
	}
	got := selectScenarios(catalogue(), regexp.MustCompile(`^udsource->udsink/`))
	if len(got) != 3 {
		t.Errorf("filter selected %d scenarios, want 3", len(got))
	}
}

func TestTargets(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	r := &record{Scenario: "udsource->udsink", PayloadBytes: MiB, RatioToSequential: f(1.4), CPUUsPerMiB: f(390), PeakRSSMB: f(97), RSSBoundMB: rssBound(8, MiB, 4)}
	if *r.RSSBoundMB != 96 {
		t.Errorf("RSS bound = %v, want 8*1*4+64 = 96", *r.RSSBoundMB)
	}
	got := func(ts []target) string {
		var parts []string
		for _, x := range ts {
			parts = append(parts, fmt.Sprintf("%s=%v %s", x.Field, *x.Figure, x.Result))
		}
		return strings.Join(parts, "; ")
	}
	if s, want := got(targets(r)), "ratio_to_sequential_baseline=1.4 MISS; cpu_us_per_mib=390 ok; peak_rss_mb=97 MISS"; s != want {
		t.Errorf("udsource->udsink 1 MiB targets:\n got %s\nwant %s", s, want)
	}
	r = &record{Scenario: "udsource->udtransformer->udsink", PayloadBytes: KiB, RatioToSequential: f(1.5), CPUUsPerMiB: f(5000), RSSBoundMB: rssBound(500, KiB, 4)}
	if s, want := got(targets(r)), "ratio_to_sequential_baseline=1.5 ok"; s != want {
		t.Errorf("udtransformer 1 KiB targets (no CPU nor RSS target below 1 MiB):\n got %s\nwant %s", s, want)
	}
	r = &record{Scenario: "udsource->udtransformer->udsink", PayloadBytes: MiB, RatioToSequential: f(1.6), CPUUsPerMiB: f(790), PeakRSSMB: f(90), RSSBoundMB: rssBound(8, MiB, 4)}
	if s, want := got(targets(r)), "ratio_to_sequential_baseline=1.6 ok; cpu_us_per_mib=790 ok; peak_rss_mb=90 ok"; s != want {
		t.Errorf("udtransformer 1 MiB targets:\n got %s\nwant %s", s, want)
	}
	for _, c := range []struct {
		r    *record
		want string
	}{
		{&record{Scenario: "generator->blackhole", PayloadBytes: MiB, RatioToPeer: f(2.5), PeakRSSMB: f(50), RSSBoundMB: rssBound(8, MiB, 4)}, "ratio_to_peer=2.5 ok; peak_rss_mb=50 ok"},
		{&record{Scenario: "generator->blackhole", PayloadBytes: KiB, RatioToPeer: f(2.5)}, ""},
		{&record{Scenario: "http->blackhole", PayloadBytes: MiB, RatioToBaseline: f(0.85), PeakRSSMB: f(50), RSSBoundMB: rssBound(8, MiB, 4)}, "ratio_to_baseline=0.85 MISS; peak_rss_mb=50 ok"},
		{&record{Scenario: "generator->cloudevents->blackhole", PayloadBytes: KiB, RatioToBaseline: f(1.0)}, "ratio_to_baseline=1 ok"},
		{&record{Scenario: "jetstream->jetstream", PayloadBytes: MiB, PeakRSSMB: f(200), RSSBoundMB: rssBound(8, MiB, 4)}, "peak_rss_mb=200 MISS"},
	} {
		if s := got(targets(c.r)); s != c.want {
			t.Errorf("%s %s targets:\n got %s\nwant %s", c.r.Scenario, sizeName(c.r.PayloadBytes), s, c.want)
		}
	}
	// A figure that was not measured is a miss, with a null figure.
	ts := targets(&record{Scenario: "udsource->udsink", PayloadBytes: KiB})
	if len(ts) != 1 || ts[0].Figure != nil || ts[0].Met || ts[0].Result != "MISS" {
		t.Errorf("unmeasured target = %+v", ts)
	}
}

func TestSizeName(t *testing.T) {
	for n, want := range map[int]string{KiB: "1KiB", 64 * KiB: "64KiB", MiB: "1MiB", 100: "100B"} {
		if got := sizeName(n); got != want {
			t.Errorf("sizeName(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestParseProcStatCPU(t *testing.T) {
	// The command name holds a space and a parenthesis; utime 250, stime 50.
	stat := "1234 (my (prog) x) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 5 0 100 1000000 200 18446744073709551615"
	got, err := parseProcStatCPU(stat)
	if err != nil || got != 3 {
		t.Fatalf("got %v, %v; want 3 seconds", got, err)
	}
	if _, err := parseProcStatCPU("1234 (x) S 1 2"); err == nil {
		t.Error("a short line should fail")
	}
}

func TestRatiosToTheSequentialBaseline(t *testing.T) {
	res := func(rate, cpu float64) sideResult {
		r := nanResult()
		r.rate, r.cpu = rate, cpu
		return r
	}
	rec := &record{Scenario: "udsource->udsink", PayloadBytes: KiB, Baseline: concurrentGRPC, SequentialBaseline: sequentialGRPC}
	fillRecord(rec, map[string][]sideResult{
		"runner":     {res(900, 10), res(1100, 12), res(1000, 11)}, // medians 1000 msgs/s, 11 µs/msg
		"baseline":   {res(2000, 9)},
		"sequential": {res(800, 8.8)},
	})
	want := map[string]struct {
		got  *float64
		want float64
	}{
		"ratio to the concurrent baseline":     {rec.RatioToBaseline, 0.5},
		"ratio to the sequential baseline":     {rec.RatioToSequential, 1.25},
		"runner CPU µs per MiB":                {rec.CPUUsPerMiB, 11 * 1024},
		"concurrent baseline CPU µs per MiB":   {rec.BaselineCPUUsPerMiB, 9 * 1024},
		"sequential baseline CPU µs per MiB":   {rec.SequentialCPUUsPerMiB, 8.8 * 1024},
		"runner CPU over the sequential's CPU": {rec.CPURatioToSequential, 1.25},
	}
	for what, c := range want {
		if c.got == nil || math.Abs(*c.got-c.want) > 1e-9 {
			t.Errorf("%s = %v, want %v", what, c.got, c.want)
		}
	}
	// A scenario without a sequential baseline reports none of it.
	rec = &record{Scenario: "generator->blackhole", PayloadBytes: KiB}
	fillRecord(rec, map[string][]sideResult{"runner": {res(1000, 1)}})
	if rec.RatioToSequential != nil || rec.CPUUsPerMiB != nil || rec.CPURatioToSequential != nil {
		t.Errorf("sequential figures without a sequential baseline: %+v", rec)
	}
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if v, ok := m["ratio_to_sequential_baseline"]; !ok || v != nil {
		t.Errorf("ratio_to_sequential_baseline should be null when it does not apply, got %v (present %v)", v, ok)
	}
}

func TestMarkdownRowsHaveTheHeadersCells(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	recs := []*record{
		{Scenario: "udsource->udsink", PayloadBytes: MiB, MsgsPerSec: f(100), SequentialMsgsPerSec: f(90), RatioToSequential: f(1.1)},
		{Scenario: "http->blackhole", PayloadBytes: KiB, Skipped: "not in this runner yet: MV_SOURCE=http"},
	}
	var sb strings.Builder
	writeMarkdown(&sb, recs)
	lines := strings.Split(strings.TrimSpace(sb.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("got %d lines:\n%s", len(lines), sb.String())
	}
	cells := func(l string) int { return strings.Count(l, "|") - 1 }
	for i, l := range lines[1:] {
		if cells(l) != cells(lines[0]) {
			t.Errorf("line %d has %d cells, the header %d:\n%s", i+2, cells(l), cells(lines[0]), l)
		}
	}
}

func TestCPUsFlagAndSweep(t *testing.T) {
	var c cpusFlag
	if err := c.Set("1, 2"); err != nil || c.String() != "1,2" {
		t.Fatalf("--cpus 1,2 = %v, %v", c, err)
	}
	if err := c.Set("two"); err == nil {
		t.Fatal("--cpus two accepted")
	}
	if bin, args := pinArgs("/usr/bin/taskset", 1, 2, "runner", []string{"-x"}); bin != "/usr/bin/taskset" || strings.Join(args, " ") != "-c 0-0 runner -x" {
		t.Errorf("pinned to 1 of 2 CPUs: %s %v", bin, args)
	}
	for _, n := range []int{0, 2, 4} {
		if bin, args := pinArgs("/usr/bin/taskset", n, 2, "runner", nil); bin != "runner" || len(args) != 0 {
			t.Errorf("--cpus %d on 2 CPUs pinned: %s %v", n, bin, args)
		}
	}
	f := func(v float64) *float64 { return &v }
	recs := []*record{
		{Scenario: "udsource->udsink", PayloadBytes: MiB, CPUs: 1, MBPerSec: f(200), ProcessCores: map[string]float64{"runner": 0.5, "udsink": 0.3}, ProcessCPUUsPerMsg: map[string]float64{"runner": 2500, "udsink": 1500}},
		{Scenario: "generator->blackhole", PayloadBytes: KiB, CPUs: 1, MBPerSec: f(100)},
		{Scenario: "udsource->udsink", PayloadBytes: MiB, CPUs: 2, MBPerSec: f(300)},
		{Scenario: "generator->blackhole", PayloadBytes: KiB, CPUs: 2},
	}
	fillSweep(recs, []int{1, 2})
	if r := recs[2]; r.CoreScaling == nil || *r.CoreScaling != 1.5 || r.MBPerSecByCPUs["1"] != 200 || r.MBPerSecByCPUs["2"] != 300 {
		t.Errorf("udsink sweep = %v, %v", r.MBPerSecByCPUs, r.CoreScaling)
	}
	if r := recs[1]; r.CoreScaling != nil || r.MBPerSecByCPUs["1"] != 100 {
		t.Errorf("a scenario that failed at 2 CPUs: %v, %v", r.MBPerSecByCPUs, r.CoreScaling)
	}
	var b strings.Builder
	writeSweep(&b, recs, []int{1, 2}, true)
	if !strings.Contains(b.String(), "| udsource->udsink | 1MiB | 200.0 | 300.0 | 1.50 | runner 0.50 (2500), udsink 0.30 (1500) | - |") {
		t.Errorf("sweep table:\n%s", b.String())
	}
}

func TestRunnerCollectionsPerSecond(t *testing.T) {
	m, err := parseProm(`# HELP go_gc_duration_seconds A summary of the wall-time pause (stop-the-world) duration in garbage collection cycles.
# TYPE go_gc_duration_seconds summary
go_gc_duration_seconds{quantile="0"} 1.2e-05
go_gc_duration_seconds{quantile="1"} 0.0003
go_gc_duration_seconds_sum 0.0041
go_gc_duration_seconds_count 57
`)
	if err != nil {
		t.Fatal(err)
	}
	if got := summaryCount(m, "go_gc_duration_seconds"); got != 57 {
		t.Fatalf("go_gc_duration_seconds count = %v, want 57", got)
	}
	if got := summaryCount(m, "go_goroutines"); got != 0 {
		t.Fatalf("a missing summary counts %v, want 0", got)
	}
	res := func(gcs float64) sideResult {
		r := nanResult()
		r.rate, r.gcs = 100, gcs
		return r
	}
	rec := &record{Scenario: "jetstream->jetstream", PayloadBytes: MiB}
	fillRecord(rec, map[string][]sideResult{"runner": {res(20), res(60), res(30)}, "baseline": {res(5)}})
	if rec.RunnerGCsPerSec == nil || *rec.RunnerGCsPerSec != 30 {
		t.Fatalf("runner_gcs_per_sec = %v, want the runner's median 30", rec.RunnerGCsPerSec)
	}
	rec = &record{Scenario: "uds-pump", PayloadBytes: MiB}
	fillRecord(rec, map[string][]sideResult{"runner": {res(math.NaN())}})
	if rec.RunnerGCsPerSec != nil {
		t.Fatalf("runner_gcs_per_sec = %v without a measurement, want null", *rec.RunnerGCsPerSec)
	}
}

// --runner-gomaxprocs gives the runner, and only the runner, its own
// GOMAXPROCS, over the one --cpus gives every process.
func TestRunnerGOMAXPROCS(t *testing.T) {
	h := &harness{work: t.TempDir(), cpus: 2, runnerProcs: 1}
	env, _, err := h.runnerEnv(8, map[string]string{"MV_SOURCE": "generator"})
	if err != nil {
		t.Fatal(err)
	}
	if env["GOMAXPROCS"] != "1" || env["MV_SOURCE"] != "generator" {
		t.Fatalf("runner env: GOMAXPROCS=%q MV_SOURCE=%q; want 1 and generator", env["GOMAXPROCS"], env["MV_SOURCE"])
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	p, err := h.start("env", sh, []string{"-c", `echo "GOMAXPROCS=$GOMAXPROCS"`}, env, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.wait(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(p.stdout.String()); got != "GOMAXPROCS=1" {
		t.Fatalf("the runner's process saw %q; want GOMAXPROCS=1 over --cpus 2", got)
	}

	h.runnerProcs = 0
	if env, _, err = h.runnerEnv(8, nil); err != nil {
		t.Fatal(err)
	}
	if v, ok := env["GOMAXPROCS"]; ok {
		t.Fatalf("without --runner-gomaxprocs the runner env has GOMAXPROCS=%q; want --cpus' alone", v)
	}
}

// TestPeerRatioFromTheSideThatDoesItsWork: with a runner-copy side (the
// generator building a payload per message), x peer is that side's rate
// over the peer's, not the shared payload's; without one it stays the
// runner's.
func TestPeerRatioFromTheSideThatDoesItsWork(t *testing.T) {
	res := func(rate float64) sideResult {
		r := nanResult()
		r.rate, r.cpu = rate, 1
		return r
	}
	rec := &record{Scenario: "generator->blackhole", PayloadBytes: MiB}
	fillRecord(rec, map[string][]sideResult{"runner": {res(9000)}, "runner-copy": {res(300)}, "peer": {res(100)}})
	if rec.RatioToPeer == nil || *rec.RatioToPeer != 3 || rec.MsgsPerSec == nil || *rec.MsgsPerSec != 9000 || rec.SameWorkMsgsPerSec == nil || *rec.SameWorkMsgsPerSec != 300 {
		t.Fatalf("ratio to peer %v, msgs/s %v, payload per message %v; want 3, 9000, 300", rec.RatioToPeer, rec.MsgsPerSec, rec.SameWorkMsgsPerSec)
	}
	rec = &record{Scenario: "http->blackhole", PayloadBytes: MiB}
	fillRecord(rec, map[string][]sideResult{"runner": {res(200)}, "peer": {res(100)}})
	if rec.RatioToPeer == nil || *rec.RatioToPeer != 2 {
		t.Fatalf("ratio to peer %v without a runner-copy side, want 2", rec.RatioToPeer)
	}
}

func TestBrokerCorePinsTheBrokerApart(t *testing.T) {
	h := &harness{brokerCore: true, taskset: "/usr/bin/taskset"}
	n := runtime.NumCPU()
	if n < 2 {
		t.Skip("one CPU: --broker-core refuses to run")
	}
	for _, tc := range []struct {
		name  string
		cpus  string
		procs int
	}{
		{"kfake-kafka->kafka/1KiB", strconv.Itoa(n - 1), 1},
		{"nats-server-jetstream->jetstream/1KiB", strconv.Itoa(n - 1), 1},
		{"kafka-feed-kafka->kafka/1KiB", strconv.Itoa(n - 1), 1},
		{"js-feed-jetstream->jetstream/1KiB", strconv.Itoa(n - 1), 1},
		{"runner-kafka->kafka/1KiB", fmt.Sprintf("0-%d", n-2), n - 1},
		{"baseline-kafka->kafka/1KiB", fmt.Sprintf("0-%d", n-2), n - 1},
	} {
		bin, args, procs := h.pin(tc.name, "/bin/x", []string{"-a"})
		want := []string{"-c", tc.cpus, "/bin/x", "-a"}
		if bin != h.taskset || strings.Join(args, " ") != strings.Join(want, " ") || procs != tc.procs {
			t.Errorf("%s: %s %v GOMAXPROCS=%d, want %s %v GOMAXPROCS=%d", tc.name, bin, args, procs, h.taskset, want, tc.procs)
		}
	}
	// Without --broker-core, --cpus decides as before.
	h = &harness{taskset: "/usr/bin/taskset"}
	if bin, args, procs := h.pin("kfake-x", "/bin/x", nil); bin != "/bin/x" || len(args) != 0 || procs != 0 {
		t.Errorf("no pinning asked: got %s %v %d", bin, args, procs)
	}
}

// TestPodCgroupCPU finds a pod's cgroup by its UID in either driver's
// naming and reads its CPU time from cgroup v1 and v2 files.
func TestPodCgroupCPU(t *testing.T) {
	root := t.TempDir()
	const uid = "d4339187-1c33-4d42-baff-0e217f7dab8f"
	v1 := filepath.Join(root, "v1", "kubepods", "burstable", "pod"+uid)
	v2 := filepath.Join(root, "v2", "kubepods.slice", "kubepods-burstable-pod"+strings.ReplaceAll(uid, "-", "_")+".slice")
	for _, d := range []string{v1, v2, filepath.Join(root, "v1", "kubepods", "burstable", "podother")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(v1, "cpuacct.usage"), []byte("22614414530\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(v2, "cpu.stat"), []byte("usage_usec 1500000\nuser_usec 1000000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := findPodCgroup(uid, filepath.Join(root, "none"), filepath.Join(root, "v1")); got != v1 {
		t.Fatalf("cgroupfs: found %q, want %q", got, v1)
	}
	if got := findPodCgroup(uid, filepath.Join(root, "v2")); got != v2 {
		t.Fatalf("systemd: found %q, want %q", got, v2)
	}
	if got := findPodCgroup("", root); got != "" {
		t.Fatalf("no UID: found %q", got)
	}
	if d, ok := cgroupCPU(v1); !ok || d != 22614414530*time.Nanosecond {
		t.Fatalf("v1: %v %v", d, ok)
	}
	if d, ok := cgroupCPU(v2); !ok || d != 1500*time.Millisecond {
		t.Fatalf("v2: %v %v", d, ok)
	}
	if _, ok := cgroupCPU(filepath.Join(root, "v1", "kubepods", "burstable", "podother")); ok {
		t.Fatal("a cgroup with neither file read as known")
	}
}
