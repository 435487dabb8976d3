package runnercmd_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/monovertex/monovertex/internal/testutil"
)

// externalModule copies hack/custom-runner, a module of its own with an
// adapter and a ten-line main calling runnercmd.Main, into a temporary
// folder pointed at this checkout, and returns it with the environment the
// go command needs there. The copy gets this module's go.sum besides its
// own and -mod=mod, so a dependency this module added since the example's
// go.mod was tidied resolves from the module cache, offline, not through a
// stale file.
func externalModule(t *testing.T) (dir string, env []string) {
	t.Helper()
	root := testutil.ModuleRoot(t)
	src := filepath.Join(root, "hack", "custom-runner")
	dir = filepath.Join(t.TempDir(), "custom-runner")
	if err := os.CopyFS(dir, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "go.sum"), os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(sum); err != nil {
		t.Fatal(err)
	}
	f.Close()
	env = []string{"GOFLAGS=" + strings.TrimSpace(os.Getenv("GOFLAGS")+" -mod=mod"), "GOWORK=off"}
	goCmd(t, dir, env, "mod", "edit", "-replace", "github.com/monovertex/monovertex="+root)
	return dir, env
}

func goCmd(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}

// TestMainRunsAnAdapterFromAnotherModule is docs/writing-an-adapter.md's
// path, walked: the sequence source of hack/custom-runner, a package
// outside this module, passes the source conformance suite and, built into
// a runner by its ten-line main, is selected with MV_SOURCE, refuses a bad
// setting with exit 2 and one line, and delivers every message it reads to
// the log sink exactly once.
func TestMainRunsAnAdapterFromAnotherModule(t *testing.T) {
	dir, env := externalModule(t)

	testArgs := []string{"test", "-count=1"}
	if testutil.Race() {
		testArgs = append(testArgs, "-race")
	}
	out := goCmd(t, dir, env, append(testArgs, "-v", "./sequence/")...)
	if passed := strings.Count(out, "--- PASS: TestConformance/"); !strings.Contains(out, "--- PASS: TestConformance ") || passed < 10 {
		t.Fatalf("conformance suite: %d checks passed, want the whole suite (10 or more):\n%s", passed, out)
	}
	if strings.Contains(out, "--- SKIP") {
		t.Fatalf("conformance suite skipped checks:\n%s", out)
	}

	bin := testutil.BuildIn(t, dir, ".", env...)

	t.Run("a bad setting of the adapter exits 2 with one line", func(t *testing.T) {
		p := testutil.StartRunnerBinary(t, bin, map[string]string{"MV_SOURCE": "sequence", "MV_SEQUENCE_COUNT": "0"})
		if code := p.Wait(30 * time.Second); code != 2 {
			t.Fatalf("exit code %d, want 2\n%s", code, p.Stderr.String())
		}
		if got, want := p.Stderr.String(), "runner: invalid MV_SEQUENCE_COUNT=\"0\": must be 1 or more\n"; got != want {
			t.Fatalf("stderr %q, want %q", got, want)
		}
	})

	const n = 5000
	p := testutil.StartRunnerBinary(t, bin, map[string]string{
		"MV_SOURCE": "sequence", "MV_SEQUENCE_COUNT": strconv.Itoa(n), "MV_SEQUENCE_PREFIX": "ext",
		"MV_SINK": "log", "MV_READ_BATCH_SIZE": "100",
	})
	// The source ends after n messages, and the runner with it.
	if code := p.Wait(60 * time.Second); code != 0 {
		t.Fatalf("exit code %d, want 0 once the source ended\n%s", code, p.Stderr.String())
	}
	values := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^sink id=\S+ .* value="(ext-\d+)"$`).FindAllStringSubmatch(p.Stdout.String(), -1) {
		values[m[1]]++
	}
	for i := range n {
		if c := values["ext-"+strconv.Itoa(i)]; c != 1 {
			t.Fatalf("ext-%d written %d times, want once", i, c)
		}
	}
	lines := testutil.LogSinkIDs(t, p.Stdout.String())
	l := testutil.StopLine(t, p.Stderr.String())
	if len(values) != n || lines != n || l.Read != n || l.Acked != n || l.Written != n || l.Nacked != 0 || l.Dropped != 0 {
		t.Fatalf("%d distinct values and %d sink lines; read %d acked %d written %d nacked %d dropped %d; want %d each and none nacked or dropped",
			len(values), lines, l.Read, l.Acked, l.Written, l.Nacked, l.Dropped, n)
	}
	t.Logf("sequence source in a runner built outside the module: read = acked = written = log sink lines = %d", n)
}
