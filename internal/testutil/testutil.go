// Package testutil starts the programs of this module as real processes for
// end-to-end tests: it builds them once per test binary, gives them free
// loopback ports, captures their output, and stops them at the end.
package testutil

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/monovertex/monovertex/runner"
)

var (
	buildMu  sync.Mutex
	built    = map[string]string{}
	buildDir string
)

// ModuleRoot returns the directory of this module's go.mod.
func ModuleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.Contains(b, []byte("module github.com/monovertex/monovertex\n")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("go.mod of github.com/monovertex/monovertex not found above the test directory")
		}
		dir = parent
	}
}

// CoverDirEnv names the variable that turns on coverage of the programs
// the end-to-end tests start (hack/test.sh sets it): Build then compiles
// them with -cover over the whole module, and BaseEnv gives each process
// GOCOVERDIR set to its value, where the processes write their counters on
// exit for go tool covdata to merge with the unit tests' profile. It is
// not an MV_ variable so that MV_STRICT, which the config tests run in this
// process, does not reject it.
const CoverDirEnv = "MONOVERTEX_COVERDIR"

// coverDir is the directory the started programs write coverage to, or "".
func coverDir() string { return os.Getenv(CoverDirEnv) }

// BaseEnv is the environment every started program gets before its own
// settings: PATH and HOME, and GOCOVERDIR when coverage is on (a binary
// built with -cover warns on stderr when it is missing, which would break
// the tests that expect one stderr line).
func BaseEnv() []string {
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	if d := coverDir(); d != "" {
		env = append(env, "GOCOVERDIR="+d)
	}
	return env
}

// Build compiles a main package of this module (such as "./cmd/runner")
// once per test binary, with -race when the tests run with it (and with
// -cover when CoverDirEnv is set), and returns the binary's path.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	return build(t, "", pkg, true, nil)
}

// BuildTool compiles a main package of the nested module in dir (relative
// to this module's root, such as "hack/goaws": a peer a test starts, kept
// out of this module's graph) once per test binary, without -race or
// -cover, which are for this module's code, and returns the binary's path.
func BuildTool(t testing.TB, dir, pkg string) string {
	t.Helper()
	return build(t, dir, pkg, false, nil)
}

// BuildIn compiles the main package pkg of the module in dir (an absolute
// path), a module of its own built on this one's code (a runner with an
// adapter from outside, docs/writing-an-adapter.md), as Build does: with
// -race and -cover as the tests run. env is added to the go command's.
func BuildIn(t testing.TB, dir, pkg string, env ...string) string {
	t.Helper()
	return build(t, dir, pkg, true, env)
}

// Race reports whether the tests run with -race, for tests that run the go
// command themselves and want the same.
func Race() bool { return raceEnabled }

// build compiles pkg in dir (relative to this module's root, or absolute);
// ours says the binary's point is this module's code, which then gets
// -race and -cover as the tests run.
func build(t testing.TB, dir, pkg string, ours bool, env []string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	key := filepath.Join(dir, pkg)
	if p, ok := built[key]; ok {
		return p
	}
	if buildDir == "" {
		removeStaleBuildDirs(os.TempDir())
		d, err := os.MkdirTemp("", binDirPrefix)
		if err != nil {
			t.Fatal(err)
		}
		if buildLock, err = lockDir(d); err != nil {
			// A file system without locks: the directory is then
			// removed only once it is a day old.
			t.Logf("%v; %s stays until it is a day old", err, d)
		}
		buildDir = d
	}
	out := filepath.Join(buildDir, strings.ReplaceAll(strings.Trim(key, "./"), "/", "_"))
	args := []string{"build", "-o", out}
	if raceEnabled && ours {
		args = append(args, "-race")
	}
	if coverDir() != "" && ours {
		// atomic: the only mode -race allows, and the one the unit tests'
		// profile uses, so the two merge.
		args = append(args, "-cover", "-covermode=atomic", "-coverpkg=github.com/monovertex/monovertex/...")
	}
	args = append(args, pkg)
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	if !filepath.IsAbs(dir) {
		cmd.Dir = filepath.Join(ModuleRoot(t), dir)
	}
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s in %s: %v\n%s", pkg, cmd.Dir, err, b)
	}
	built[key] = out
	return out
}

// binDirPrefix starts the name of Build's directory.
const binDirPrefix = "monovertex-bin-"

// staleUnlocked is how old a build directory without a lock file must be
// to be removed: one made before lock files, or whose binary died between
// making it and locking it.
const staleUnlocked = 24 * time.Hour

