package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/monovertex/monovertex/hack/bench/internal/wait"
)

// proc is one child process of the benchmark: the runner, an SDK server, a
// baseline or a peer. Its output goes to a log file in the work directory,
// shown when something fails.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	stdout  *strings.Builder // only for processes started with captureStdout
	done    chan struct{}
	err     error
}

var procSeq atomic.Int64

// start runs bin with args; env adds to the harness' environment (plus
// GOMAXPROCS when --cpus is set).
func (h *harness) start(name, bin string, args []string, env map[string]string, captureStdout bool) (*proc, error) {
	logPath := filepath.Join(h.work, fmt.Sprintf("%03d-%s.log", procSeq.Add(1), sanitize(name)))
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	bin, args, cores := h.pin(name, bin, args)
	cmd := exec.Command(bin, args...)
	// The runner's MV_* settings come from the scenario only: one left in
	// the caller's shell (MV_UDSINK_STREAMS=4, say) would change what is
	// measured without showing anywhere.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MV_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if cores > 0 {
		cmd.Env = append(cmd.Env, "GOMAXPROCS="+strconv.Itoa(cores))
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	p := &proc{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	cmd.Stderr = logf
	cmd.Stdout = logf
	if captureStdout {
		p.stdout = &strings.Builder{}
		cmd.Stdout = io.MultiWriter(p.stdout, logf)
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

// brokerProcs are the name prefixes of the processes that stand for the
// broker's machine under --broker-core: the broker and the feeder that
// keeps its input topped up.
var brokerProcs = []string{"kfake-", "nats-server-", "kafka-feed-", "js-feed-"}

// pin returns the command line that pins the process named name as --cpus
// or --broker-core say, and the GOMAXPROCS it gets (0: Go's default).
func (h *harness) pin(name, bin string, args []string) (string, []string, int) {
	n := runtime.NumCPU()
	if !h.brokerCore || h.taskset == "" {
		bin, args = pinArgs(h.taskset, h.cpus, n, bin, args)
		return bin, args, h.cpus
	}
	for _, p := range brokerProcs {
		if strings.HasPrefix(name, p) {
			return h.taskset, append([]string{"-c", strconv.Itoa(n - 1), bin}, args...), 1
		}
	}
	return h.taskset, append([]string{"-c", fmt.Sprintf("0-%d", n-2), bin}, args...), n - 1
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '.':
			return r
		}
		return '_'
	}, s)
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, waits up to grace for the process to end, then kills
// it. It never returns before the process is gone.
func (p *proc) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// wait waits for the process to end by itself within timeout.
func (p *proc) wait(timeout time.Duration) error {
	select {
	case <-p.done:
		if p.err != nil {
			return fmt.Errorf("%s failed: %w\n%s", p.name, p.err, p.logTail(15))
		}
		return nil
	case <-time.After(timeout):
		p.stop(2 * time.Second)
		return fmt.Errorf("%s did not finish within %s\n%s", p.name, timeout, p.logTail(15))
	}
}

// logTail returns the last n lines of the process' log, indented.
func (p *proc) logTail(n int) string {
	b, _ := os.ReadFile(p.logPath)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "    | " + strings.Join(lines, "\n    | ") + "\n    (log: " + p.logPath + ")"
}

// peakRSSMiB is the process' peak resident set (VmHWM), in MiB.
func peakRSSMiB(pid int) (float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if kb, ok := parseVmHWM(sc.Text()); ok {
			return kb / 1024, nil
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}

// parseVmHWM reads a "VmHWM:   1234 kB" line of /proc/<pid>/status.
func parseVmHWM(line string) (kb float64, ok bool) {
	rest, found := strings.CutPrefix(line, "VmHWM:")
	if !found {
		return 0, false
	}
	f := strings.Fields(rest)
	if len(f) != 2 || f[1] != "kB" {
		return 0, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	return v, err == nil
}

// freePort returns a TCP port nobody listens on right now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// startListening starts a server process on a free loopback port (args
// says how to pass the port to it) and waits until it accepts
// connections; it returns the process and its host:port. On failure the
// process is stopped.
func (h *harness) startListening(name, bin string, args func(port int) []string, env map[string]string) (*proc, string, error) {
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	p, err := h.start(name, bin, args(port), env, false)
	if err != nil {
		return nil, "", err
	}
	if err := waitUntil(name+" to listen on "+addr, 30*time.Second, p, func() bool { return dialOK(addr) }); err != nil {
		p.stop(5 * time.Second)
		return nil, "", err
	}
	return p, addr, nil
}

// dialOK reports whether addr accepts a TCP connection.
func dialOK(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// addrArgs passes a server's address as "-addr 127.0.0.1:<port>" after
// the benchpeer subcommand.
func addrArgs(sub string) func(port int) []string {
	return func(port int) []string { return []string{sub, "-addr", "127.0.0.1:" + strconv.Itoa(port)} }
}

// waitUntil polls ok every 10ms until it returns true, p ends, or timeout.
func waitUntil(what string, timeout time.Duration, p *proc, ok func() bool) error {
	deadline := time.Now().Add(timeout)
	for {
		if ok() {
			return nil
		}
		if p != nil && p.exited() {
			return fmt.Errorf("%s exited before %s: %v\n%s", p.name, what, p.err, p.logTail(15))
		}
		if time.Now().After(deadline) {
			tail := ""
			if p != nil {
				tail = "\n" + p.logTail(15)
			}
			return fmt.Errorf("timed out after %s waiting for %s%s", timeout, what, tail)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// httpClient is for the harness' own small requests (status, metrics). The
// timeout is long because a runner with GOMAXPROCS=1 and an unthrottled
// generator answers its admin port only after seconds.
var httpClient = &http.Client{Timeout: 30 * time.Second}

func httpOK(url string) bool {
	resp, err := httpClient.Get(url)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func getBody(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(b)))
	}
	return b, nil
}

func getJSON(ctx context.Context, url string, into any) error {
	b, err := getBody(ctx, url)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, into)
}

// saveURL streams a GET into a file (a CPU profile that takes seconds).
func saveURL(url, path string, timeout time.Duration) error {
	c := &http.Client{Timeout: timeout}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// lastJSONLine decodes the last line of out that is a JSON object.
func lastJSONLine(out string, into any) error {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if strings.HasPrefix(l, "{") {
			return json.Unmarshal([]byte(l), into)
		}
	}
	return errors.New("no JSON result line in the output")
}

// userHZ is the unit of the CPU times in /proc/<pid>/stat (USER_HZ, 100 on
// every Linux architecture Go supports).
const userHZ = 100

// procCPUSeconds is a process' user+system CPU time so far.
func procCPUSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseProcStatCPU(string(b))
}

// parseProcStatCPU reads utime and stime (fields 14 and 15) from a
// /proc/<pid>/stat line; the command name in parentheses may hold spaces.
func parseProcStatCPU(stat string) (float64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("no command name in /proc/<pid>/stat")
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state): utime is field 14, stime field 15.
	if len(f) < 13 {
		return 0, errors.New("short /proc/<pid>/stat")
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bad CPU times in /proc/<pid>/stat: %q %q", f[11], f[12])
	}
	return (ut + st) / userHZ, nil
}

// window is what measuredWindow measured: the CPU time of each process
// over the window, and the wait for the CPU profile.
type window struct {
	procs   []*proc
	cpu     []*cpuMeter // of procs, in order
	profile func() error
	start   time.Time
	seconds float64 // the window's length
}

// measuredWindow waits out the warm-up, calls mark, starts metering the
// CPU time of procs and (with --profile) a CPU profile of role from
// profileURL, waits out the measured window and calls mark again.
func (h *harness) measuredWindow(ctx context.Context, sc scenario, role, profileURL string, procs []*proc, mark func() error) (*window, error) {
	if !wait.Sleep(ctx, h.warmup) {
		return nil, ctx.Err()
	}
	if err := mark(); err != nil {
		return nil, err
	}
	w := &window{procs: procs, start: time.Now()}
	for _, p := range procs {
		w.cpu = append(w.cpu, startCPU(p.cmd.Process.Pid))
	}
	w.profile = h.startProfile(sc, role, profileURL)
	if !wait.Sleep(ctx, h.duration) {
		return nil, ctx.Err()
	}
	for _, c := range w.cpu {
		c.stop()
	}
	w.seconds = time.Since(w.start).Seconds()
	if err := mark(); err != nil {
		return nil, err
	}
	return w, nil
}

// split is the CPU time of each process per message, in µs, and in cores
// (CPU seconds per second of the window), by the process' kind (runner,
// udsource, udsink, udtransformer, function).
func (w *window) split(msgs float64) (perMsg, cores map[string]float64) {
	perMsg, cores = map[string]float64{}, map[string]float64{}
	for i, p := range w.procs {
		if v := w.cpu[i].perMsg(msgs); !math.IsNaN(v) {
			perMsg[p.kind()] += v
			cores[p.kind()] += v * msgs / 1e6 / w.seconds
		}
	}
	return perMsg, cores
}

// kind is the first part of the process' name: what it is.
func (p *proc) kind() string {
	k, _, _ := strings.Cut(p.name, "-")
	return k
}

// cpuMeter measures one process' CPU time between two points.
type cpuMeter struct {
	pid        int
	start, end float64
	stopped    bool
	err        error
}

func startCPU(pid int) *cpuMeter {
	c := &cpuMeter{pid: pid}
	c.start, c.err = procCPUSeconds(pid)
	return c
}

// stop ends the measurement; without it, perMsg measures up to its call.
func (c *cpuMeter) stop() {
	end, err := procCPUSeconds(c.pid)
	c.end, c.stopped = end, true
	if c.err == nil {
		c.err = err
	}
}

// perMsg is the CPU time from start to stop (or to now) per message, in
// µs, NaN if unknown.
func (c *cpuMeter) perMsg(msgs float64) float64 {
	end, err := c.end, error(nil)
	if !c.stopped {
		end, err = procCPUSeconds(c.pid)
	}
	if c.err != nil || err != nil || msgs <= 0 {
		return math.NaN()
	}
	return (end - c.start) / msgs * 1e6
}
