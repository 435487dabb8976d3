// Command soak checks that the runner holds steady over time: it measures
// the runner's capacity on this machine, then runs it at half of that for
// a long while and compares the start of the run with its end: resident
// memory (VmRSS), goroutines (go_goroutines from /metrics), open files
// (entries of /proc/<pid>/fd) and the processing rate. Each must stay
// within -tolerance (10%) of its start. At the end it stops the runner with
// SIGTERM and counts that every message generated was written exactly once.
// (Changes of at most 2 MiB, 8 goroutines or 2 files count as flat too:
// batches in flight make that much noise on small counts.)
//
//	go run ./hack/soak -duration 10m                 # the documented soak
//	go run ./hack/soak -duration 2m -json soak.json  # a shorter check
//
// The default pipeline is the generator source, the CloudEvents
// transformer calling an echo function, and the CloudEvents sink, with the
// function and the receiver served by this program on 127.0.0.1, so HTTP
// connections, goroutines and buffers are all exercised; -pipeline engine
// runs generator -> blackhole to watch the engine alone. The start and end
// figures are averages over -window (1m) after -warmup (30s) and over the
// last -window. The program exits 1 when a figure moved more than the
// tolerance or a message was lost. Linux only (/proc).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/monovertex/monovertex/internal/procstat"
)

type options struct {
	duration, probe, warmup, window, every time.Duration
	pipeline, runner, jsonOut              string
	payload                                int
	tolerance                              float64
}

func main() {
	var o options
	flag.DurationVar(&o.duration, "duration", 10*time.Minute, "how long the soak at half capacity runs")
	flag.DurationVar(&o.probe, "probe", 30*time.Second, "how long the capacity is measured (after 5s of warm-up)")
	flag.DurationVar(&o.warmup, "warmup", 30*time.Second, "start of the soak left out of the comparison")
	flag.DurationVar(&o.window, "window", time.Minute, "span averaged for the start and for the end figures")
	flag.DurationVar(&o.every, "every", 5*time.Second, "sampling interval")
	flag.StringVar(&o.pipeline, "pipeline", "cloudevents", "cloudevents (generator -> CloudEvents function -> CloudEvents sink) or engine (generator -> blackhole)")
	flag.StringVar(&o.runner, "runner", "", "runner binary to use (default: build ./cmd/runner)")
	flag.StringVar(&o.jsonOut, "json", "", "also write the report as JSON to this file")
	flag.IntVar(&o.payload, "payload", 256, "message size in bytes")
	flag.Float64Var(&o.tolerance, "tolerance", 0.10, "largest relative change from start to end that counts as flat")
	flag.Parse()
	if o.duration < o.warmup+2*o.window {
		fmt.Fprintf(os.Stderr, "soak: -duration %v must be at least -warmup + 2 x -window (%v)\n", o.duration, o.warmup+2*o.window)
		os.Exit(2)
	}
	if o.pipeline != "cloudevents" && o.pipeline != "engine" {
		fmt.Fprintf(os.Stderr, "soak: -pipeline must be cloudevents or engine, not %q\n", o.pipeline)
		os.Exit(2)
	}
	ok, err := run(o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "soak: %v\n", err)
		os.Exit(1)
	}
	if !ok {
		os.Exit(1)
	}
}

func run(o options) (bool, error) {
	bin := o.runner
	if bin == "" {
		dir, err := os.MkdirTemp("", "soak-")
		if err != nil {
			return false, err
		}
		defer os.RemoveAll(dir)
		if bin, err = buildRunner(dir); err != nil {
			return false, err
		}
	}
	var peers *peers
	if o.pipeline == "cloudevents" {
		var err error
		if peers, err = startPeers(); err != nil {
			return false, err
		}
		defer peers.close()
	}

	capacity, err := measureCapacity(bin, o, peers)
	if err != nil {
		return false, err
	}
	target := capacity / 2
	fmt.Printf("capacity %.0f msg/s; soaking at %.0f msg/s for %v\n", capacity, target, o.duration)
	if peers != nil {
		peers.reset()
	}
	samples, stopped, err := soakAt(bin, o, peers, target)
	if err != nil {
		return false, err
	}
	rep := judge(o, samples, stopped, peers)
	rep.Capacity, rep.Target = capacity, target
	if stopped.Read == 0 {
		return false, errors.New("no \"runner stopped\" line with the totals in the runner's log")
	}
	printReport(rep)
	if o.jsonOut != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(o.jsonOut, b, 0o644); err != nil {
			return false, err
		}
	}
	return rep.OK, nil
}

