package faults_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/monovertex/monovertex/internal/testutil"
)

// TestLogSinkIntoAClosedPipe is `runner | head -1`: the log sink's reader
// takes one line and goes away. The runner must not die of SIGPIPE (exit
// 141, no drain) but stop with 0 or 1, and acknowledge nothing it did not
// write. To know exactly what was written, the test stops the runner
// (SIGSTOP), reads everything the pipe still holds, closes it, and lets
// the runner go on (SIGCONT); then it drains the durable consumer: what it
// hands back is what was never acked, and everything else must be among
// the lines read.
func TestLogSinkIntoAClosedPipe(t *testing.T) {
	n := pick(20_000, 100_000)
	f := newJS(t)
	f.PublishAll(n, 32)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r := startRunnerWithStdout(t, f.logEnv(), pw)
	pw.Close()
	br := bufio.NewReader(pr)
	first, err := br.ReadString('\n')
	if err != nil {
		t.Fatalf("first line: %v", err)
	}
	// head -1 exits here. Freeze the runner, take what the pipe holds,
	// close the read end, and let the runner write into the closed pipe.
	r.cmd.Process.Signal(syscall.SIGSTOP)
	time.Sleep(100 * time.Millisecond)
	pr.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	rest, _ := io.ReadAll(br)
	pr.Close()
	closed := time.Now()
	r.cmd.Process.Signal(syscall.SIGCONT)
	code := r.wait(t, 30*time.Second)
	took := time.Since(closed)
	stderr := r.stderr.String()
	if code != 0 && code != 1 {
		t.Fatalf("runner exited %d after its output pipe closed, want 0 or 1", code)
	}
	if !strings.Contains(stderr, "broken pipe") {
		t.Errorf("the runner's log does not say why it stopped (broken pipe):\n%s", testutil.Tail(stderr, 2000))
	}
	stop := testutil.StopLine(t, stderr)
	written := map[string]bool{}
	for _, id := range logLineIDs(t, first+string(rest)) {
		written[id] = true
	}
	unacked := f.unackedIDs(n, written, 120*time.Second)
	ackedUnwritten, ackedIDs := 0, 0
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("%s:%d", inStream, i)
		if unacked[id] {
			continue
		}
		ackedIDs++
		if !written[id] {
			ackedUnwritten++
		}
	}
	t.Logf("exit %d %v after the pipe closed; %d lines reached the pipe, %d acked (runner says read %d acked %d), %d handed back unacked",
		code, took.Round(time.Millisecond), len(written), ackedIDs, stop.Read, stop.Acked, len(unacked))
	if ackedUnwritten > 0 {
		t.Fatalf("%d messages acked whose lines never reached the pipe", ackedUnwritten)
	}
	if int64(ackedIDs) < stop.Acked {
		t.Fatalf("the runner says it acked %d, the consumer shows %d acked", stop.Acked, ackedIDs)
	}
	report(t, result{
		Scenario: "log sink into a closed pipe (runner | head -1), JetStream source", Messages: n, Lost: 0,
		Duplicated: fmt.Sprintf("%d written and redelivered", len(written)-ackedIDs),
		Recovery:   fmt.Sprintf("exit %d after %s", code, round(took)),
		Notes:      fmt.Sprintf("%d lines reached the pipe, %d acked, none acked unwritten; the rest redelivered", len(written), ackedIDs),
	})
}
