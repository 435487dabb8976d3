//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly || illumos

package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockName is the lock file in a build directory.
const lockName = ".lock"

// lockDir makes dir's lock file and takes an exclusive lock on it, which
// the returned file holds. The file is locked under another name and then
// renamed, so no other binary finds it before it is locked.
func lockDir(dir string) (*os.File, error) {
	tmp := filepath.Join(dir, lockName+".new")
	f, err := os.Create(tmp)
	if err != nil {
		return nil, fmt.Errorf("build directory lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("build directory lock: flock %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, lockName)); err != nil {
		f.Close()
		return nil, fmt.Errorf("build directory lock: %w", err)
	}
	return f, nil
}

// tryLock takes f's exclusive lock if no one holds it.
func tryLock(f *os.File) bool {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil
}

// lockPort takes a port's lock file if no other process holds it.
func lockPort(f *os.File) bool { return tryLock(f) }