// buildRunner builds ./cmd/runner into dir and returns the binary's path.
func buildRunner(dir string) (string, error) {
	bin := filepath.Join(dir, "runner")
	fmt.Printf("building ./cmd/runner ...\n")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/runner")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build the runner (run from the repository root): %w", err)
	}
	return bin, nil
}

// measureCapacity runs the pipeline as fast as it goes for o.probe, after
// 5s of warming up, and returns the messages acked per second.
func measureCapacity(bin string, o options, peers *peers) (float64, error) {
	fmt.Printf("measuring capacity for %v ...\n", o.probe)
	probe, err := startRunner(bin, o, peers, 10_000_000, time.Second)
	if err != nil {
		return 0, err
	}
	time.Sleep(5 * time.Second)
	_, a0, _ := probe.totals()
	t0 := time.Now()
	time.Sleep(o.probe)
	_, a1, _ := probe.totals()
	capacity := float64(a1-a0) / time.Since(t0).Seconds()
	if _, err := probe.stop(); err != nil {
		return 0, fmt.Errorf("capacity run: %w", err)
	}
	if capacity <= 0 {
		return 0, errors.New("the runner acked nothing during the capacity probe")
	}
	return capacity, nil
}

// soakAt runs the pipeline at target messages a second for o.duration,
// sampling the runner every o.every, and returns the samples and the
// totals the runner logged as it stopped.
func soakAt(bin string, o options, peers *peers, target float64) ([]sample, stopLine, error) {
	// Half capacity, spread over 100ms periods so the load is smooth.
	rpu := int(math.Max(1, math.Round(target/10)))
	soak, err := startRunner(bin, o, peers, rpu, 100*time.Millisecond)
	if err != nil {
		return nil, stopLine{}, err
	}
	var samples []sample
	start := time.Now()
	prevAcked, prevAt := int64(0), start
	for time.Since(start) < o.duration {
		time.Sleep(min(o.every, o.duration-time.Since(start)))
		s := sample{At: time.Since(start)}
		var err error
		if s.RSS, err = procstat.RSS(soak.pid()); err != nil {
			return nil, stopLine{}, fmt.Errorf("runner gone: %w", err)
		}
		s.Goroutines = soak.metric("go_goroutines")
		s.OpenFiles = procstat.OpenFiles(soak.pid())
		_, acked, _ := soak.totals()
		now := time.Now()
		s.Rate = float64(acked-prevAcked) / now.Sub(prevAt).Seconds()
		prevAcked, prevAt = acked, now
		samples = append(samples, s)
		fmt.Printf("%8v  rss %7.1f MiB  goroutines %4.0f  open files %3d  rate %8.0f msg/s\n",
			s.At.Round(time.Second), float64(s.RSS)/(1<<20), s.Goroutines, s.OpenFiles, s.Rate)
	}
	stopped, err := soak.stop()
	if err != nil {
		return nil, stopLine{}, fmt.Errorf("soak run: %w", err)
	}
	return samples, stopped, nil
}

// judge compares the first and the last window of samples and counts what
// was lost: the report is OK when every figure stayed flat and nothing was.
func judge(o options, samples []sample, stopped stopLine, peers *peers) report {
	rep := report{Pipeline: o.pipeline, Duration: o.duration.String(), Tolerance: o.tolerance, Stopped: stopped}
	first := window(samples, o.warmup, o.warmup+o.window)
	last := window(samples, o.duration-o.window, o.duration+time.Hour)
	ok := true
	// slack is an absolute change that counts as flat whatever the
	// tolerance: a few goroutines or files come and go with the batches in
	// flight, which is noise on the small counts of the engine pipeline.
	for _, m := range []struct {
		name  string
		get   func(sample) float64
		slack float64
	}{
		{"RSS (MiB)", func(s sample) float64 { return float64(s.RSS) / (1 << 20) }, 2},
		{"goroutines", func(s sample) float64 { return s.Goroutines }, 8},
		{"open files", func(s sample) float64 { return float64(s.OpenFiles) }, 2},
		{"processing rate (msg/s)", func(s sample) float64 { return s.Rate }, 0},
	} {
		a, b := mean(first, m.get), mean(last, m.get)
		change := 0.0
		if a != 0 {
			change = (b - a) / a
		}
		flat := math.Abs(change) <= o.tolerance || math.Abs(b-a) <= m.slack
		ok = ok && flat
		rep.Figures = append(rep.Figures, figure{Name: m.name, Start: a, End: b, Change: change, Flat: flat})
	}
	if peers != nil {
		rep.Received, rep.Duplicates = peers.counts()
	}
	// The generator never redelivers: every message read must have been
	// acked, written, and (cloudevents) received, or it is lost.
	rep.Lost = max(stopped.Read-stopped.Acked, stopped.Read-stopped.Written)
	if peers != nil {
		rep.Lost = max(rep.Lost, stopped.Read-rep.Received)
	}
	rep.OK = ok && rep.Lost == 0
	rep.Samples = samples
	return rep
}