// buildLock is this test binary's lock on its build directory, held
// until the process exits (the kernel then releases it).
var buildLock *os.File

// removeStaleBuildDirs removes the build directories in tmp of test
// binaries that have exited. A test binary cannot remove its own at exit
// without a TestMain in every package that builds, and each directory
// holds about 200 MB of binaries built with -race and -cover: left alone
// they filled a developer's disk after a few hundred runs. A binary holds
// an exclusive lock on its directory's lock file for its life, and the
// lock, unlike a process ID, is seen from every PID namespace sharing the
// directory, so a directory is removed only when its lock can be taken.
func removeStaleBuildDirs(tmp string) {
	ents, err := os.ReadDir(tmp)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), binDirPrefix) {
			continue
		}
		dir := filepath.Join(tmp, e.Name())
		f, err := os.Open(filepath.Join(dir, lockName))
		if err != nil {
			if info, serr := e.Info(); os.IsNotExist(err) && serr == nil && time.Since(info.ModTime()) > staleUnlocked {
				_ = os.RemoveAll(dir)
			}
			continue
		}
		if tryLock(f) {
			_ = os.RemoveAll(dir)
		}
		f.Close()
	}
}

// BuildRunner builds ./cmd/runner.
func BuildRunner(t testing.TB) string { return Build(t, "./cmd/runner") }

// Buffer is an io.Writer safe for a process and a test to share.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Process is a started program.
type Process struct {
	t      testing.TB
	Name   string
	Cmd    *exec.Cmd
	Stdout *Buffer
	Stderr *Buffer
	// AdminURL and PortURL are the runner's admin and $PORT base URLs.
	AdminURL string
	PortURL  string

	done     chan struct{}
	exitCode int
}

// Start runs binary with exactly env (plus PATH and HOME) and stops it when
// the test ends.
func Start(t testing.TB, name, binary string, env map[string]string, args ...string) *Process {
	t.Helper()
	p := &Process{t: t, Name: name, Stdout: &Buffer{}, Stderr: &Buffer{}, done: make(chan struct{}), exitCode: -1}
	p.Cmd = exec.Command(binary, args...)
	p.Cmd.SysProcAttr = procAttr()
	p.Cmd.Env = BaseEnv()
	for k, v := range env {
		p.Cmd.Env = append(p.Cmd.Env, k+"="+v)
	}
	p.Cmd.Stdout = p.Stdout
	p.Cmd.Stderr = p.Stderr
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		err := p.Cmd.Wait()
		p.exitCode = p.Cmd.ProcessState.ExitCode()
		if err != nil && p.exitCode == -1 {
			p.exitCode = 128 + int(p.Cmd.ProcessState.Sys().(syscall.WaitStatus).Signal())
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		if coverDir() != "" {
			p.stopForCoverage()
		}
		p.Kill()
		if t.Failed() {
			t.Logf("%s stderr (tail):\n%s", name, tail(p.Stderr.String(), 4000))
		}
	})
	return p
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// StartRunner starts the runner with env, on free ports unless env sets
// PORT or MV_ADMIN_PORT.
func StartRunner(t testing.TB, env map[string]string) *Process {
	t.Helper()
	return StartRunnerBinary(t, BuildRunner(t), env)
}

// StartRunnerBinary starts binary, a runner built elsewhere (BuildIn), as
// StartRunner starts the runner.
func StartRunnerBinary(t testing.TB, binary string, env map[string]string) *Process {
	t.Helper()
	e := map[string]string{}
	for k, v := range env {
		e[k] = v
	}
	if e["PORT"] == "" {
		e["PORT"] = strconv.Itoa(FreePort(t))
	}
	if e["MV_ADMIN_PORT"] == "" {
		e["MV_ADMIN_PORT"] = strconv.Itoa(FreePort(t))
	}
	p := Start(t, "runner", binary, e)
	p.AdminURL = "http://127.0.0.1:" + e["MV_ADMIN_PORT"]
	p.PortURL = "http://127.0.0.1:" + e["PORT"]
	return p
}

// Signal sends sig to the process.
func (p *Process) Signal(sig os.Signal) {
	if p.Cmd.Process != nil {
		_ = p.Cmd.Process.Signal(sig)
	}
}

// stopForCoverage asks a process still running at the end of its test to
// exit (SIGTERM, up to 2s) before it is killed: a binary built with -cover
// writes its counters only when it exits, and a SIGKILL would lose them.
func (p *Process) stopForCoverage() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(2 * time.Second):
	}
}

