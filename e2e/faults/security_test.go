package faults_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"net"
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

	"github.com/monovertex/monovertex/internal/testutil"
)

// The image's non-root user is checked where the image is built: see
// hack/tools (TestKoConfig: a static, non-root defaultBaseImage; the
// offline registry proof of the image config) and the runAsNonRoot,
// allowPrivilegeEscalation: false and readOnlyRootFilesystem settings in
// deploy/.

const token = "tok-4f0b1c7e9a2d"

func httpSourceEnv(extra map[string]string) map[string]string {
	env := map[string]string{
		"MV_NAME":            "secure",
		"MV_SOURCE":          "http",
		"MV_SINK":            "log",
		"MV_HTTP_AUTH_TOKEN": token,
		"MV_HTTP_MAX_BODY":   "4096",
		"MV_READ_TIMEOUT":    "50ms",
	}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

// TestHTTPSourceRejectsBadTokensAndNeverShowsTheToken checks the bearer
// token through the runner binary: missing, wrong, near-miss and
// wrong-scheme tokens are 401 and nothing of theirs is written; the right
// one is 200 once written; and the token appears nowhere: not in the logs,
// the sink's output, /status, /metrics, the answers, nor in the one line of
// a configuration error about it.
func TestHTTPSourceRejectsBadTokensAndNeverShowsTheToken(t *testing.T) {
	p := startRunner(t, httpSourceEnv(nil))
	var answers []string
	for i, auth := range []string{"", "Bearer", "Bearer ", "Bearer wrong", "Bearer " + token[:len(token)-1], "Bearer " + token + "x", "bearer " + token, "Basic " + token, token, "Bearer  " + token} {
		h := map[string]string{"X-Numaflow-Id": "bad-" + strconv.Itoa(i)}
		if auth != "" {
			h["Authorization"] = auth
		}
		code, body := testutil.Post(t, p.PortURL+"/", []byte("rejected"), h)
		if code != http.StatusUnauthorized {
			t.Fatalf("Authorization %q: %d %s, want 401", auth, code, body)
		}
		answers = append(answers, string(body))
	}
	code, body := testutil.Post(t, p.PortURL+"/", []byte("accepted"), map[string]string{"Authorization": "Bearer " + token, "X-Numaflow-Id": "good"})
	if code != http.StatusOK {
		t.Fatalf("right token: %d %s", code, body)
	}
	answers = append(answers, string(body))
	// A configuration error about the token must not print it either.
	bad := testutil.Start(t, "runner-bad-token", testutil.BuildRunner(t), httpSourceEnv(map[string]string{
		"MV_HTTP_AUTH_TOKEN": token + " spaced", "PORT": strconv.Itoa(testutil.FreePort(t)), "MV_ADMIN_PORT": strconv.Itoa(testutil.FreePort(t)),
	}))
	if code := bad.Wait(30 * time.Second); code != 2 {
		t.Fatalf("a token with a space: exit %d, want 2:\n%s", code, bad.Stderr.String())
	}
	_, status := testutil.Get(t, p.AdminURL+"/status")
	_, metrics := testutil.Get(t, p.AdminURL+"/metrics")
	if code, took := sigterm(t, p, 30*time.Second); code != 0 {
		t.Fatalf("runner exited %d after SIGTERM (%v)", code, took)
	}
	written := strings.Count(p.Stdout.String(), "\n")
	if written != 1 || strings.Contains(p.Stdout.String(), "rejected") {
		t.Fatalf("the sink wrote %d lines, want only the accepted message:\n%s", written, p.Stdout.String())
	}
	for _, c := range []struct{ where, text string }{
		{"runner stderr", p.Stderr.String()}, {"runner stdout (sink)", p.Stdout.String()},
		{"/status", string(status)}, {"/metrics", string(metrics)}, {"answers", strings.Join(answers, "\n")},
		{"configuration error", bad.Stderr.String() + bad.Stdout.String()},
	} {
		if strings.Contains(c.text, token) {
			t.Errorf("the token appears in the %s:\n%s", c.where, testutil.Tail(c.text, 2000))
		}
	}
	t.Logf("10 bad Authorization headers answered 401, the right one 200; token absent from logs, sink output, /status, /metrics, answers and the exit-2 line %q",
		strings.TrimSpace(bad.Stderr.String()))
	noRaces(t, p)
}

// TestHTTPSourceLimitsBodiesAndHeaders: a body above MV_HTTP_MAX_BODY is
// 413 whether it announces its length or not, a header block above the
// server's limit is refused, and neither is written.
func TestHTTPSourceLimitsBodiesAndHeaders(t *testing.T) {
	p := startRunner(t, httpSourceEnv(nil))
	auth := map[string]string{"Authorization": "Bearer " + token}
	if code, body := testutil.Post(t, p.PortURL+"/", bytes.Repeat([]byte("x"), 5000), auth); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("5000-byte body with Content-Length: %d %s, want 413", code, body)
	}
	// Chunked, so the length is only known by reading.
	req, _ := http.NewRequest(http.MethodPost, p.PortURL+"/", io.MultiReader(bytes.NewReader(bytes.Repeat([]byte("y"), 3000)), bytes.NewReader(bytes.Repeat([]byte("y"), 3000))))
	req.Header.Set("Authorization", "Bearer "+token)
	req.ContentLength = -1
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("6000-byte chunked body: %d, want 413", resp.StatusCode)
	}
	// A header block of 2 MiB (the server allows 1 MiB).
	conn, err := net.Dial("tcp", strings.TrimPrefix(p.PortURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	go func() {
		fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n", token)
		big := strings.Repeat("a", 8000)
		for i := 0; i < 256; i++ {
			if _, err := fmt.Fprintf(conn, "X-Big-%d: %s\r\n", i, big); err != nil {
				return
			}
		}
		fmt.Fprintf(conn, "Content-Length: 1\r\n\r\nz")
	}()
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	status, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || !strings.Contains(status, "431") {
		t.Fatalf("2 MiB of headers: %q %v, want 431", status, err)
	}
	if code, body := testutil.Post(t, p.PortURL+"/", []byte("small"), auth); code != http.StatusOK {
		t.Fatalf("a request within the limits: %d %s", code, body)
	}
	if code, took := sigterm(t, p, 30*time.Second); code != 0 {
		t.Fatalf("runner exited %d after SIGTERM (%v)", code, took)
	}
	if n := strings.Count(p.Stdout.String(), "\n"); n != 1 {
		t.Fatalf("the sink wrote %d messages, want only the one within the limits", n)
	}
	t.Logf("413 for 5000 bytes (Content-Length) and 6000 bytes (chunked) with MV_HTTP_MAX_BODY=4096; %s for 2 MiB of headers", strings.TrimSpace(status))
	noRaces(t, p)
}

// onConns opens n connections to addr and runs talk on each in a goroutine
// of its own, counted in wg; the connection is closed when talk returns.
func onConns(t *testing.T, wg *sync.WaitGroup, addr, what string, n int, talk func(conn net.Conn)) {
	t.Helper()
	for i := 0; i < n; i++ {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("%s %d: %v", what, i, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer conn.Close()
			talk(conn)
		}()
	}
}

// TestHTTPSourceSlowLorisCannotPinConnections opens many connections that
// send their headers one byte at a time, and others that stall in the
// body: the runner keeps answering ordinary requests meanwhile, answers the
// stalled bodies 408 after MV_HTTP_BODY_TIMEOUT, and closes the slow header
// connections after its read-header timeout (10s).
func TestHTTPSourceSlowLorisCannotPinConnections(t *testing.T) {
	const loris, stalled = 200, 50
	p := startRunner(t, httpSourceEnv(map[string]string{"MV_HTTP_BODY_TIMEOUT": "1s"}))
	addr := strings.TrimPrefix(p.PortURL, "http://")
	start := time.Now()
	var wg sync.WaitGroup
	closedAfter := make(chan time.Duration, loris)
	onConns(t, &wg, addr, "connection", loris, func(conn net.Conn) {
		header := "POST / HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("s", 100)
		for j := 0; j < len(header); j++ {
			if _, err := conn.Write([]byte{header[j]}); err != nil {
				closedAfter <- time.Since(start)
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
		// Never finished: the server must have closed it by now.
		closedAfter <- -1
	})
	stalledAnswers := make(chan string, stalled)
	onConns(t, &wg, addr, "stalled connection", stalled, func(conn net.Conn) {
		fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 100\r\n\r\nonly part", token)
		conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		line, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil {
			line = err.Error()
		}
		stalledAnswers <- strings.TrimSpace(line)
	})
	// Ordinary requests go through while all of those are open.
	time.Sleep(500 * time.Millisecond)
	auth := map[string]string{"Authorization": "Bearer " + token}
	for i := 0; i < 20; i++ {
		if code, body := testutil.Post(t, p.PortURL+"/", []byte("ordinary-"+strconv.Itoa(i)), auth); code != http.StatusOK {
			t.Fatalf("ordinary request %d during the slow-loris attack: %d %s", i, code, body)
		}
	}
	served := time.Since(start)
	wg.Wait()
	close(closedAfter)
	close(stalledAnswers)
	var worst time.Duration
	for d := range closedAfter {
		if d < 0 {
			t.Fatalf("a slow header connection was still open after sending 120 bytes over 24s")
		}
		worst = max(worst, d)
	}
	if worst > 15*time.Second {
		t.Fatalf("slow header connections were closed only after %v; the read-header timeout is 10s", worst)
	}
	for a := range stalledAnswers {
		if !strings.Contains(a, "408") {
			t.Fatalf("a stalled body was answered %q, want 408", a)
		}
	}
	if code, took := sigterm(t, p, 30*time.Second); code != 0 {
		t.Fatalf("runner exited %d after SIGTERM (%v)", code, took)
	}
	if n := strings.Count(p.Stdout.String(), "\n"); n != 20 {
		t.Fatalf("the sink wrote %d messages, want the 20 ordinary ones", n)
	}
	t.Logf("%d slow-header and %d stalled-body connections: 20 ordinary requests answered within %v; stalled bodies answered 408; slow headers cut within %v",
		loris, stalled, served.Round(time.Millisecond), worst.Round(time.Millisecond))
	noRaces(t, p)
}

// TestNothingWorldWritable runs the Numaflow example containers and the
// runner and checks the files and sockets they create: the runner creates
// none (it connects to the containers' sockets), and nothing the
// containers create is writable by other users. Sockets take their mode
// from the umask (the SDK does not set one), so the test runs the
// processes under the usual container umask, 022.
func TestNothingWorldWritable(t *testing.T) {
	old := syscall.Umask(0o022)
	t.Cleanup(func() { syscall.Umask(old) })
	p := newFallbackPipeline(t, 200, 7)
	p.startRunner()
	r := p.runner
	p.waitAcked(200, 60*time.Second)
	if code, took := sigterm(t, r, 30*time.Second); code != 0 {
		t.Fatalf("runner exited %d after SIGTERM (%v)", code, took)
	}
	var modes []string
	for _, dir := range []string{p.Dir, p.Work} {
		filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			info, err := os.Lstat(path)
			if err != nil {
				return nil
			}
			mode := info.Mode()
			modes = append(modes, fmt.Sprintf("%s %v", filepath.Base(path), mode))
			if path != dir && mode.Perm()&0o002 != 0 {
				t.Errorf("%s is writable by every user: %v", path, mode)
			}
			return nil
		})
	}
	t.Logf("created by the containers: %s", strings.Join(modes, ", "))
}

// TestRunnerCreatesNoFiles starts the runner in an empty working directory
// with its default settings and checks that it leaves nothing there.
func TestRunnerCreatesNoFiles(t *testing.T) {
	cwd := t.TempDir()
	cmd := exec.Command(testutil.BuildRunner(t))
	cmd.Dir = cwd
	cmd.Env = append(testutil.BaseEnv(), "PORT="+strconv.Itoa(testutil.FreePort(t)), "MV_ADMIN_PORT="+strconv.Itoa(testutil.FreePort(t)),
		"MV_GENERATOR_RPU=100", "MV_GENERATOR_TOTAL=100", "MV_SINK=blackhole")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("runner: %v\n%s", err, out)
	}
	entries, err := os.ReadDir(cwd)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) > 0 {
		t.Fatalf("the runner left %d files in its working directory, e.g. %s", len(entries), entries[0].Name())
	}
}
