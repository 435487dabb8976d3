package testutil

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Examples is one set of processes sharing a Unix socket directory: the
// Numaflow example containers (cmd/example-ud*) and the runner, as the
// end-to-end tests of Numaflow pipelines start them. It checks every
// process for data races when the test ends.
type Examples struct {
	T *testing.T
	// Dir holds the sockets and server-info files (MV_UDS_DIR).
	Dir string
	// Work holds the examples' state and output files.
	Work string
	// Runner is the runner process, once StartRunner ran.
	Runner *Process
	all    []*Process
}

// NewExamples makes the directories; prefix names the socket directory,
// which is short because Unix socket paths are limited to 108 bytes.
func NewExamples(t *testing.T, prefix string) *Examples {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	x := &Examples{T: t, Dir: dir, Work: t.TempDir()}
	t.Cleanup(x.CheckNoRaces)
	return x
}

// File is the path of a state or output file in Work.
func (x *Examples) File(name string) string { return filepath.Join(x.Work, name) }

// Start builds the program pkg (such as ./cmd/example-udsink) and starts it
// as name on the socket directory.
func (x *Examples) Start(name, pkg string, env map[string]string) *Process {
	all := map[string]string{"MV_UDS_DIR": x.Dir}
	for k, v := range env {
		all[k] = v
	}
	return x.track(Start(x.T, name, Build(x.T, pkg), all))
}

// StartSource starts example-udsource with ids 0 to total-1, writing the
// ids acked to the state file "acked" (ReadAcked); settings add to its
// environment.
func (x *Examples) StartSource(total int, settings map[string]string) *Process {
	env := map[string]string{"EXAMPLE_TOTAL": strconv.Itoa(total), "EXAMPLE_STATE_FILE": x.File("acked")}
	for k, v := range settings {
		env[k] = v
	}
	return x.Start("example-udsource", "./cmd/example-udsource", env)
}

// StartSink starts example-udsink as name, writing what it takes to the
// output file out (ReadSinkLines); settings add to its environment.
func (x *Examples) StartSink(name, out string, settings map[string]string) *Process {
	env := map[string]string{"EXAMPLE_OUT_FILE": x.File(out)}
	for k, v := range settings {
		env[k] = v
	}
	return x.Start(name, "./cmd/example-udsink", env)
}

// StartRunner starts the runner on the socket directory and waits until it
// is ready.
func (x *Examples) StartRunner(env map[string]string) *Process {
	all := map[string]string{"MV_UDS_DIR": x.Dir}
	for k, v := range env {
		all[k] = v
	}
	x.Runner = x.track(StartRunner(x.T, all))
	x.Runner.WaitReady(90 * time.Second)
	return x.Runner
}

// RunnerEnv is the runner environment the Numaflow pipeline tests share:
// reading from example-udsource and writing to example-udsink, short reads
// and pending checks, time for a container to start (60s) or to come back
// (30s), and a 10s shutdown budget; settings add to it or override it.
func (x *Examples) RunnerEnv(settings map[string]string) map[string]string {
	env := map[string]string{
		"MV_SOURCE":                "udsource",
		"MV_SINK":                  "udsink",
		"MV_READ_TIMEOUT":          "100ms",
		"MV_PENDING_INTERVAL":      "200ms",
		"MV_UDF_RECONNECT_TIMEOUT": "30s",
		"MV_UDF_STARTUP_TIMEOUT":   "60s",
		"MV_SHUTDOWN_TIMEOUT":      "10s",
	}
	for k, v := range settings {
		env[k] = v
	}
	return env
}

func (x *Examples) track(p *Process) *Process {
	x.all = append(x.all, p)
	return p
}

// CheckNoRaces fails the test if any process (built with -race when the
// tests run with it) reported a data race.
func (x *Examples) CheckNoRaces() {
	for _, p := range x.all {
		if strings.Contains(p.Stderr.String(), "WARNING: DATA RACE") {
			x.T.Errorf("%s reported a data race:\n%s", p.Name, Tail(p.Stderr.String(), 6000))
		}
	}
}

