package faults_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/monovertex/monovertex/internal/procstat"
	"github.com/monovertex/monovertex/internal/testutil"
)

// stillWaiting reports whether conn is open with no answer on it yet.
func stillWaiting(conn net.Conn) bool {
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	var b [1]byte
	_, err := conn.Read(b[:])
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestHTTPPinningConnectionsCannotSpendTheBudget: four connections without
// a token declare Content-Length 64 MiB and send 65,537 bytes each (the
// first buffer and one byte more), then idle. The body buffers grow with
// what arrived, so together they hold about 512 KiB of the default 256 MiB
// MV_HTTP_MAX_INFLIGHT_BYTES, not all of it: 50 ordinary POSTs sent
// meanwhile are all answered 200 and written once each (before, every one
// got 503 until MV_HTTP_BODY_TIMEOUT ended the pins).
func TestHTTPPinningConnectionsCannotSpendTheBudget(t *testing.T) {
	const pins, sent, n = 4, 65537, 50
	env := httpSourceEnv(map[string]string{"MV_HTTP_BODY_TIMEOUT": "60s"})
	delete(env, "MV_HTTP_MAX_BODY") // the default, 64 MiB: the declared lengths are allowed
	delete(env, "MV_HTTP_AUTH_TOKEN")
	p := startRunner(t, env)
	addr := strings.TrimPrefix(p.PortURL, "http://")
	conns := make([]net.Conn, pins)
	for i := range conns {
		c := claimHuge(t, addr, "", 64<<20) // sends the first byte
		if _, err := c.Write(make([]byte, sent-1)); err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	time.Sleep(500 * time.Millisecond) // the runner has taken what they sent
	start := time.Now()
	ok, other := sendValid(p.PortURL+"/", "", "legit-", n, 1024, 4)
	served := time.Since(start)
	open := 0
	for _, c := range conns {
		if stillWaiting(c) {
			open++
		}
		c.Close()
	}
	if code, took := sigterm(t, p, 30*time.Second); code != 0 {
		t.Fatalf("runner exited %d after SIGTERM (%v)", code, took)
	}
	ids := sinkIDs(t, p.Stdout.String())
	lost, dups := tally(ids, "legit-", n)
	extra := len(ids) - (n - lost)
	t.Logf("%d connections declaring 64 MiB with %d bytes sent each (%d still waiting for their bodies): %d/%d POSTs answered 200 in %v (other answers: %v); sink: %d lost, %d duplicates, %d foreign",
		pins, sent, open, ok, n, served.Round(time.Millisecond), other, lost, dups, extra)
	if ok != n {
		t.Fatalf("%d of %d POSTs answered 200 beside the pinning connections; others %v", ok, n, other)
	}
	if lost > 0 || dups > 0 || extra != 0 {
		t.Fatalf("the sink lost %d, duplicated %d and wrote %d foreign messages", lost, dups, extra)
	}
	if open != pins {
		t.Fatalf("%d of %d pinning connections were answered early; they should wait for their bodies", pins-open, pins)
	}
	noRaces(t, p)
	report(t, result{
		Scenario: "HTTP source, no token: 4 connections declare Content-Length 64 MiB and send 65,537 bytes each, then idle (default 256 MiB in-flight budget)",
		Messages: n, Lost: lost, Duplicated: strconv.Itoa(dups), Recovery: "-",
		Notes: fmt.Sprintf("all %d POSTs 200 in %s beside them (before: 503 until MV_HTTP_BODY_TIMEOUT); the 4 still waiting for their bodies", n, round(served)),
	})
}

// raiseOpenFiles lifts this process's soft limit on open files to at least
// want (within the hard limit), for tests that hold many connections.
func raiseOpenFiles(t *testing.T, want uint64) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur >= want {
		return
	}
	if lim.Max < want {
		t.Skipf("open files: hard limit %d, the test needs %d", lim.Max, want)
	}
	old := lim.Cur
	lim.Cur = want
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		lim.Cur = old
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	})
}

