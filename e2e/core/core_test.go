// Package core_test runs the runner binary end to end with its built-in
// adapters: shutdown, configuration errors, metrics.
package core_test

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/monovertex/monovertex/internal/testutil"
)

func TestSIGTERMMidStreamDrainsAcksAndExitsZero(t *testing.T) {
	p := testutil.StartRunner(t, map[string]string{
		"MV_GENERATOR_RPU":      "20000",
		"MV_GENERATOR_DURATION": "1s",
		"MV_GENERATOR_MSG_SIZE": "256",
		"MV_READ_BATCH_SIZE":    "200",
		"MV_SHUTDOWN_TIMEOUT":   "10s",
	})
	p.WaitReady(30 * time.Second)
	testutil.WaitFor(t, 30*time.Second, "messages flowing", func() bool {
		st, err := p.Status()
		return err == nil && st.Totals.Acked > 2000
	})
	sent := time.Now()
	p.Signal(syscall.SIGTERM)
	code := p.Wait(15 * time.Second)
	took := time.Since(sent)
	if code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0\n%s", code, p.Stderr.String())
	}
	if took > 10*time.Second {
		t.Fatalf("shutdown took %v, budget 10s", took)
	}
	l := testutil.StopLine(t, p.Stderr.String())
	lines := testutil.LogSinkIDs(t, p.Stdout.String())
	if l.Read == 0 || l.Acked != l.Read || l.Written != l.Acked || int64(lines) != l.Written || l.Nacked != 0 {
		t.Fatalf("after SIGTERM: read %d acked %d written %d nacked %d, sink lines %d; want read = acked = written = lines",
			l.Read, l.Acked, l.Written, l.Nacked, lines)
	}
	t.Logf("drained in %v: read = acked = written = %d", took, l.Acked)
}