// StopRunner sends SIGTERM and expects a clean exit.
func (x *Examples) StopRunner() {
	x.T.Helper()
	x.Runner.Stop(30 * time.Second)
}

// RunnerAlive fails the test if the runner has exited.
func (x *Examples) RunnerAlive() {
	x.T.Helper()
	if x.Runner != nil && x.Runner.Exited() {
		x.T.Fatalf("runner exited with %d:\n%s", x.Runner.ExitCode(), Tail(x.Runner.Stderr.String(), 6000))
	}
}

// ReadAcked returns the ids in example-udsource's state file
// (EXAMPLE_STATE_FILE), one acked id a line.
func (x *Examples) ReadAcked(name string) map[int]bool {
	x.T.Helper()
	b, err := os.ReadFile(x.File(name))
	if err != nil && !os.IsNotExist(err) {
		x.T.Fatal(err)
	}
	acked := map[int]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		if n, err := strconv.Atoi(l); err == nil {
			acked[n] = true
		}
	}
	return acked
}

// SinkLine is one line of an example-udsink output file (EXAMPLE_OUT_FILE).
type SinkLine struct {
	ID      string
	N       int    // the example source's id the message came from
	Size    int    // payload bytes
	Keys    string // comma-joined keys
	EventMS int64  // event time, Unix milliseconds
	// WellMade says the payload had the shape the example source gives it.
	WellMade bool
}

// ReadSinkLines parses an example-udsink output file; a line cut short by
// a kill is skipped, and a file not written yet has no lines.
func (x *Examples) ReadSinkLines(name string) []SinkLine {
	x.T.Helper()
	b, err := os.ReadFile(x.File(name))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		x.T.Fatal(err)
	}
	var out []SinkLine
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
		out = append(out, SinkLine{ID: f[0], N: n, Size: size, Keys: f[3], EventMS: et, WellMade: f[5] == "ok"})
	}
	return out
}

// ExampleSourceID is the message ID udsource gives example-udsource's id n:
// the offset in base64, a dash, the partition.
func ExampleSourceID(n int) string {
	return base64.StdEncoding.EncodeToString([]byte(strconv.Itoa(n))) + "-0"
}

// Readyz returns the status code of the runner's /readyz, 0 if it did not
// answer.
func (p *Process) Readyz() int {
	c := http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(p.AdminURL + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Tail is the last n bytes of s, for failure messages.
func Tail(s string, n int) string { return tail(s, n) }

// LogSinkIDs counts the log sink's lines on stdout (`sink id=... ...`),
// failing the test on any other line or on an ID written twice.
func LogSinkIDs(t testing.TB, stdout string) int {
	t.Helper()
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "sink" || !strings.HasPrefix(f[1], "id=") {
			t.Fatalf("unexpected stdout line %q", line)
		}
		if seen[f[1]] {
			t.Fatalf("%s written twice", f[1])
		}
		seen[f[1]] = true
	}
	return len(seen)
}

// PauseAndSettle writes paused: "true" into the runner's MV_CONFIG_DIR and
// waits until it reports paused with everything it read acked and the
// acked count unchanged between two looks, so its counters stand still for
// comparisons.
func (p *Process) PauseAndSettle(t testing.TB, configDir string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(configDir, "paused"), []byte("true"), 0o644); err != nil {
		t.Fatal(err)
	}
	var last int64 = -1
	WaitFor(t, 30*time.Second, "a paused, drained runner", func() bool {
		st, err := p.Status()
		if err != nil || st.State != "paused" || st.Totals.Acked != st.Totals.Read || st.Totals.Acked != last {
			if err == nil {
				last = st.Totals.Acked
			}
			time.Sleep(300 * time.Millisecond)
			return false
		}
		return true
	})
}
