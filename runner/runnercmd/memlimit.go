package runnercmd

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// memLimitShare is the part of the container's memory limit given to the Go
// heap as its soft limit: the rest covers what the heap limit does not
// count (goroutine stacks are counted, but not the kernel's socket buffers
// or page cache charged to the container), so the runner collects garbage
// harder before the kernel's OOM killer gets to it.
const memLimitShare = 0.9

// setMemoryLimit gives the Go runtime a soft memory limit of
// memLimitShare of the container's cgroup memory limit when the user did
// not set GOMEMLIMIT, and returns the log fields that say which limit
// holds. Without it the heap may grow to twice the live payloads (GOGC=100)
// before a collection, which with megabyte payloads in flight can cross a
// pod's limit. It logs nothing itself: it runs before the settings are all
// checked, and a runner refusing its settings prints one line only; the
// fields go on the "runner started" line.
func setMemoryLimit() []any {
	if v, ok := os.LookupEnv("GOMEMLIMIT"); ok {
		return []any{"go_memory_limit_bytes", debug.SetMemoryLimit(-1), "go_memory_limit_from", "GOMEMLIMIT=" + v}
	}
	v2, v1 := readCgroupPaths("/proc/self/cgroup")
	limit, file, ok := cgroupMemoryLimit("/", v2, v1)
	if !ok {
		return []any{"go_memory_limit_from", "none: no container memory limit found and GOMEMLIMIT unset"}
	}
	soft := int64(float64(limit) * memLimitShare)
	debug.SetMemoryLimit(soft)
	return []any{"go_memory_limit_bytes", soft, "go_memory_limit_from", fmt.Sprintf("%v of the container limit %d in %s (set GOMEMLIMIT to choose another)", memLimitShare, limit, file)}
}

// readCgroupPaths returns the cgroup paths of /proc/self/cgroup's lines:
// the v2 one ("0::/path") and the v1 memory controller's.
func readCgroupPaths(file string) (v2, v1memory string) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", ""
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			v2 = parts[2]
		case strings.Contains(","+parts[1]+",", ",memory,"):
			v1memory = parts[2]
		}
	}
	return v2, v1memory
}

// cgroupMemoryLimit finds the smallest memory limit of the process's
// cgroup and its ancestors under root (the file system root outside
// tests), cgroup v2 first, then v1. In a container the cgroup namespace
// usually makes the process's cgroup the root of /sys/fs/cgroup, so the
// root's own files are tried too.
func cgroupMemoryLimit(root string, v2, v1memory string) (limit int64, file string, ok bool) {
	try := func(base, name, path string) {
		for dir := filepath.Join(base, path); ; dir = filepath.Dir(dir) {
			f := filepath.Join(dir, name)
			if n, good := readLimit(f); good && (!ok || n < limit) {
				limit, file, ok = n, f, true
			}
			if dir == base || !strings.HasPrefix(dir, base) {
				return
			}
		}
	}
	v2base := filepath.Join(root, "sys/fs/cgroup")
	if _, err := os.Stat(filepath.Join(v2base, "cgroup.controllers")); err == nil {
		try(v2base, "memory.max", v2)
		if ok {
			return limit, file, true
		}
	}
	try(filepath.Join(root, "sys/fs/cgroup/memory"), "memory.limit_in_bytes", v1memory)
	return limit, file, ok
}

// readLimit reads a memory limit file: "max" (v2) and the v1 "unlimited"
// value (about 2^63 rounded to a page) count as no limit.
func readLimit(file string) (int64, bool) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, false
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n >= math.MaxInt64/2 {
		return 0, false
	}
	return n, true
}
