package http

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/monovertex/monovertex/adapters/internal/cewire"
	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/runnertest"
)

// rawRequest opens a connection and sends head (the request line and
// headers, without the blank line) and then body.
func rawRequest(t *testing.T, url, head, body string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := fmt.Fprintf(conn, "%s\r\n\r\n%s", head, body); err != nil {
		t.Fatal(err)
	}
	return conn
}

func readResponse(t *testing.T, conn net.Conn, within time.Duration) *http.Response {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(within))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer within %v: %v", within, err)
	}
	resp.Body.Close()
	return resp
}

func waitUsed(t *testing.T, src *Source, cond func(int64) bool, what string) int64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		u := src.budget.Used()
		if cond(u) {
			return u
		}
		if time.Now().After(deadline) {
			t.Fatalf("budget holds %d bytes, want %s", u, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestAClaimedLengthReservesNoMoreThanTheFirstBuffer(t *testing.T) {
	cfg := testConfig()
	cfg.MaxBody = 64 << 20
	src, url := start(t, cfg)
	const conns = 10
	for i := 0; i < conns; i++ {
		rawRequest(t, url, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 67108864", "x")
	}
	used := waitUsed(t, src, func(u int64) bool { return u >= conns*presizeLimit }, "every connection's first buffer")
	time.Sleep(200 * time.Millisecond)
	if used = src.budget.Used(); used > conns*presizeLimit {
		t.Fatalf("%d connections that claim 64 MiB and sent 1 byte hold %d bytes; want at most %d each", conns, used, presizeLimit)
	}
	if p, _ := src.Pending(context.Background()); p != 0 {
		t.Fatalf("%d incomplete bodies were queued", p)
	}
}

func TestUnauthenticatedRequestsAreAnsweredBeforeTheirBody(t *testing.T) {
	cfg := testConfig()
	cfg.AuthToken = "s3cret"
	cfg.MaxBody = 64 << 20
	src, url := start(t, cfg)
	// Claims 64 MiB, sends none of it, and waits for an answer.
	conn := rawRequest(t, url, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 67108864", "")
	resp := readResponse(t, conn, 5*time.Second)
	if resp.StatusCode != http.StatusUnauthorized || !resp.Close {
		t.Fatalf("answer %d (close %v), want 401 and the connection closed", resp.StatusCode, resp.Close)
	}
	// Chunked, with no end: the server must not drain it either.
	conn = rawRequest(t, url, "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked", "1\r\nx\r\n")
	if resp := readResponse(t, conn, 5*time.Second); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("chunked: answer %d, want 401", resp.StatusCode)
	}
	if u := src.budget.Used(); u != 0 {
		t.Fatalf("unauthenticated requests hold %d bytes of the budget", u)
	}
}

func TestRefusalsWithoutReadingCloseTheConnection(t *testing.T) {
	cfg := testConfig()
	cfg.MaxBody = 1024
	_, url := start(t, cfg)
	for _, c := range []struct {
		name, head string
		want       int
	}{
		{"claimed length above the limit", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000", http.StatusRequestEntityTooLarge},
		{"other vertex", "POST /vertices/other HTTP/1.1\r\nHost: x\r\nContent-Length: 1000", http.StatusNotFound},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn := rawRequest(t, url, c.head, "")
			if resp := readResponse(t, conn, 5*time.Second); resp.StatusCode != c.want || !resp.Close {
				t.Fatalf("answer %d (close %v), want %d and close", resp.StatusCode, resp.Close, c.want)
			}
		})
	}
}

func TestBodiesOfEverySizeArriveWhole(t *testing.T) {
	cfg := testConfig()
	cfg.MaxBody = 300 << 10
	src, url := start(t, cfg)
	for _, n := range []int{0, 1, firstChunk - 1, firstChunk, firstChunk + 1, presizeLimit, presizeLimit + 1, 200 << 10, 300 << 10} {
		for _, chunked := range []bool{false, true} {
			body := bytes.Repeat([]byte("0123456789abcdef"), n/16+1)[:n]
			length := int64(len(body))
			if chunked {
				length = -1
			}
			ch := do(http.DefaultClient, url, nil, bytes.NewReader(body), length)
			m := readN(t, src, 1)[0]
			if !bytes.Equal(m.Value, body) {
				t.Fatalf("%d bytes (chunked %v): value of %d bytes differs", n, chunked, len(m.Value))
			}
			if u := src.budget.Used(); u < int64(len(body)) || u > 2*int64(len(body))+firstChunk {
				t.Fatalf("%d bytes (chunked %v): budget holds %d", n, chunked, u)
			}
			_ = src.Ack(context.Background(), []*runner.Message{m})
			if r := await(t, ch); r.status != http.StatusOK {
				t.Fatalf("%d bytes (chunked %v): %d", n, chunked, r.status)
			}
			waitUsed(t, src, func(u int64) bool { return u == 0 }, "0 once answered")
		}
	}
	// One byte above the limit, with and without a length.
	big := strings.Repeat("x", 300<<10+1)
	if r := await(t, post(url, nil, big)); r.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("above the limit: %d", r.status)
	}
	if r := await(t, postChunked(url, big)); r.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked above the limit: %d", r.status)
	}
	waitUsed(t, src, func(u int64) bool { return u == 0 }, "0 after refusals")
}

