package faults_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/monovertex/monovertex/internal/testutil"
)

// stdoutRunner is the runner started with its standard output on a file
// the test chose (a pipe it reads, a file on a small tmpfs), which
// testutil.StartRunner does not offer.
type stdoutRunner struct {
	cmd      *exec.Cmd
	stderr   *testutil.Buffer
	adminURL string
	done     chan struct{}
	code     int
}

func startRunnerWithStdout(t *testing.T, env map[string]string, stdout *os.File) *stdoutRunner {
	t.Helper()
	bin := testutil.BuildRunner(t)
	admin := strconv.Itoa(testutil.FreePort(t))
	r := &stdoutRunner{stderr: &testutil.Buffer{}, adminURL: "http://127.0.0.1:" + admin, done: make(chan struct{}), code: -1}
	r.cmd = exec.Command(bin)
	r.cmd.Env = append(testutil.BaseEnv(), "MV_ADMIN_PORT="+admin, "PORT="+strconv.Itoa(testutil.FreePort(t)))
	for k, v := range env {
		r.cmd.Env = append(r.cmd.Env, k+"="+v)
	}
	r.cmd.Stdout, r.cmd.Stderr = stdout, r.stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		r.cmd.Wait()
		ws := r.cmd.ProcessState.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			r.code = 128 + int(ws.Signal())
		} else {
			r.code = ws.ExitStatus()
		}
		close(r.done)
	}()
	t.Cleanup(func() {
		select {
		case <-r.done:
		default:
			r.cmd.Process.Signal(syscall.SIGCONT)
			r.cmd.Process.Kill()
			<-r.done
		}
		if t.Failed() {
			t.Logf("runner stderr (tail):\n%s", testutil.Tail(r.stderr.String(), 4000))
		}
	})
	return r
}

func (r *stdoutRunner) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-r.done:
		return r.code
	case <-time.After(d):
		t.Fatalf("runner still running after %v:\n%s", d, testutil.Tail(r.stderr.String(), 3000))
		return -1
	}
}

// readyz returns the status of /readyz and its body; 0 if it did not answer.
func (r *stdoutRunner) readyz() (int, string) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(r.adminURL + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// logEnv is the fixture's environment with the log sink in place of the
// JetStream sink.
func (f *jsFixture) logEnv() map[string]string {
	env := f.Env("faults")
	env["MV_SINK"] = "log"
	for _, k := range []string{"MV_JETSTREAM_SUBJECT", "MV_FALLBACK_JETSTREAM_SUBJECT", "MV_JETSTREAM_PUBLISH_MAX_PENDING"} {
		delete(env, k)
	}
	return env
}

// logLineIDs returns the message IDs of the complete log sink lines in
// out (a cut last line is left out), failing on a line of another shape.
func logLineIDs(t *testing.T, out string) []string {
	t.Helper()
	var ids []string
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	complete := strings.HasSuffix(out, "\n")
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if !complete && len(lines) > 0 {
		lines = lines[:len(lines)-1]
	}
	for _, l := range lines {
		rest, ok := strings.CutPrefix(l, "sink id=")
		end := strings.Index(rest, " ")
		if !ok || end < 0 || !strings.Contains(l, " value=\"") || !strings.HasSuffix(l, "\"") {
			t.Fatalf("malformed log sink line %.200q", l)
		}
		id, err := strconv.Unquote(rest[:end])
		if err != nil {
			t.Fatalf("line %.200q: %v", l, err)
		}
		ids = append(ids, id)
	}
	return ids
}

// unackedIDs drains the fixture's durable consumer after the runner
// stopped: what it delivers is exactly what was never acked. It waits
// until those plus have cover all n input messages, or fails.
func (f *jsFixture) unackedIDs(n int, have map[string]bool, timeout time.Duration) map[string]bool {
	f.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := f.JS.Consumer(ctx, inStream, consumer)
	if err != nil {
		f.T.Fatal(err)
	}
	got := map[string]bool{}
	covered := func() bool {
		for i := 1; i <= n; i++ {
			id := inStream + ":" + strconv.Itoa(i)
			if !have[id] && !got[id] {
				return false
			}
		}
		return true
	}
	idleSince := time.Now()
	for ctx.Err() == nil {
		batch, err := c.Fetch(1000, jetstream.FetchMaxWait(500*time.Millisecond))
		if err != nil {
			f.T.Fatal(err)
		}
		k := 0
		for m := range batch.Messages() {
			meta, err := m.Metadata()
			if err != nil {
				f.T.Fatal(err)
			}
			got[inStream+":"+strconv.FormatUint(meta.Sequence.Stream, 10)] = true
			m.Ack()
			k++
		}
		if k > 0 {
			idleSince = time.Now()
		}
		// Covered, and nothing more arrived for longer than the ack wait:
		// every unacked delivery has come back.
		if covered() && time.Since(idleSince) > 4*time.Second {
			return got
		}
	}
	f.T.Fatalf("the consumer did not hand back every message that is not in the output within %v", timeout)
	return nil
}
