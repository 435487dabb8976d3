package http

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/monovertex/monovertex/runner"
)

// expectRefusedAndClosed reads one answer on conn, wants status, and then
// wants the connection closed (EOF), not kept for another request.
func expectRefusedAndClosed(t *testing.T, conn net.Conn, status int, what string) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("%s: no answer: %v", what, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != status {
		t.Fatalf("%s: answer %d, want %d", what, resp.StatusCode, status)
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("%s: after the answer the connection gave %v, want EOF", what, err)
	}
}

func TestAmbiguousFramingIs400AndClosesTheConnection(t *testing.T) {
	src, url := start(t, testConfig())
	smuggled := "POST / HTTP/1.1\r\nHost: x\r\nX-Numaflow-Id: smuggled\r\nContent-Length: 1\r\n\r\nS"
	for _, c := range []struct{ name, head, body string }{
		{"Content-Length and Transfer-Encoding", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked", "0\r\n\r\n" + smuggled},
		{"Transfer-Encoding before Content-Length", "POST / HTTP/1.1\r\nHost: x\r\ntransfer-encoding: chunked\r\ncontent-length: 0", "0\r\n\r\n" + smuggled},
		{"two Content-Length fields of one value", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 1", "x" + smuggled},
		{"two Content-Length fields", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 60", "x" + smuggled},
		{"a Content-Length list", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1, 1", "x" + smuggled},
		{"a signed Content-Length", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +1", "x" + smuggled},
		{"a Content-Length that is not a number", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0x1", "x" + smuggled},
		{"Transfer-Encoding gzip", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip", "x"},
		{"Transfer-Encoding gzip, chunked", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked", "0\r\n\r\n" + smuggled},
		{"two Transfer-Encoding fields", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked", "0\r\n\r\n" + smuggled},
		{"Transfer-Encoding on HTTP/1.0", "POST / HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked", "0\r\n\r\n" + smuggled},
		{"a folded header line", "POST / HTTP/1.1\r\nHost: x\r\nX-A: a\r\n Transfer-Encoding: chunked\r\nContent-Length: 1", "x" + smuggled},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn := rawRequest(t, url, c.head, c.body)
			expectRefusedAndClosed(t, conn, http.StatusBadRequest, c.name)
		})
	}
	if p, _ := src.Pending(context.Background()); p != 0 {
		t.Fatalf("%d messages were queued from refused requests", p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if msgs, _ := src.Read(ctx, 10, 100*time.Millisecond); len(msgs) != 0 {
		t.Fatalf("read %d messages from refused requests, first %q", len(msgs), msgs[0].ID)
	}
}

func TestPipelinedRequestsWithClearFramingAreAllServed(t *testing.T) {
	src, url := start(t, testConfig())
	// A plain one, then a chunked one: the chunked one is the last this
	// connection serves, and says so.
	conn := rawRequest(t, url, "POST / HTTP/1.1\r\nHost: x\r\nX-Numaflow-Id: a\r\nContent-Length: 1\r\n\r\nA"+
		"POST / HTTP/1.1\r\nHost: x\r\nX-Numaflow-Id: b\r\nTransfer-Encoding: chunked", "1\r\nB\r\n0\r\n\r\n")
	br := bufio.NewReader(conn)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for _, want := range []string{"a", "b"} {
		m := readN(t, src, 1)[0]
		if m.ID != want {
			t.Fatalf("read %q, want %q", m.ID, want)
		}
		if err := src.Ack(context.Background(), []*runner.Message{m}); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("answer to %s: %v", want, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Close != (want == "b") {
			t.Fatalf("answer to %s: %d close %v", want, resp.StatusCode, resp.Close)
		}
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the chunked request: %v, want EOF", err)
	}
}

func TestAHeadAboveTheLimitIs431(t *testing.T) {
	cfg := testConfig()
	cfg.MaxHeader = MinHeaderLimit
	src, url := start(t, cfg)
	conn := rawRequest(t, url, "POST / HTTP/1.1\r\nHost: x\r\nX-Big: "+strings.Repeat("b", MinHeaderLimit), "")
	expectRefusedAndClosed(t, conn, http.StatusRequestHeaderFieldsTooLarge, "a head of 4 KiB and more")
	// Just within it: served.
	ch := post(url, http.Header{"X-Big": {strings.Repeat("b", MinHeaderLimit-200)}}, "x")
	ackOK(t, src, readN(t, src, 1), ch, "a head just within the limit")
}

func TestTheLargestUnfinishedHeadYieldsTheBudget(t *testing.T) {
	cfg := testConfig()
	cfg.MaxHeader = 64 << 10
	src, url := start(t, cfg)
	src.guard.mu.Lock()
	src.guard.headBudget = 256 << 10
	src.guard.mu.Unlock()
	// Eight unfinished heads of 48 KiB each: more than the budget holds.
	const hogs = 8
	conns := make([]net.Conn, hogs)
	for i := range conns {
		c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nX-Hog: "+strings.Repeat("h", 48<<10)); err != nil {
			t.Fatal(err)
		}
		conns[i] = c
		time.Sleep(20 * time.Millisecond)
	}
	// Small requests still fit, beside whatever is left of them.
	for i := 0; i < 5; i++ {
		ch := post(url, nil, "small")
		ackOK(t, src, readN(t, src, 1), ch, "a small request beside the hogs")
	}
	refused := 0
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err == nil && strings.Contains(line, "431") {
			refused++
		}
	}
	src.guard.mu.Lock()
	used, budget := src.guard.used, src.guard.headBudget
	src.guard.mu.Unlock()
	t.Logf("%d unfinished heads of 48 KiB against a 256 KiB budget: %d answered 431; heads hold %d bytes", hogs, refused, used)
	if refused < hogs-256/64 || used > budget {
		t.Fatalf("%d of %d hogs answered 431, heads hold %d of %d bytes; want the budget kept", refused, hogs, used, budget)
	}
}

func TestConnectionsAboveTheLimitAre503(t *testing.T) {
	cfg := testConfig()
	cfg.MaxConns = 3
	src, url := start(t, cfg)
	idle := make([]net.Conn, 3)
	for i := range idle {
		c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		idle[i] = c
		defer c.Close()
	}
	time.Sleep(100 * time.Millisecond) // accepted
	conn := rawRequest(t, url, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1", "x")
	resp := readResponse(t, conn, 10*time.Second)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("a fourth connection: %d Retry-After %q, want 503 with Retry-After: 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	idle[0].Close()
	// The server notices the close when it reads; then a slot is free.
	for attempt := 0; ; attempt++ {
		ch := post(url, nil, "after")
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		msgs, _ := src.Read(ctx, 1, 500*time.Millisecond)
		cancel()
		if len(msgs) == 1 {
			ackOK(t, src, msgs, ch, "a request once a connection closed")
			break
		}
		if r := await(t, ch); r.status != http.StatusServiceUnavailable || attempt == 20 {
			t.Fatalf("attempt %d after a connection closed: %d %v", attempt, r.status, r.err)
		}
	}
}