func TestBadConfigurationExitsTwoWithOneLine(t *testing.T) {
	bin := testutil.BuildRunner(t)
	for _, tc := range []struct {
		env  map[string]string
		want string // the line must name this variable and value
	}{
		{map[string]string{"MV_SOURCE": "kafkaa"}, `MV_SOURCE="kafkaa"`},
		{map[string]string{"MV_SINK": "nowhere"}, `MV_SINK="nowhere"`},
		{map[string]string{"MV_TRANSFORMER": "magic"}, `MV_TRANSFORMER="magic"`},
		{map[string]string{"MV_FALLBACK_SINK": "void"}, `MV_FALLBACK_SINK="void"`},
		{map[string]string{"MV_READ_BATCH_SIZE": "0"}, `MV_READ_BATCH_SIZE="0"`},
		{map[string]string{"MV_READ_BATCH_SIZE": "-5"}, `MV_READ_BATCH_SIZE="-5"`},
		{map[string]string{"MV_READ_BATCH_SIZE": "many"}, `MV_READ_BATCH_SIZE="many"`},
		{map[string]string{"MV_READ_TIMEOUT": "soon"}, `MV_READ_TIMEOUT="soon"`},
		{map[string]string{"MV_READ_TIMEOUT": "0s"}, `MV_READ_TIMEOUT="0s"`},
		{map[string]string{"MV_SHUTDOWN_TIMEOUT": "20"}, `MV_SHUTDOWN_TIMEOUT="20"`},
		{map[string]string{"MV_RETRY_INTERVAL": "1 ms"}, `MV_RETRY_INTERVAL="1 ms"`},
		{map[string]string{"MV_RETRY_STEPS": "0"}, `MV_RETRY_STEPS="0"`},
		{map[string]string{"MV_RETRY_STEPS": "forever"}, `MV_RETRY_STEPS="forever"`},
		{map[string]string{"MV_RETRY_FACTOR": "0.5"}, `MV_RETRY_FACTOR="0.5"`},
		{map[string]string{"MV_RETRY_JITTER": "2"}, `MV_RETRY_JITTER="2"`},
		{map[string]string{"MV_RETRY_CAP": "-1s"}, `MV_RETRY_CAP="-1s"`},
		{map[string]string{"MV_ON_FAILURE": "ignore"}, `MV_ON_FAILURE="ignore"`},
		{map[string]string{"MV_ON_FAILURE": "fallback"}, `MV_ON_FAILURE="fallback"`},
		{map[string]string{"MV_ADMIN_PORT": "70000"}, `MV_ADMIN_PORT="70000"`},
		{map[string]string{"MV_ADMIN_PORT": "9090"}, `MV_ADMIN_PORT="9090"`},
		{map[string]string{"PORT": "http"}, `PORT="http"`},
		{map[string]string{"MV_REPLICA": "-1"}, `MV_REPLICA="-1"`},
		{map[string]string{"MV_NAME": ""}, `MV_NAME=""`},
		{map[string]string{"MV_INFLIGHT_BATCHES": "0"}, `MV_INFLIGHT_BATCHES="0"`},
		{map[string]string{"MV_LOOKBACK_SECONDS": "3600"}, `MV_LOOKBACK_SECONDS="3600"`},
		{map[string]string{"MV_LOG_LEVEL": "loud"}, `MV_LOG_LEVEL="loud"`},
		{map[string]string{"MV_PPROF": "sure"}, `MV_PPROF="sure"`},
		{map[string]string{"MV_GENERATOR_RPU": "0"}, `MV_GENERATOR_RPU="0"`},
		{map[string]string{"MV_GENERATOR_DURATION": "fast"}, `MV_GENERATOR_DURATION="fast"`},
		{map[string]string{"MV_GENERATOR_MSG_SIZE": "-1"}, `MV_GENERATOR_MSG_SIZE="-1"`},
		{map[string]string{"MV_GENERATOR_VALUE": "abc"}, `MV_GENERATOR_VALUE="abc"`},
		// Bounds and exact reading (issue 16): a size that would take the
		// pod's memory, numbers envconfig would read another way, a name
		// Prometheus cannot label with, a typo'd variable.
		{map[string]string{"MV_NAME": "bad\xffname"}, `MV_NAME="bad\xffname"`},
		{map[string]string{"MV_GENERATOR_MSG_SIZE": "8000000000"}, `MV_GENERATOR_MSG_SIZE="8000000000"`},
		{map[string]string{"MV_READ_BATCH_SIZE": "1000000000"}, `MV_READ_BATCH_SIZE="1000000000"`},
		{map[string]string{"MV_READ_BATCH_SIZE": "1e7"}, `MV_READ_BATCH_SIZE="1e7"`},
		{map[string]string{"MV_INFLIGHT_BATCHES": "100000"}, `MV_INFLIGHT_BATCHES="100000"`},
		{map[string]string{"MV_CONCURRENCY": "-1"}, `MV_CONCURRENCY="-1"`},
		{map[string]string{"MV_MESSAGE_IDS": "Numaflow"}, `MV_MESSAGE_IDS="Numaflow": must be source or numaflow`},
		{map[string]string{"PORT": "010000"}, `PORT="010000"`},
		{map[string]string{"PORT": "0x4e20"}, `PORT="0x4e20"`},
		{map[string]string{"PORT": "1_8084"}, `PORT="1_8084"`},
		{map[string]string{"MV_RETRY_FACTOR": "NaN"}, `MV_RETRY_FACTOR="NaN"`},
		{map[string]string{"MV_RETRY_JITTER": "Inf"}, `MV_RETRY_JITTER="Inf"`},
		{map[string]string{"MV_SCALE_TARGET_SECONDS": "NaN"}, `MV_SCALE_TARGET_SECONDS="NaN"`},
		{map[string]string{"MV_RETRY_STEP": "3"}, `MV_RETRY_STEP="3": is not a setting of this runner; did you mean MV_RETRY_STEPS?`},
		{map[string]string{"MV_UDF": "udtransformer"}, `MV_UDF="udtransformer"`},
		{map[string]string{"MV_TRANSFORMER": "udmap"}, `MV_TRANSFORMER="udmap"`},
		{map[string]string{"MV_TRANSFORMER": "cloudevents"}, `MV_TRANSFORMER_URL="": required with MV_TRANSFORMER=cloudevents`},
		{map[string]string{"MV_UDF": "cloudevents"}, `MV_TRANSFORMER_URL="": required with MV_UDF=cloudevents`},
		{map[string]string{"MV_BYPASS_FALLBACK": "or:bad"}, `MV_BYPASS_FALLBACK="or:bad"`},
		{map[string]string{"MV_BYPASS_SINK": "maybe:x"}, `MV_BYPASS_SINK="maybe:x"`},
		{map[string]string{"MV_ON_SUCCESS_SINK": "void"}, `MV_ON_SUCCESS_SINK="void"`},
		{map[string]string{"MV_SINK": "udsink", "MV_UDF_TRANSPORT": "grpc"}, `MV_UDF_TRANSPORT="grpc"`},
		// In-process stages (issue 43): an expression that does not parse
		// is named with the position of its first error.
		{map[string]string{"MV_FILTER": "type = 'a' AND ("}, `MV_FILTER="type = 'a' AND (": CESQL syntax error at column 17`},
		{map[string]string{"MV_FILTER": "type == 'a'"}, `MV_FILTER="type == 'a'": CESQL syntax error at column 7`},
		{map[string]string{"MV_FILTERS": `[{"any":[{"cesql":"source ="}]}]`}, `filters[0].any[0].cesql: CESQL syntax error at column 9`},
		{map[string]string{"MV_FILTERS": `[{"exact":{"type":"a"},"prefix":{"type":"b"}}]`}, `filters[0]: multiple dialects found`},
		{map[string]string{"MV_FILTER": "true", "MV_FILTER_POSITION": "middle"}, `MV_FILTER_POSITION="middle": must be before or after`},
		{map[string]string{"MV_TRANSFORMER": "jsonata", "MV_JSONATA_EXPRESSION": `{"a": data.x +}`}, `MV_JSONATA_EXPRESSION="{\"a\": data.x +}": JSONata syntax error at column 15`},
		{map[string]string{"MV_TRANSFORMER": "jsonata"}, `MV_JSONATA_EXPRESSION="": required with jsonata`},
		{map[string]string{"MV_TRANSFORMER": "jsonata", "MV_JSONATA_EXPRESSION_FILE": "/nonexistent/expr"}, `MV_JSONATA_EXPRESSION_FILE="/nonexistent/expr": cannot be read`},
	} {
		name := strings.Join(keys(tc.env), ",")
		t.Run(name+"="+tc.env[keys(tc.env)[0]], func(t *testing.T) {
			cmd := exec.Command(bin)
			cmd.Env = append(testutil.BaseEnv(), "PORT="+strconv.Itoa(testutil.FreePort(t)), "MV_ADMIN_PORT="+strconv.Itoa(testutil.FreePort(t)))
			for k, v := range tc.env {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			done := make(chan error, 1)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { done <- cmd.Wait() }()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				cmd.Process.Kill()
				t.Fatalf("runner kept running with a bad configuration")
			}
			if code := cmd.ProcessState.ExitCode(); code != 2 {
				t.Fatalf("exit code %d, want 2; stderr:\n%s", code, stderr.String())
			}
			lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
			if len(lines) != 1 {
				t.Fatalf("stderr has %d lines, want exactly one:\n%s", len(lines), stderr.String())
			}
			if !strings.Contains(lines[0], tc.want) || strings.Contains(lines[0], "panic") || strings.Contains(lines[0], "goroutine") {
				t.Fatalf("stderr %q does not name %s", lines[0], tc.want)
			}
			if stdout.Len() != 0 {
				t.Fatalf("stdout not empty: %q", stdout.String())
			}
		})
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestHelpListsEveryVariableWithItsDefault(t *testing.T) {
	help := exec.Command(testutil.BuildRunner(t), "--help")
	help.Env = testutil.BaseEnv()
	out, err := help.CombinedOutput()
	if err != nil {
		t.Fatalf("--help: %v\n%s", err, out)
	}
	for _, want := range []string{
		`MV_NAME\s+local\s`, `MV_SOURCE\s+generator\s`, `MV_TRANSFORMER\s+none\s`, `MV_SINK\s+log\s`, `MV_FALLBACK_SINK\s+none\s`,
		`MV_READ_BATCH_SIZE\s+500\s`, `MV_READ_TIMEOUT\s+1s\s`, `MV_RETRY_INTERVAL\s+1ms\s`, `MV_RETRY_STEPS\s+unlimited\s`,
		`MV_RETRY_FACTOR\s+1.0\s`, `MV_RETRY_CAP\s+0\s`, `MV_RETRY_JITTER\s+0\s`, `MV_ON_FAILURE\s+retry\s`,
		`MV_SHUTDOWN_TIMEOUT\s+20s\s`, `MV_ADMIN_PORT\s+2469\s`, `\sPORT\s+8080\s`, `MV_GENERATOR_RPU\s+5\s`,
		`MV_GENERATOR_DURATION\s+1s\s`, `MV_GENERATOR_MSG_SIZE\s+8\s`, `MV_GENERATOR_KEY_COUNT\s+0\s`,
		`MV_GENERATOR_VALUE\s+\(none\)\s`, `MV_CONFIG_DIR\s`, `MV_LOOKBACK_SECONDS\s+120\s`,
		// Each transformer slot offers only the kinds it accepts.
		`\n  MV_TRANSFORMER: none, cloudevents, jsonata, udtransformer\n`, `\n  MV_UDF: none, cloudevents, jsonata, udmap\n`,
		`MV_FILTER\s+\(none\)\s`, `MV_FILTER_POSITION\s+before\s`, `MV_HTTP_RESPONSE\s+ack\s`,
	} {
		if !regexp.MustCompile(want).Match(out) {
			t.Errorf("--help lacks %s", want)
		}
	}
}

// metricValue finds name{...mvtx_name="n",mvtx_replica="r"...} value.
func metricValue(t *testing.T, body, name, mvtx, replica string) float64 {
	t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\{([^}]*)\} (\S+)$`)
	for _, m := range re.FindAllStringSubmatch(body, -1) {
		if strings.Contains(m[1], `mvtx_name="`+mvtx+`"`) && strings.Contains(m[1], `mvtx_replica="`+replica+`"`) {
			v, err := strconv.ParseFloat(m[2], 64)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return v
		}
	}
	t.Fatalf("metric %s with mvtx_name=%q mvtx_replica=%q not found", name, mvtx, replica)
	return 0
}

func TestMetricsCarryNumaflowNamesLabelsAndTheRunsCounts(t *testing.T) {
	dir := t.TempDir()
	p := testutil.StartRunner(t, map[string]string{
		"MV_NAME":               "orders",
		"MV_REPLICA":            "3",
		"MV_GENERATOR_RPU":      "500",
		"MV_GENERATOR_DURATION": "100ms",
		"MV_GENERATOR_MSG_SIZE": "100",
		"MV_READ_BATCH_SIZE":    "50",
		"MV_CONFIG_DIR":         dir,
		"MV_CONFIG_POLL":        "100ms",
	})
	p.WaitReady(30 * time.Second)
	testutil.WaitFor(t, 30*time.Second, "messages flowing", func() bool {
		st, err := p.Status()
		return err == nil && st.Totals.Acked > 1000 && st.Rate["1m"] > 0
	})
	// Pause, so the counters stand still while they are compared.
	p.PauseAndSettle(t, dir)
	st, err := p.Status()
	if err != nil {
		t.Fatal(err)
	}
	code, body := testutil.Get(t, p.AdminURL+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics answered %d", code)
	}
	m := string(body)
	lines := testutil.LogSinkIDs(t, p.Stdout.String())
	n := float64(st.Totals.Acked)
	for _, c := range []struct {
		name string
		want float64
	}{
		{"monovtx_read_total", n},
		{"monovtx_ack_total", n},
		{"monovtx_sink_write_total", float64(lines)},
		{"monovtx_read_bytes_total", float64(st.Totals.ReadBytes)},
		{"monovtx_nack_total", 0},
		{"monovtx_dropped_total", 0},
		{"monovtx_transformer_dropped_total", 0},
		{"monovtx_sink_write_errors_total", 0},
		{"monovtx_sink_dropped_total", 0},
		{"monovtx_fallback_sink_write_total", 0},
		{"monovtx_pending_raw", -1}, // the generator does not know its pending
		{"build_info", 1},
	} {
		if got := metricValue(t, m, c.name, "orders", "3"); got != c.want {
			t.Errorf("%s = %v, want %v", c.name, got, c.want)
		}
	}
	// The generator names no partitions: numaflow-core labels its reads
	// with the replica.
	if !strings.Contains(m, `monovtx_read_total{mvtx_name="orders",mvtx_replica="3",source_partition="3"} `) {
		t.Errorf("monovtx_read_total has no series of source_partition=\"3\" (the replica)")
	}
	// The last read's size, as Numaflow's: at most MV_READ_BATCH_SIZE.
	if b := metricValue(t, m, "monovtx_read_batch_size", "orders", "3"); b < 0 || b > 50 {
		t.Errorf("monovtx_read_batch_size = %v, want the last read's, 0 to 50", b)
	}
	if st.Totals.ReadBytes != int64(n)*100 {
		t.Errorf("read bytes %d, want %d x 100", st.Totals.ReadBytes, int64(n))
	}
	for _, h := range []string{"monovtx_processing_time", "monovtx_read_time", "monovtx_ack_time", "monovtx_sink_time"} {
		if c := metricValue(t, m, h+"_count", "orders", "3"); c == 0 {
			t.Errorf("%s has no observations", h)
		}
	}
	for _, h := range []string{"monovtx_transformer_time", "monovtx_fallback_sink_time"} {
		if c := metricValue(t, m, h+"_count", "orders", "3"); c != 0 {
			t.Errorf("%s has %v observations without a transformer or fallback sink", h, c)
		}
	}
	// Histograms are in microseconds: a local batch takes far less than 10s
	// and more than 0, so the mean must lie between.
	if sum, cnt := metricValue(t, m, "monovtx_ack_time_sum", "orders", "3"), metricValue(t, m, "monovtx_ack_time_count", "orders", "3"); sum/cnt <= 0 || sum/cnt > 10e6 {
		t.Errorf("mean ack time %v µs is not a plausible microsecond figure", sum/cnt)
	}
	if st.Rate["1m"] <= 0 {
		t.Errorf("processing rate %v, want > 0", st.Rate)
	}
	// Resume: reading goes on.
	if err := os.WriteFile(filepath.Join(dir, "paused"), []byte("false"), 0o644); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 30*time.Second, "reading to resume", func() bool {
		s, err := p.Status()
		return err == nil && s.State == "running" && s.Totals.Acked > st.Totals.Acked
	})
	for _, path := range []string{"/livez", "/readyz"} {
		if code, _ := testutil.Get(t, p.AdminURL+path); code != 200 {
			t.Errorf("%s answered %d", path, code)
		}
	}
	if code, _ := testutil.Get(t, p.PortURL+"/healthz"); code != 200 {
		t.Errorf("/healthz on $PORT answered %d", code)
	}
}

func TestPortInUseExitsTwoWithOneLine(t *testing.T) {
	bin := testutil.BuildRunner(t)
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	cmd := exec.Command(bin)
	cmd.Env = append(testutil.BaseEnv(), "PORT="+port, "MV_ADMIN_PORT="+strconv.Itoa(testutil.FreePort(t)))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err = cmd.Run()
	lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
	if code := cmd.ProcessState.ExitCode(); code != 2 || len(lines) != 1 || !strings.Contains(lines[0], `PORT="`+port+`"`) {
		t.Fatalf("exit %d (%v), stderr %q: want 2 and one line naming PORT", code, err, stderr.String())
	}
}

// TestSignals: SIGHUP drains like SIGTERM (exit 0, read = acked = written);
// SIGQUIT dumps the goroutines and exits 131, not the 2 of a bad setting.
func TestSignals(t *testing.T) {
	for _, tc := range []struct {
		sig      syscall.Signal
		wantCode int
	}{{syscall.SIGHUP, 0}, {syscall.SIGQUIT, 131}} {
		t.Run(tc.sig.String(), func(t *testing.T) {
			p := testutil.StartRunner(t, map[string]string{"MV_GENERATOR_RPU": "2000", "MV_GENERATOR_DURATION": "100ms"})
			p.WaitReady(30 * time.Second)
			testutil.WaitFor(t, 30*time.Second, "messages acked", func() bool {
				st, err := p.Status()
				return err == nil && st.Totals.Acked > 100
			})
			p.Signal(tc.sig)
			code := p.Wait(30 * time.Second)
			if code != tc.wantCode {
				t.Fatalf("exit %d after %v, want %d; stderr tail:\n%s", code, tc.sig, tc.wantCode, tailOf(p.Stderr.String(), 2000))
			}
			if tc.sig == syscall.SIGQUIT {
				if !strings.Contains(p.Stderr.String(), "goroutine ") {
					t.Fatal("SIGQUIT printed no goroutine dump")
				}
				return
			}
			l := testutil.StopLine(t, p.Stderr.String())
			if l.Read == 0 || l.Acked != l.Read || l.Written != l.Acked || int64(testutil.LogSinkIDs(t, p.Stdout.String())) != l.Written {
				t.Fatalf("after SIGHUP: read %d acked %d written %d; want all equal to the sink's lines", l.Read, l.Acked, l.Written)
			}
		})
	}
}

func tailOf(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// TestMissingConfigDirWarnsAndRuns: an MV_CONFIG_DIR that is not there yet
// (a ConfigMap not mounted) is said once in the log; the runner runs, not
// paused, and would pick the key up once the folder appears.
func TestMissingConfigDirWarnsAndRuns(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "not-mounted")
	p := testutil.StartRunner(t, map[string]string{"MV_CONFIG_DIR": missing, "MV_GENERATOR_RPU": "100", "MV_GENERATOR_DURATION": "100ms"})
	p.WaitReady(30 * time.Second)
	testutil.WaitFor(t, 30*time.Second, "messages acked while the folder is missing", func() bool {
		st, err := p.Status()
		return err == nil && st.Totals.Acked > 10 && !st.Paused
	})
	if n := strings.Count(p.Stderr.String(), "MV_CONFIG_DIR is not a readable folder"); n != 1 {
		t.Fatalf("the missing MV_CONFIG_DIR was reported %d times, want once:\n%s", n, tailOf(p.Stderr.String(), 2000))
	}
	if err := os.MkdirAll(missing, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(missing, "paused"), []byte("true"), 0o644); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 30*time.Second, "paused once the folder holds paused: true", func() bool {
		st, err := p.Status()
		return err == nil && st.Paused
	})
	p.Stop(30 * time.Second)
}

// TestProbesAnswerWithOneCPUUnderLoad runs the runner binary as a pod with
// a one-CPU limit runs it (GOMAXPROCS=1), with a source that never blocks
// (an unthrottled generator into blackhole), and probes its admin port
// while it moves messages. Without the read loop's yield the read loop and
// the batch goroutines kept the one P for seconds and /status answered
// after 4-10 s (hack/bench/RESULTS.md as of ed9d394); a kubelet probe times out after 1 s
// by default. The bound here is a generous liveness bound, not a speed
// assertion: every probe must answer within 10 s, and the runner must be
// acking between probes, so the probes really ran under load.
func TestProbesAnswerWithOneCPUUnderLoad(t *testing.T) {
	p := testutil.StartRunner(t, map[string]string{
		"GOMAXPROCS":            "1",
		"MV_NAME":               "onecpu",
		"MV_LOG_LEVEL":          "warn",
		"MV_SOURCE":             "generator",
		"MV_GENERATOR_RPU":      "10000000", // the generator's most: reads never block
		"MV_GENERATOR_DURATION": "1s",
		"MV_SINK":               "blackhole",
	})
	p.WaitReady(time.Minute)
	client := &http.Client{Timeout: 10 * time.Second}
	var lastAcked int64 = -1
	for i := range 6 {
		time.Sleep(300 * time.Millisecond)
		for _, path := range []string{"/livez", "/readyz", "/metrics"} {
			start := time.Now()
			resp, err := client.Get(p.AdminURL + path)
			if err != nil {
				t.Fatalf("probe %d: GET %s with GOMAXPROCS=1 under load: %v (after %v)", i, path, err, time.Since(start))
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("probe %d: GET %s answered %s", i, path, resp.Status)
			}
		}
		st, err := p.Status()
		if err != nil {
			t.Fatalf("probe %d: /status with GOMAXPROCS=1 under load: %v", i, err)
		}
		acked := st.Totals.Acked
		if acked <= lastAcked {
			t.Fatalf("probe %d: acked %d, not more than %d at the probe before: the runner was not under load", i, acked, lastAcked)
		}
		lastAcked = acked
	}
}