// Kill stops the process at once (SIGKILL) and waits for it.
func (p *Process) Kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.Cmd.Process.Kill()
	<-p.done
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait waits up to timeout for the process to exit and returns its exit
// code; it fails the test if it is still running.
func (p *Process) Wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
		return p.exitCode
	case <-time.After(timeout):
		p.t.Fatalf("%s still running after %v", p.Name, timeout)
		return -1
	}
}

// Stop sends SIGTERM, the way Kubernetes stops a pod, and fails the test
// unless the process exits with 0 within timeout; the failure shows the
// end of its stderr, where the runner says why it did not drain. A process
// still running after timeout gets SIGQUIT, on which the runner (like any
// Go program) prints every goroutine's stack: the failure then shows where
// it was stuck.
func (p *Process) Stop(timeout time.Duration) {
	p.t.Helper()
	p.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.Signal(syscall.SIGQUIT)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
		}
		p.t.Fatalf("%s still running %v after SIGTERM; its goroutines at SIGQUIT:\n%s", p.Name, timeout, tail(p.Stderr.String(), 60000))
	}
	if p.exitCode != 0 {
		p.t.Fatalf("%s exited with %d after SIGTERM, want 0:\n%s", p.Name, p.exitCode, tail(p.Stderr.String(), 6000))
	}
}

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// ExitCode is the exit code once Done is closed.
func (p *Process) ExitCode() int { return p.exitCode }

// Get fetches url and returns its status and body; errors fail the test.
func Get(t testing.TB, url string) (int, []byte) {
	t.Helper()
	return send(t, http.MethodGet, url, nil, nil, 10*time.Second)
}

// Post sends body to url with header and returns the answer's status and
// body; errors fail the test.
func Post(t testing.TB, url string, body []byte, header map[string]string) (int, []byte) {
	t.Helper()
	return send(t, http.MethodPost, url, bytes.NewReader(body), header, 60*time.Second)
}

func send(t testing.TB, method, url string, body io.Reader, header map[string]string, timeout time.Duration) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	c := http.Client{Timeout: timeout}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// WaitReady polls the runner's /readyz until it answers 200.
func (p *Process) WaitReady(timeout time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	c := http.Client{Timeout: time.Second}
	for time.Now().Before(deadline) {
		if p.Exited() {
			p.t.Fatalf("%s exited with %d before it was ready:\n%s", p.Name, p.exitCode, tail(p.Stderr.String(), 4000))
		}
		resp, err := c.Get(p.AdminURL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.t.Fatalf("%s not ready after %v:\n%s", p.Name, timeout, tail(p.Stderr.String(), 4000))
}

// Status fetches the runner's /status.
func (p *Process) Status() (runner.Status, error) {
	var st runner.Status
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(p.AdminURL + "/status")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("/status answered %s", resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// WaitFor polls cond every 50ms until it holds or timeout passes; then it
// fails the test with what.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Receive returns the value ch delivers within timeout, such as the answer
// of a request sent in the background; it fails the test when none
// arrives, or when failed reports an error for the value (nil: none can).
func Receive[T any](t testing.TB, ch <-chan T, timeout time.Duration, failed func(T) error) T {
	t.Helper()
	select {
	case v := <-ch:
		if failed != nil {
			if err := failed(v); err != nil {
				t.Fatalf("request failed: %v", err)
			}
		}
		return v
	case <-time.After(timeout):
		t.Fatalf("no answer within %v", timeout)
		var none T
		return none
	}
}

// StopTotals are the totals of the runner's last log line, "runner stopped".
type StopTotals struct {
	Msg             string `json:"msg"`
	Read            int64  `json:"read"`
	Acked           int64  `json:"acked"`
	Nacked          int64  `json:"nacked"`
	Written         int64  `json:"written"`
	FallbackWritten int64  `json:"fallback_written"`
	Dropped         int64  `json:"dropped"`
}

// StopLine finds the last "runner stopped" line in the runner's stderr; it
// fails the test when there is none.
func StopLine(t testing.TB, stderr string) StopTotals {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(stderr))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var found *StopTotals
	for sc.Scan() {
		var l StopTotals
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "runner stopped" {
			found = &l
		}
	}
	if found == nil {
		t.Fatalf("no \"runner stopped\" log line in:\n%s", stderr)
	}
	return *found
}