// TestHTTPHeaderFloodKeepsMemoryBounded: 1,000 connections each send
// 1,000 KiB of a request head that never ends (below the 1 MiB
// MV_HTTP_MAX_HEADER_BYTES, and before any token is checked). The heads
// share a budget of 16 MiB; as it fills, the largest unfinished one is
// answered 431 and closed (or 503 if those told to leave took over 2s to
// go), so the runner's RSS stays within 128 MiB of its idle figure (it
// reached 1,063 MB before; checked without -race, whose shadow memory
// multiplies it), and an ordinary request sent meanwhile is answered 200
// at once, and is the one message written.
func TestHTTPHeaderFloodKeepsMemoryBounded(t *testing.T) {
	const conns, headKiB, bound = 1000, 1000, 128 << 20
	raiseOpenFiles(t, 3*conns)
	p := startRunner(t, httpSourceEnv(nil))
	pid := p.Cmd.Process.Pid
	time.Sleep(500 * time.Millisecond)
	idle, err := procstat.RSS(pid)
	if err != nil {
		t.Fatal(err)
	}
	sampler := sampleRSS(pid, 5*time.Millisecond)
	addr := strings.TrimPrefix(p.PortURL, "http://")
	open := make([]net.Conn, 0, conns)
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	for i := 0; i < conns; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		open = append(open, c)
	}
	// Each head: a request line, then one header line of 1,000 KiB, no end.
	line := "POST / HTTP/1.1\r\nHost: x\r\nX-Hold: " + strings.Repeat("h", headKiB<<10-40)
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	fullySent, cut := 0, 0
	next := make(chan net.Conn)
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range next {
				_ = c.SetWriteDeadline(time.Now().Add(30 * time.Second))
				_, err := io.WriteString(c, line)
				mu.Lock()
				if err == nil {
					fullySent++
				} else {
					cut++
				}
				mu.Unlock()
			}
		}()
	}
	for _, c := range open {
		next <- c
	}
	close(next)
	wg.Wait()
	sentIn := time.Since(start)
	time.Sleep(500 * time.Millisecond)
	attacked, _ := procstat.RSS(pid)
	// An ordinary request while the heads that are left are held.
	reqStart := time.Now()
	code, body := testutil.Post(t, p.PortURL+"/", []byte("ordinary"), map[string]string{"Authorization": "Bearer " + token, "X-Numaflow-Id": "ordinary"})
	answeredIn := time.Since(reqStart)
	// A refused connection whose caller was still sending may be reset
	// before its 431 is read: closed either way, never answered otherwise.
	refused, busy, reset, waiting := 0, 0, 0, 0
	var otherwise []string
	for _, c := range open {
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		status, err := bufio.NewReader(c).ReadString('\n')
		switch {
		case err == nil && strings.Contains(status, "431"):
			refused++
		case err == nil && strings.Contains(status, "503"):
			// Waited for the heads told to leave longer than 2s: the
			// machine is busy; retry later.
			busy++
		case err == nil:
			otherwise = append(otherwise, status)
		case isTimeout(err):
			waiting++
		default:
			reset++
		}
	}
	top := peak(sampler.finish())
	if hwm, err := procstat.PeakRSS(pid); err == nil {
		top = max(top, hwm)
	}
	for _, c := range open {
		c.Close()
	}
	open = nil
	if code, took := sigterm(t, p, 30*time.Second); code != 0 {
		t.Fatalf("runner exited %d after SIGTERM (%v)", code, took)
	}
	ids := sinkIDs(t, p.Stdout.String())
	warned := strings.Count(p.Stderr.String(), "refused a request before reading it")
	t.Logf("%d connections each sending %d KiB of an unfinished head in %v (%d sent whole, %d cut off while sending): %d answered 431, %d answered 503, %d closed before their answer was read, %d still open and waiting; an ordinary request answered %d in %v; RSS idle %s, %s with the heads held (+%s), peak %s (+%s; bound +%s); %d refusal warnings logged; sink: %v",
		conns, headKiB, sentIn.Round(time.Millisecond), fullySent, cut, refused, busy, reset, waiting, code, answeredIn.Round(time.Millisecond),
		mib(idle), mib(attacked), mib(attacked-idle), mib(top), mib(top-idle), mib(bound), warned, ids)
	if code != http.StatusOK {
		t.Fatalf("an ordinary request during the flood: %d %s, want 200", code, body)
	}
	if len(ids) != 1 || ids["ordinary"] != 1 {
		t.Fatalf("the sink wrote %v, want the ordinary message once", ids)
	}
	if len(otherwise) > 0 {
		t.Fatalf("%d head-holding connections were answered otherwise than 431 or 503: %q", len(otherwise), otherwise[:min(len(otherwise), 5)])
	}
	if warned == 0 {
		t.Fatalf("no refusal was logged")
	}
	// The race detector's shadow memory multiplies what the churn of
	// refused heads maps, so the bound holds for the real binary only.
	if !raceBuild && top-idle > bound {
		t.Fatalf("peak RSS %s is %s above idle %s; bound %s", mib(top), mib(top-idle), mib(idle), mib(bound))
	}
	noRaces(t, p)
	report(t, result{
		Scenario: "HTTP source: 1,000 connections each send 1,000 KiB of a request head that never ends (no token needed), while an ordinary request arrives",
		Messages: 1, Lost: 0, Duplicated: "0", Recovery: "-",
		Notes: fmt.Sprintf("RSS idle %s, peak +%s (bound +128 MiB%s; 1,063 MB before); %d heads answered 431, %d answered 503 and %d closed (reset while sending) as the 16 MiB head budget filled, %d held at the end; the ordinary request 200 in %s",
			mib(idle), mib(top-idle), map[bool]string{true: ", not checked under -race", false: ""}[raceBuild], refused, busy, reset, waiting, round(answeredIn)),
	})
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestHTTPSmugglingIs400AndClosed sends requests whose framing two servers
// could read two ways (RFC 9112 section 6.3): Content-Length with
// Transfer-Encoding, with a second, authorized request hidden in the
// body; two Content-Length fields; a Transfer-Encoding other than chunked.
// Each is answered 400, its connection closed (the next read is EOF), and
// nothing of it is written; an ordinary request afterwards is.
func TestHTTPSmugglingIs400AndClosed(t *testing.T) {
	p := startRunner(t, httpSourceEnv(nil))
	addr := strings.TrimPrefix(p.PortURL, "http://")
	auth := "Authorization: Bearer " + token + "\r\n"
	smuggled := "POST / HTTP/1.1\r\nHost: x\r\n" + auth + "X-Numaflow-Id: smuggled\r\nContent-Length: 8\r\n\r\nsmuggled"
	cases := []struct{ name, request string }{
		{"Content-Length and Transfer-Encoding", "POST / HTTP/1.1\r\nHost: x\r\n" + auth + "X-Numaflow-Id: outer\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled},
		{"two Content-Length fields", "POST / HTTP/1.1\r\nHost: x\r\n" + auth + "X-Numaflow-Id: outer\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nouter" + smuggled},
		{"Transfer-Encoding identity", "POST / HTTP/1.1\r\nHost: x\r\n" + auth + "X-Numaflow-Id: outer\r\nTransfer-Encoding: identity\r\n\r\n" + smuggled},
	}
	var seen []string
	for _, c := range cases {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, c.request); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: no answer: %v", c.name, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		_, after := br.ReadByte()
		seen = append(seen, fmt.Sprintf("%s: %d then %v", c.name, resp.StatusCode, after))
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("%s: answer %d, want 400", c.name, resp.StatusCode)
		}
		if !errors.Is(after, io.EOF) {
			t.Fatalf("%s: after the 400 the connection gave %v, want EOF (closed)", c.name, after)
		}
	}
	code, body := testutil.Post(t, p.PortURL+"/", []byte("ordinary"), map[string]string{"Authorization": "Bearer " + token, "X-Numaflow-Id": "ordinary"})
	if code != http.StatusOK {
		t.Fatalf("an ordinary request after them: %d %s", code, body)
	}
	if code, took := sigterm(t, p, 30*time.Second); code != 0 {
		t.Fatalf("runner exited %d after SIGTERM (%v)", code, took)
	}
	ids := sinkIDs(t, p.Stdout.String())
	t.Logf("%s; sink: %v", strings.Join(seen, "; "), ids)
	if len(ids) != 1 || ids["ordinary"] != 1 {
		t.Fatalf("the sink wrote %v, want only the ordinary message", ids)
	}
	noRaces(t, p)
	report(t, result{
		Scenario: "HTTP source: request smuggling (Content-Length with Transfer-Encoding hiding a second authorized request; two Content-Length; Transfer-Encoding identity)",
		Messages: 1, Lost: 0, Duplicated: "0", Recovery: "-",
		Notes: "each answered 400 and its connection closed (next read EOF); nothing of them written, the ordinary request after them written once",
	})
}

