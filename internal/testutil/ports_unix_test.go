//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly || illumos

package testutil

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// FreePort's ports lie outside the kernel's ephemeral range, are distinct,
// and bind on every interface.
func TestFreePortOutsideEphemeralRange(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Skip("no /proc/sys/net/ipv4/ip_local_port_range")
	}
	f := strings.Fields(string(b))
	elo, _ := strconv.Atoi(f[0])
	ehi, _ := strconv.Atoi(f[1])
	seen := map[int]bool{}
	for range 20 {
		p := FreePort(t)
		if p >= elo && p <= ehi {
			t.Fatalf("port %d is inside the ephemeral range %d-%d", p, elo, ehi)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		ln, err := net.Listen("tcp", ":"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d does not bind: %v", p, err)
		}
		ln.Close()
	}
}

// A port another test process holds (its lock file) or another program
// listens on is skipped; once both let go it is handed out.
func TestPickPortSkipsHeldPorts(t *testing.T) {
	portsMu.Lock()
	defer portsMu.Unlock()
	lo, hi := portRange()
	p, err := pickPort(lo, hi, 2000)
	if err != nil {
		t.Fatal(err)
	}
	release := func() {
		if f := given[p]; f != nil {
			f.Close()
		}
		delete(given, p)
	}
	release()

	// Another process's lock: a second open file description of the same
	// lock file conflicts with flock as another process's would.
	other, err := os.OpenFile(filepath.Join(os.TempDir(), "monovertex-test-ports-"+strconv.Itoa(os.Getuid()), strconv.Itoa(p)), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !lockPort(other) {
		t.Fatalf("could not take port %d's lock", p)
	}
	if got, err := pickPort(p, p, 3); err == nil {
		t.Fatalf("port %d handed out while another process holds its lock", got)
	}
	other.Close()
	release()

	ln, err := net.Listen("tcp", ":"+strconv.Itoa(p))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := pickPort(p, p, 3); err == nil {
		t.Fatalf("port %d handed out while something listens on it", got)
	}
	ln.Close()
	release()

	if got, err := pickPort(p, p, 3); err != nil || got != p {
		t.Fatalf("pickPort(%d, %d) = %d, %v; want %d", p, p, got, err, p)
	}
}

// FreePort picks from the larger room outside the ephemeral range, and
// from everywhere when there is none.
func TestPortRangeOutside(t *testing.T) {
	for _, c := range []struct{ elo, ehi, lo, hi int }{
		{32768, 60999, 10000, 32767}, // Linux's default: below
		{12000, 60999, 61000, 65535}, // more room above
		{10000, 40000, 40001, 65535}, // none below
		{1024, 65535, 1024, 65535},   // no room outside: everywhere
		{49152, 65535, 10000, 49151}, // Windows' and macOS' range
	} {
		if lo, hi := portRangeOutside(c.elo, c.ehi); lo != c.lo || hi != c.hi {
			t.Errorf("portRangeOutside(%d, %d) = %d-%d; want %d-%d", c.elo, c.ehi, lo, hi, c.lo, c.hi)
		}
	}
}
