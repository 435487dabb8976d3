package faults_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/monovertex/monovertex/internal/testutil"
)

// mountTmpfs mounts a tmpfs of size bytes on a fresh directory, or skips
// the test where that is not allowed (not root, no mount).
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "full")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs to fill (needs root): %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Logf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// TestLogSinkOnAFullDiskRecovers points the log sink's standard output at
// a file on a 64 KiB tmpfs, so the disk fills in the middle of the run (in
// the middle of a line). While it is full the runner must acknowledge
// nothing it has not written and report not ready; once space is freed
// (the tmpfs grows) it must recover by itself and deliver every message,
// each as one whole line.
func TestLogSinkOnAFullDiskRecovers(t *testing.T) {
	n := pick(5_000, 50_000)
	dir := mountTmpfs(t, "64k")
	f := newJS(t)
	f.PublishAll(n, 64)
	out, err := os.Create(filepath.Join(dir, "stdout.log"))
	if err != nil {
		t.Fatal(err)
	}
	env := f.logEnv()
	env["MV_READ_BATCH_SIZE"] = "100"
	r := startRunnerWithStdout(t, env, out)
	out.Close()

	// Full: not ready, and acked no more than the whole lines on the disk.
	testutil.WaitFor(t, 60*time.Second, "/readyz to report the full disk", func() bool {
		code, body := r.readyz()
		return code == 503 && strings.Contains(body, "no space left")
	})
	fullAt := time.Now()
	time.Sleep(2 * time.Second) // the runner keeps retrying meanwhile
	b, err := os.ReadFile(filepath.Join(dir, "stdout.log"))
	if err != nil {
		t.Fatal(err)
	}
	onDisk := map[string]bool{}
	for _, id := range logLineIDs(t, string(b)) {
		onDisk[id] = true
	}
	info, err := f.ConsumerInfo()
	if err != nil {
		t.Fatal(err)
	}
	acked := n - int(info.NumPending) - info.NumAckPending
	t.Logf("disk full after %d bytes: %d whole lines on disk, %d acked, %d delivered and unacked", len(b), len(onDisk), acked, info.NumAckPending)
	if acked > len(onDisk) {
		t.Fatalf("%d acked while only %d lines are on the full disk", acked, len(onDisk))
	}
	if code, body := r.readyz(); code != 503 {
		t.Fatalf("/readyz %d %q while the disk is still full", code, body)
	}

	// Free space: the runner must carry on by itself.
	if out, err := exec.Command("mount", "-o", "remount,size=64m", dir).CombinedOutput(); err != nil {
		t.Fatalf("grow the tmpfs: %v: %s", err, out)
	}
	freed := time.Now()
	testutil.WaitFor(t, 120*time.Second, "every message acked after space was freed", f.Idle)
	recovered := time.Since(freed)
	if code, body := r.readyz(); code != 200 {
		t.Fatalf("/readyz %d %q after the disk has room again", code, body)
	}
	r.cmd.Process.Signal(syscall.SIGTERM)
	if code := r.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("runner exited %d after SIGTERM", code)
	}
	b, err = os.ReadFile(filepath.Join(dir, "stdout.log"))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		t.Fatalf("the output ends in a cut line: %.100q", b[max(0, len(b)-100):])
	}
	seen := map[string]int{}
	for _, id := range logLineIDs(t, string(b)) {
		seen[id]++
	}
	lost, dups := 0, 0
	for i := 1; i <= n; i++ {
		c := seen[fmt.Sprintf("%s:%d", inStream, i)]
		if c == 0 {
			lost++
		}
		dups += max(c-1, 0)
	}
	if len(seen) > n {
		t.Fatalf("%d distinct ids in the output for %d messages", len(seen), n)
	}
	t.Logf("after space was freed: all acked in %v; %d of %d messages in the output, %d lines twice", recovered.Round(time.Millisecond), n-lost, n, dups)
	if lost > 0 {
		t.Fatalf("%d of %d messages missing from the output", lost, n)
	}
	report(t, result{
		Scenario: "log sink: disk full mid-run (64 KiB tmpfs), then space freed", Messages: n, Lost: lost,
		Duplicated: fmt.Sprintf("%d lines", dups), Recovery: round(recovered),
		Notes: fmt.Sprintf("full for %s: /readyz 503, %d acked <= %d whole lines on disk; every line whole", round(freed.Sub(fullAt)), acked, len(onDisk)),
	})
}