// TestHTTPConnectionLimitAnswers503 holds MV_HTTP_MAX_CONNECTIONS=5 idle
// connections open: the sixth is answered 503 with Retry-After: 1 and
// closed, nothing of it written; once one of the five is gone, a request
// is answered 200 and written.
func TestHTTPConnectionLimitAnswers503(t *testing.T) {
	const limit = 5
	p := startRunner(t, httpSourceEnv(map[string]string{"MV_HTTP_MAX_CONNECTIONS": strconv.Itoa(limit)}))
	addr := strings.TrimPrefix(p.PortURL, "http://")
	held := make([]net.Conn, limit)
	for i := range held {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held[i] = c
	}
	time.Sleep(300 * time.Millisecond) // all five accepted
	extra, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	fmt.Fprintf(extra, "POST / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nX-Numaflow-Id: extra\r\nContent-Length: 5\r\n\r\nextra", token)
	_ = extra.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(extra), nil)
	if err != nil {
		t.Fatalf("connection %d: no answer: %v", limit+1, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("connection %d: %d Retry-After %q, want 503 with Retry-After: 1", limit+1, resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	held[0].Close()
	// The runner sees the close on its next read; retry as told until then.
	var code int
	var body []byte
	tries := 0
	for ; tries < 20; tries++ {
		code, body = testutil.Post(t, p.PortURL+"/", []byte("after"), map[string]string{"Authorization": "Bearer " + token, "X-Numaflow-Id": "after"})
		if code != http.StatusServiceUnavailable {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code != http.StatusOK {
		t.Fatalf("after one connection closed: %d %s", code, body)
	}
	if code, took := sigterm(t, p, 30*time.Second); code != 0 {
		t.Fatalf("runner exited %d after SIGTERM (%v)", code, took)
	}
	ids := sinkIDs(t, p.Stdout.String())
	warned := strings.Contains(p.Stderr.String(), "MV_HTTP_MAX_CONNECTIONS")
	t.Logf("%d connections held: the next answered %d (Retry-After %s); after one closed, a request answered %d after %d retries; sink %v; limit logged: %v",
		limit, resp.StatusCode, resp.Header.Get("Retry-After"), code, tries, ids, warned)
	if len(ids) != 1 || ids["after"] != 1 {
		t.Fatalf("the sink wrote %v, want only the request after the close", ids)
	}
	if !warned {
		t.Fatalf("the refused connection was not logged")
	}
	noRaces(t, p)
}