// sample is one reading of the soaking runner.
type sample struct {
	At         time.Duration `json:"at"`
	RSS        int64         `json:"rss_bytes"`
	Goroutines float64       `json:"goroutines"`
	OpenFiles  int           `json:"open_files"`
	Rate       float64       `json:"rate"`
}

type figure struct {
	Name   string  `json:"name"`
	Start  float64 `json:"start"`
	End    float64 `json:"end"`
	Change float64 `json:"change"`
	Flat   bool    `json:"flat"`
}

type report struct {
	Pipeline   string   `json:"pipeline"`
	Capacity   float64  `json:"capacity_msg_per_s"`
	Target     float64  `json:"target_msg_per_s"`
	Duration   string   `json:"duration"`
	Tolerance  float64  `json:"tolerance"`
	Figures    []figure `json:"figures"`
	Stopped    stopLine `json:"stopped"`
	Received   int64    `json:"received_by_sink"`
	Duplicates int64    `json:"duplicates"`
	Lost       int64    `json:"lost"`
	OK         bool     `json:"ok"`
	Samples    []sample `json:"samples"`
}

func printReport(r report) {
	fmt.Printf("\nsoak: %s pipeline, %v at %.0f msg/s (half of the measured %.0f msg/s)\n\n", r.Pipeline, r.Duration, r.Target, r.Capacity)
	tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "figure\tstart\tend\tchange\twithin %.0f%%\n", r.Tolerance*100)
	for _, f := range r.Figures {
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%+.1f%%\t%v\n", f.Name, f.Start, f.End, f.Change*100, f.Flat)
	}
	tw.Flush()
	fmt.Printf("\nmessages: read %d, acked %d, written %d", r.Stopped.Read, r.Stopped.Acked, r.Stopped.Written)
	if r.Pipeline == "cloudevents" {
		fmt.Printf(", received by the sink %d (%d duplicates)", r.Received, r.Duplicates)
	}
	fmt.Printf("; lost %d\n", r.Lost)
	if r.OK {
		fmt.Println("PASS: flat and nothing lost")
	} else {
		fmt.Println("FAIL")
	}
}

func window(s []sample, from, to time.Duration) []sample {
	var out []sample
	for _, x := range s {
		if x.At >= from && x.At < to {
			out = append(out, x)
		}
	}
	return out
}

func mean(s []sample, get func(sample) float64) float64 {
	if len(s) == 0 {
		return 0
	}
	var t float64
	for _, x := range s {
		t += get(x)
	}
	return t / float64(len(s))
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// proc is a running runner.
type proc struct {
	cmd    *exec.Cmd
	admin  string
	stderr *lockedBuffer
	done   chan error
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	// Keep the tail only: a long soak logs little, but never grow without bound.
	if l.b.Len() > 1<<20 {
		s := l.b.String()[l.b.Len()-(512<<10):]
		l.b.Reset()
		l.b.WriteString(s)
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func startRunner(bin string, o options, p *peers, rpu int, per time.Duration) (*proc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	admin, err := freePort()
	if err != nil {
		return nil, err
	}
	env := []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"PORT=" + strconv.Itoa(port), "MV_ADMIN_PORT=" + strconv.Itoa(admin), "MV_NAME=soak", "MV_LOG_LEVEL=info",
		"MV_SOURCE=generator", "MV_GENERATOR_RPU=" + strconv.Itoa(rpu), "MV_GENERATOR_DURATION=" + per.String(),
		"MV_GENERATOR_MSG_SIZE=" + strconv.Itoa(o.payload), "MV_READ_TIMEOUT=100ms",
	}
	if p != nil {
		env = append(env, "MV_TRANSFORMER=cloudevents", "MV_TRANSFORMER_URL="+p.fnURL, "MV_SINK=cloudevents", "K_SINK="+p.sinkURL)
	} else {
		env = append(env, "MV_SINK=blackhole")
	}
	cmd := exec.Command(bin)
	cmd.Env = env
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the runner: %w", err)
	}
	r := &proc{cmd: cmd, admin: "http://127.0.0.1:" + strconv.Itoa(admin), stderr: stderr, done: make(chan error, 1)}
	go func() { r.done <- cmd.Wait() }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(r.admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return r, nil
			}
		}
		select {
		case err := <-r.done:
			return nil, fmt.Errorf("runner exited before it was ready (%v):\n%s", err, stderr.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			return nil, fmt.Errorf("runner not ready after 60s:\n%s", stderr.String())
		}
	}
}

