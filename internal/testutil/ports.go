package testutil

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// FreePort returns a TCP port that is free on every interface and that no
// other test process of this machine will hand out while this one runs.
//
// A port the kernel picked for a listener that was then closed is free
// only until something else takes it, and under CI's parallel packages
// something does: an outgoing connection's ephemeral port, or the same
// pick in another test binary, and the runner then exits with "address
// already in use". So the port comes from below the kernel's ephemeral
// range, where connections never take one, and a lock file per port,
// held until this process exits, keeps test binaries from sharing it.
func FreePort(t testing.TB) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	lo, hi := portRange()
	port, err := pickPort(lo, hi, 2000)
	if err != nil {
		t.Fatal(err)
	}
	return port
}

var (
	portsMu sync.Mutex
	given   = map[int]*os.File{} // ports handed out, with their lock; nil: another process holds or listens on it
)

// portRange is where FreePort picks, outside this machine's ephemeral
// range.
func portRange() (lo, hi int) {
	elo, ehi := 32768, 60999 // Linux's default
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			a, err1 := strconv.Atoi(f[0])
			z, err2 := strconv.Atoi(f[1])
			if err1 == nil && err2 == nil && a <= z {
				elo, ehi = a, z
			}
		}
	}
	return portRangeOutside(elo, ehi)
}

// portRangeOutside is the larger of the ranges below (from 10000) and
// above the ephemeral range [elo, ehi].
func portRangeOutside(elo, ehi int) (lo, hi int) {
	if below, above := elo-10000, 65535-ehi; below >= above && below > 0 {
		return 10000, elo - 1
	} else if above > 0 {
		return ehi + 1, 65535
	}
	return 1024, 65535 // no room outside it: the locks still keep test binaries apart
}

// pickPort tries up to tries random ports in [lo, hi] and returns the
// first that no one here or in another test process holds and that binds
// on every interface (as the runner's listeners do).
func pickPort(lo, hi, tries int) (int, error) {
	// One directory per user: another user's would not let this one
	// create its lock files.
	dir := filepath.Join(os.TempDir(), "monovertex-test-ports-"+strconv.Itoa(os.Getuid()))
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	for range tries {
		port := lo + rand.IntN(hi-lo+1)
		if _, ok := given[port]; ok {
			continue
		}
		f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			return 0, fmt.Errorf("free port: %w", err)
		}
		if !lockPort(f) {
			// Another test process holds it; skip it from now on too.
			f.Close()
			given[port] = nil
			continue
		}
		ln, err := net.Listen("tcp", ":"+strconv.Itoa(port))
		if err != nil {
			// Some other program listens there; skip it from now on.
			f.Close()
			given[port] = nil
			continue
		}
		given[port] = f // held until the process exits
		ln.Close()
		return port, nil
	}
	return 0, fmt.Errorf("free port: no free port in %d-%d after %d tries", lo, hi, tries)
}
