//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly || illumos

package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A build directory is removed only when no one holds its lock (or, with
// no lock file, when it is a day old); the lock of a binary that exited
// is released by the kernel, whichever PID namespace it ran in.
func TestRemoveStaleBuildDirs(t *testing.T) {
	tmp := t.TempDir()
	mk := func(name string) string {
		d := filepath.Join(tmp, name)
		if err := os.MkdirAll(filepath.Join(d, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "sub", "bin"), []byte("x"), 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	held := mk(binDirPrefix + "held")
	f, err := lockDir(held)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Locked by another process that is still running.
	other := mk(binDirPrefix + "other")
	if _, err := exec.LookPath("flock"); err == nil {
		if err := os.WriteFile(filepath.Join(other, lockName), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("flock", "-x", filepath.Join(other, lockName), "sleep", "30")
		// flock(1) runs sleep as its child, which inherits the lock: kill
		// both, as a process group.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() }()
		waitLocked(t, filepath.Join(other, lockName))
	} else {
		t.Log("no flock(1): the other process's lock is not tested")
		os.RemoveAll(other)
		other = ""
	}
	released := mk(binDirPrefix + "released")
	g, err := lockDir(released)
	if err != nil {
		t.Fatal(err)
	}
	g.Close()                         // as when its binary exits
	fresh := mk(binDirPrefix + "123") // no lock file yet, or from before them
	old := mk(binDirPrefix + "456")
	day := time.Now().Add(-25 * time.Hour)
	if err := os.Chtimes(old, day, day); err != nil {
		t.Fatal(err)
	}
	foreign := mk("someone-else")
	if err := os.Chtimes(foreign, day, day); err != nil {
		t.Fatal(err)
	}

	removeStaleBuildDirs(tmp)
	for d, kept := range map[string]bool{held: true, other: true, released: false, fresh: true, old: false, foreign: true} {
		if d == "" {
			continue
		}
		_, err := os.Stat(d)
		switch {
		case kept && err != nil:
			t.Errorf("%s: removed, want kept (%v)", filepath.Base(d), err)
		case !kept && !os.IsNotExist(err):
			t.Errorf("%s: kept, want removed (stat: %v)", filepath.Base(d), err)
		}
	}
}

// waitLocked waits until someone else holds the lock on path.
func waitLocked(t *testing.T, path string) {
	t.Helper()
	for range 200 {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		free := tryLock(f)
		f.Close()
		if !free {
			return
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatal("flock(1) did not take the lock within 5s")
}