func (r *proc) pid() int { return r.cmd.Process.Pid }

// totals reads /status.
func (r *proc) totals() (read, acked, written int64) {
	resp, err := http.Get(r.admin + "/status")
	if err != nil {
		return -1, -1, -1
	}
	defer resp.Body.Close()
	var st struct {
		Totals struct{ Read, Acked, Written int64 }
	}
	if json.NewDecoder(resp.Body).Decode(&st) != nil {
		return -1, -1, -1
	}
	return st.Totals.Read, st.Totals.Acked, st.Totals.Written
}

// metric reads an unlabelled metric from /metrics.
func (r *proc) metric(name string) float64 { return procstat.Metric(r.admin+"/metrics", name, nil) }

// stopLine is the runner's "runner stopped" log line.
type stopLine struct {
	Read    int64 `json:"read"`
	Acked   int64 `json:"acked"`
	Written int64 `json:"written"`
}

// stop sends SIGTERM, waits for a clean exit and returns the final totals.
func (r *proc) stop() (stopLine, error) {
	var l stopLine
	r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-r.done:
		if err != nil {
			return l, fmt.Errorf("runner exited with %v after SIGTERM:\n%s", err, r.stderr.String())
		}
	case <-time.After(60 * time.Second):
		r.cmd.Process.Kill()
		return l, errors.New("runner still running 60s after SIGTERM")
	}
	for _, line := range strings.Split(r.stderr.String(), "\n") {
		var x struct {
			Msg string `json:"msg"`
			stopLine
		}
		if json.Unmarshal([]byte(line), &x) == nil && x.Msg == "runner stopped" {
			l = x.stopLine
		}
	}
	return l, nil
}

// peers are the CloudEvents function and receiver of the cloudevents pipeline.
type peers struct {
	fnURL, sinkURL string
	servers        []*http.Server

	mu       sync.Mutex
	seen     []uint64 // bit per generator sequence number
	received int64
	dups     int64
}

func startPeers() (*peers, error) {
	p := &peers{}
	serve := func(h http.HandlerFunc) (string, error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		p.servers = append(p.servers, srv)
		go srv.Serve(ln)
		return "http://" + ln.Addr().String(), nil
	}
	var err error
	// The function echoes each event back as its reply (binary mode).
	if p.fnURL, err = serve(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		for _, h := range []string{"Ce-Id", "Ce-Source", "Ce-Type", "Ce-Specversion", "Ce-Time", "Content-Type"} {
			if v := r.Header.Get(h); v != "" {
				w.Header().Set(h, v)
			}
		}
		w.Header().Set("Ce-Type", "dev.monovertex.soak.echo")
		w.Write(body)
	}); err != nil {
		return nil, err
	}
	// The receiver counts each generator message once, and duplicates.
	if p.sinkURL, err = serve(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		id := r.Header.Get("Ce-Id")
		if i := strings.LastIndexByte(id, '-'); i >= 0 {
			if seq, err := strconv.ParseUint(id[i+1:], 10, 64); err == nil {
				p.mark(seq)
			}
		}
		w.WriteHeader(http.StatusOK)
	}); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *peers) mark(seq uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	word := seq / 64
	for uint64(len(p.seen)) <= word {
		p.seen = append(p.seen, 0)
	}
	bit := uint64(1) << (seq % 64)
	if p.seen[word]&bit != 0 {
		p.dups++
		return
	}
	p.seen[word] |= bit
	p.received++
}

func (p *peers) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen, p.received, p.dups = nil, 0, 0
}

func (p *peers) counts() (received, dups int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.received, p.dups
}

func (p *peers) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, s := range p.servers {
		s.Shutdown(ctx)
	}
}
