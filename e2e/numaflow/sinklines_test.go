package numaflow_test

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/monovertex/monovertex/internal/testutil"
)

// TestSinkWithoutLinesStillCountsEverything: example-udsink with
// EXAMPLE_LINES=none, as deploy/pull-runner/ runs it, prints no line per
// message yet checks and counts every one: its progress line and its exit
// line carry the count the runner wrote.
func TestSinkWithoutLinesStillCountsEverything(t *testing.T) {
	const total = 3_000
	x := testutil.NewExamples(t, "mvlines")
	x.StartSource(total, nil)
	sink := x.Start("example-udsink", "./cmd/example-udsink", map[string]string{
		"EXAMPLE_LINES": "none", "EXAMPLE_FALLBACK_EVERY": "0", "EXAMPLE_FAIL_EVERY": "0",
	})
	r := x.StartRunner(x.RunnerEnv(nil))
	testutil.WaitFor(t, 90*time.Second, fmt.Sprintf("all %d acked", total), func() bool {
		if len(x.ReadAcked("acked")) < total {
			time.Sleep(100 * time.Millisecond)
			return false
		}
		return true
	})
	// Its count is logged every 10 s (the first tick lands after all were
	// written here).
	progress := fmt.Sprintf("wrote %d messages so far, 0 of them not what example-udsource makes", total)
	testutil.WaitFor(t, 20*time.Second, "the sink's count in its log", func() bool {
		if !strings.Contains(sink.Stderr.String(), progress) {
			time.Sleep(200 * time.Millisecond)
			return false
		}
		return true
	})
	x.StopRunner()
	stop := testutil.StopLine(t, r.Stderr.String())
	sink.Signal(syscall.SIGTERM)
	if code := sink.Wait(30 * time.Second); code != 0 {
		t.Fatalf("example-udsink exited %d:\n%s", code, sink.Stderr.String())
	}
	want := fmt.Sprintf("stopped: wrote %d messages, 0 of them not what example-udsource makes", stop.Written)
	if stop.Written != total || !strings.Contains(sink.Stderr.String(), want) {
		t.Fatalf("runner wrote %d (want %d); the sink's log does not say %q:\n%s", stop.Written, total, want, testutil.Tail(sink.Stderr.String(), 2000))
	}
	if out := sink.Stdout.String(); out != "" {
		t.Fatalf("EXAMPLE_LINES=none printed %d bytes of lines:\n%s", len(out), testutil.Tail(out, 500))
	}
}

// TestSinkLinesSettingIsChecked: a value example-udsink does not know, or
// asking for no lines and an output file at once, ends it with a line
// naming the variable.
func TestSinkLinesSettingIsChecked(t *testing.T) {
	x := testutil.NewExamples(t, "mvlines")
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"EXAMPLE_LINES": "some"}, `invalid EXAMPLE_LINES="some"`},
		{map[string]string{"EXAMPLE_LINES": "none", "EXAMPLE_OUT_FILE": x.File("out")}, "EXAMPLE_LINES=none writes no lines, and EXAMPLE_OUT_FILE="},
	} {
		p := x.Start("example-udsink", "./cmd/example-udsink", c.env)
		if code := p.Wait(30 * time.Second); code == 0 || !strings.Contains(p.Stderr.String(), c.want) {
			t.Fatalf("%v: exit code %d, stderr %q; want a failure saying %q", c.env, code, p.Stderr.String(), c.want)
		}
	}
}
