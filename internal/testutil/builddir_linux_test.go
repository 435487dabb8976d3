package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

func TestRemoveStaleBuildDirs(t *testing.T) {
	tmp := t.TempDir()
	exited := exec.Command("true")
	if err := exited.Run(); err != nil {
		t.Fatal(err)
	}
	dead := exited.Process.Pid
	names := map[string]bool{ // name -> kept
		binDirPrefix + strconv.Itoa(dead) + "-123":         false,
		binDirPrefix + strconv.Itoa(os.Getppid()) + "-456": true, // go test, still running
		binDirPrefix + strconv.Itoa(os.Getpid()) + "-789":  true, // this test binary
		"monovertex-bin-123456789":                         true, // an older name without a process ID
		binDirPrefix + "x-1":                               true, // not a process ID
		"other-" + strconv.Itoa(dead):                      true, // someone else's
	}
	for name := range names {
		if err := os.MkdirAll(filepath.Join(tmp, name, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tmp, name, "sub", "bin"), []byte("x"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	removeStaleBuildDirs(tmp)
	for name, kept := range names {
		_, err := os.Stat(filepath.Join(tmp, name))
		switch {
		case kept && err != nil:
			t.Errorf("%s: removed, want kept (%v)", name, err)
		case !kept && !os.IsNotExist(err):
			t.Errorf("%s: kept, want removed (stat: %v)", name, err)
		}
	}
}
