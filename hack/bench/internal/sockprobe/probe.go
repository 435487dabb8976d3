// Package sockprobe holds what the socket probes (cmd/readvprobe,
// cmd/spliceprobe) share: the process's CPU time and vectors that a
// partial system call advanced.
package sockprobe

import (
	"syscall"
	"time"
	"unsafe"
)

// Usage is the process's CPU time (user and system) and context switches
// (voluntary and not) so far: how often a mode sleeps and wakes is part
// of its cost.
func Usage() (time.Duration, int64) {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), ru.Nvcsw + ru.Nivcsw
}

// Advance drops n bytes from the front of v.
func Advance(v []syscall.Iovec, n int) []syscall.Iovec {
	for n > 0 && len(v) > 0 {
		if int(v[0].Len) <= n {
			n -= int(v[0].Len)
			v = v[1:]
			continue
		}
		v[0].Base = (*byte)(unsafe.Add(unsafe.Pointer(v[0].Base), n))
		v[0].SetLen(int(v[0].Len) - n)
		n = 0
	}
	return v
}