func TestSpentBudgetIs503WithRetryAfter(t *testing.T) {
	cfg := testConfig()
	cfg.MaxBody = 8 << 10
	cfg.MaxInflight = 8 << 10
	src, url := start(t, cfg)
	held := post(url, hdr(HeaderID, "held"), strings.Repeat("h", 8<<10))
	waitPending(t, src, 1)
	begin := time.Now()
	conn := rawRequest(t, url, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5", "hello")
	resp := readResponse(t, conn, 10*time.Second)
	waited := time.Since(begin)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("with the budget spent: %d Retry-After %q, want 503 with Retry-After: 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if waited < admissionWait/2 {
		t.Fatalf("answered after %v; a request should wait about %v for the budget", waited, admissionWait)
	}
	// Freed by the answer, the budget takes the next request at once.
	ackOK(t, src, readN(t, src, 1), held, "held request")
	ch := post(url, nil, "next")
	ackOK(t, src, readN(t, src, 1), ch, "after the budget was freed")
}

func TestABodyWaitingForTheBudgetIsTakenWhenItFrees(t *testing.T) {
	cfg := testConfig()
	cfg.MaxBody = 8 << 10
	cfg.MaxInflight = 8 << 10
	src, url := start(t, cfg)
	// The request must still be waiting when the budget frees: give it
	// far longer than the steps below take on a busy machine.
	src.admissionWait = 30 * time.Second
	held := post(url, hdr(HeaderID, "held"), strings.Repeat("h", 8<<10))
	waitPending(t, src, 1)
	waiting := post(url, hdr(HeaderID, "waiting"), "w")
	time.Sleep(250 * time.Millisecond)
	_ = src.Ack(context.Background(), readN(t, src, 1))
	await(t, held)
	m := readN(t, src, 1)
	_ = src.Ack(context.Background(), m)
	if r := await(t, waiting); r.status != http.StatusOK || r.body.ID != "waiting" {
		t.Fatalf("request that waited for the budget: %d %+v", r.status, r.body)
	}
}

func TestFullBufferAnswersRetryAfter(t *testing.T) {
	cfg := testConfig()
	cfg.BufferSize = 1
	src, url := start(t, cfg)
	first := post(url, nil, "x")
	waitPending(t, src, 1)
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader("y"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("full buffer: %d Retry-After %q, want 429 with Retry-After: 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	_ = src.Ack(context.Background(), readN(t, src, 1))
	await(t, first)
}

func TestStrictCloudEventsAre400(t *testing.T) {
	src, url := expect400(t, []badRequest{
		{"binary event without specversion", hdr("Ce-Id", "1", "Ce-Source", "/s", "Ce-Type", "t"), "x", "Ce-Specversion"},
		{"only ce-id", hdr("Ce-Id", "1"), "x", "Ce-Specversion"},
		{"only ce-type", hdr("Ce-Type", "t", HeaderID, "n"), "x", "Ce-Specversion"},
		{"batch with ids that differ by a space", hdr("Content-Type", cewire.BatchContentType),
			`[{"specversion":"1.0","id":" sp","source":"/s","type":"t"},{"specversion":"1.0","id":"sp","source":"/s","type":"t"}]`, "white space"},
		{"structured id ending in a tab", hdr("Content-Type", "application/cloudevents+json"),
			`{"specversion":"1.0","id":"sp\t","source":"/s","type":"t"}`, "white space"},
	})
	// A plain body with unrelated ce-like headers is still plain.
	ch := post(url, hdr("Ce-Other", "v", HeaderID, "plain"), "x")
	ackOK(t, src, readN(t, src, 1), ch, "plain body with Ce-Other")
}

func TestSizeAndTokenSettingsAreBounded(t *testing.T) {
	runnertest.ConfigErrors(t, testConfig(), runner.RoleSource, []runnertest.ConfigCase[Config]{
		{Name: "8 GiB body", Edit: func(c *Config) { c.MaxBody = 8 << 30; c.MaxInflight = 16 << 30 }, Var: "MV_HTTP_MAX_BODY"},
		{Name: "body one byte above 1 GiB", Edit: func(c *Config) { c.MaxBody = MaxBodyLimit + 1; c.MaxInflight = 4 << 30 }, Var: "MV_HTTP_MAX_BODY"},
		{Name: "no in-flight budget", Edit: func(c *Config) { c.MaxInflight = 0 }, Var: "MV_HTTP_MAX_INFLIGHT_BYTES"},
		{Name: "in-flight budget above 64 GiB", Edit: func(c *Config) { c.MaxInflight = MaxInflightLimit + 1 }, Var: "MV_HTTP_MAX_INFLIGHT_BYTES"},
		{Name: "in-flight budget below the largest body", Edit: func(c *Config) { c.MaxInflight = c.MaxBody - 1 }, Var: "MV_HTTP_MAX_INFLIGHT_BYTES"},
		{Name: "head limit below 4 KiB", Edit: func(c *Config) { c.MaxHeader = MinHeaderLimit - 1 }, Var: "MV_HTTP_MAX_HEADER_BYTES"},
		{Name: "head limit above 16 MiB", Edit: func(c *Config) { c.MaxHeader = MaxHeaderLimit + 1 }, Var: "MV_HTTP_MAX_HEADER_BYTES"},
		{Name: "no connections", Edit: func(c *Config) { c.MaxConns = 0 }, Var: "MV_HTTP_MAX_CONNECTIONS"},
		{Name: "negative connections", Edit: func(c *Config) { c.MaxConns = -1 }, Var: "MV_HTTP_MAX_CONNECTIONS"},
		{Name: "connections above the limit", Edit: func(c *Config) { c.MaxConns = MaxConnsLimit + 1 }, Var: "MV_HTTP_MAX_CONNECTIONS"},
		{Name: "token with NUL", Edit: func(c *Config) { c.AuthToken = "tok\x00en" }, Var: "MV_HTTP_AUTH_TOKEN"},
		{Name: "token with escape", Edit: func(c *Config) { c.AuthToken = "tok\x1b[0m" }, Var: "MV_HTTP_AUTH_TOKEN"},
		{Name: "token with DEL", Edit: func(c *Config) { c.AuthToken = "tok\x7f" }, Var: "MV_HTTP_AUTH_TOKEN"},
		{Name: "token with a C1 control", Edit: func(c *Config) { c.AuthToken = "tok\u0085en" }, Var: "MV_HTTP_AUTH_TOKEN"},
		{Name: "token not UTF-8", Edit: func(c *Config) { c.AuthToken = "tok\xffen" }, Var: "MV_HTTP_AUTH_TOKEN"},
		{Name: "token with a no-break space", Edit: func(c *Config) { c.AuthToken = "tok\u00a0en" }, Var: "MV_HTTP_AUTH_TOKEN"},
	}, tokenHidden)
	for _, ok := range []Config{
		{MaxBody: MaxBodyLimit, MaxInflight: MaxInflightLimit, BufferSize: 1, BodyTimeout: time.Second, AuthToken: "abc-DEF_123.~+/=", MaxHeader: MaxHeaderLimit, MaxConns: MaxConnsLimit},
		{MaxBody: 1, MaxInflight: 1, BufferSize: 1, BodyTimeout: time.Second, AuthToken: "ключ", MaxHeader: MinHeaderLimit, MaxConns: 1},
	} {
		if err := ok.Validate(runner.RoleSource); err != nil {
			t.Errorf("%+v: %v", strconv.Quote(ok.AuthToken), err)
		}
	}
}
