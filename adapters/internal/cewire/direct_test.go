package cewire

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
)

// directClient is a client of url whose direct path counts its dials.
func directClient(t *testing.T, url string, o ClientOptions) (*Client, *atomic.Int32) {
	t.Helper()
	o.URL, o.Mode = url, ModeBinary
	c := NewClient(o)
	if c.direct == nil {
		t.Fatalf("no direct path to %s", url)
	}
	var dials atomic.Int32
	dial := c.direct.dial
	c.direct.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return dial(ctx, network, addr)
	}
	t.Cleanup(c.CloseIdle)
	return c, &dials
}

// smallEvent is event i with a payload of n bytes that names it.
func smallEvent(i, n int) *event.Event {
	ev := event.New()
	ev.SetID(fmt.Sprintf("e-%d", i))
	ev.SetSource("s")
	ev.SetType("t")
	data := []byte(strings.Repeat(fmt.Sprintf("%d.", i), n)[:n])
	ev.DataEncoded = data
	ev.SetDataContentType("application/octet-stream")
	return &ev
}

// echo answers each event with its body.
func echo(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/octet-stream")
	_, _ = w.Write(b)
}

// postEcho posts event i to an echo function and fails t unless the answer
// is its payload.
func postEcho(t *testing.T, c *Client, i int) {
	t.Helper()
	ev := smallEvent(i, 1000)
	resp, err := c.Post(context.Background(), ev, true)
	if err != nil {
		t.Fatalf("post %d: %v", i, err)
	}
	if resp.Status != http.StatusOK || string(resp.Body) != string(ev.Data()) {
		t.Fatalf("post %d: status %d, body %q", i, resp.Status, resp.Body)
	}
}

// postsAnsweredOK posts n small events, pausing after each, and fails t
// unless each is answered 200 with the body "ok".
func postsAnsweredOK(t *testing.T, c *Client, n int, pause time.Duration) {
	t.Helper()
	for i := range n {
		resp, err := c.Post(context.Background(), smallEvent(i, 10), true)
		if err != nil || resp.Status != http.StatusOK || string(resp.Body) != "ok" {
			t.Fatalf("post %d: %v, %+v", i, err, resp)
		}
		time.Sleep(pause)
	}
}

// echoesOverDials posts n events to an echo function and fails t unless
// the direct path dialled want times for them (why says why).
func echoesOverDials(t *testing.T, c *Client, dials *atomic.Int32, n int, want int32, why string) {
	t.Helper()
	for i := range n {
		postEcho(t, c, i)
	}
	if got := dials.Load(); got != want {
		t.Fatalf("%d dials for %d posts, want %d: %s", got, n, want, why)
	}
}

func TestDirectKeepsItsConnectionsAlive(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(echo))
	defer srv.Close()
	c, dials := directClient(t, srv.URL, ClientOptions{Concurrency: 4})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 50 {
				postEcho(t, c, g*100+i)
			}
		})
	}
	wg.Wait()
	if n := dials.Load(); n < 1 || n > 4 {
		t.Fatalf("%d dials for 200 posts from 4 goroutines; want at most one per goroutine", n)
	}
}

func TestDirectChunkedAnswersKeepTheConnection(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		// Two flushes: the answer goes out chunked, without a length.
		_, _ = w.Write(b[:10])
		w.(http.Flusher).Flush()
		_, _ = w.Write(b[10:])
	}))
	defer srv.Close()
	c, dials := directClient(t, srv.URL, ClientOptions{Concurrency: 1})
	echoesOverDials(t, c, dials, 5, 1, "chunked answers keep the connection")
}

func TestDirectDoesNotUseAConnectionThePeerClosedWhileIdle(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(echo))
	srv.Config.IdleTimeout = 20 * time.Millisecond
	srv.Start()
	defer srv.Close()
	c, dials := directClient(t, srv.URL, ClientOptions{Concurrency: 1})
	for i := range 3 {
		postEcho(t, c, i)
		time.Sleep(staleAfter + 100*time.Millisecond) // the server closes it meanwhile
	}
	if n := dials.Load(); n != 3 {
		t.Fatalf("%d dials, want 3: one per post, each after the server closed the last", n)
	}
}

func TestDirectDialsAgainAfterConnectionClose(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		echo(w, r)
	}))
	defer srv.Close()
	c, dials := directClient(t, srv.URL, ClientOptions{Concurrency: 1})
	echoesOverDials(t, c, dials, 5, 5, "every answer closed its connection")
}

func TestDirectDropsAConnectionWhoseAnswerWasNotReadToItsEnd(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			// More than Post drains of an error answer.
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write(make([]byte, 256<<10))
			return
		}
		echo(w, r)
	}))
	defer srv.Close()
	c, dials := directClient(t, srv.URL, ClientOptions{Concurrency: 1})
	resp, err := c.Post(context.Background(), smallEvent(0, 100), true)
	if err != nil || resp.Status != http.StatusServiceUnavailable {
		t.Fatalf("first post: %v, %+v", err, resp)
	}
	postEcho(t, c, 1)
	if n := dials.Load(); n != 2 {
		t.Fatalf("%d dials, want 2: the first answer's rest stayed unread", n)
	}
}

// rawServer serves each connection with answer, which reads the request
// from br and writes what it likes to conn.
func rawServer(t *testing.T, answer func(conn net.Conn, br *bufio.Reader)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer conn.Close()
				br := bufio.NewReader(conn)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					answer(conn, br)
				}
			})
		}
	})
	return "http://" + ln.Addr().String() + "/"
}

// TestDirectKeepsOrDropsConnectionsAsTheAnswersSay checks that interim
// (1xx) answers are skipped on a connection that is kept, and that a
// connection whose peer sent bytes past its answer unasked is dropped.
func TestDirectKeepsOrDropsConnectionsAsTheAnswersSay(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer string
		posts  int
		dials  int32
	}{
		{"interim answers skipped", "HTTP/1.1 100 Continue\r\n\r\n" +
			"HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n" +
			"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 3, 1},
		{"bytes sent unasked", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n", 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := rawServer(t, func(conn net.Conn, _ *bufio.Reader) {
				_, _ = io.WriteString(conn, tc.answer)
			})
			c, dials := directClient(t, url, ClientOptions{Concurrency: 1})
			postsAnsweredOK(t, c, tc.posts, 0)
			if n := dials.Load(); n != tc.dials {
				t.Fatalf("%d dials, want %d", n, tc.dials)
			}
		})
	}
}

func TestDirectRefusesAnEndlessHeader(t *testing.T) {
	url := rawServer(t, func(conn net.Conn, _ *bufio.Reader) {
		_, _ = io.WriteString(conn, "HTTP/1.1 200 OK\r\nX-Long: ")
		chunk := strings.Repeat("x", 64<<10)
		for range 2 * maxAnswerHeader / len(chunk) {
			if _, err := io.WriteString(conn, chunk); err != nil {
				return
			}
		}
	})
	c, _ := directClient(t, url, ClientOptions{Concurrency: 1, Timeout: 10 * time.Second})
	_, err := c.Post(context.Background(), smallEvent(0, 10), true)
	if !errors.Is(err, errHeaderTooLarge) {
		t.Fatalf("post: %v, want %v", err, errHeaderTooLarge)
	}
	var te *TransportError
	if !errors.As(err, &te) || te.Unreachable() {
		t.Fatalf("post: %v is not a transport error of a reached peer", err)
	}
}

func TestDirectCallThatTimesOutDropsItsConnection(t *testing.T) {
	release := make(chan struct{})
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			<-release
		}
		echo(w, r)
	}))
	defer srv.Close()
	defer close(release)
	c, dials := directClient(t, srv.URL, ClientOptions{Concurrency: 1, Timeout: 200 * time.Millisecond})
	start := time.Now()
	_, err := c.Post(context.Background(), smallEvent(0, 100), true)
	if !errors.Is(err, context.DeadlineExceeded) || IsUnreachable(err) {
		t.Fatalf("post to a function that does not answer: %v, want a deadline exceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the post returned after %v, with a timeout of 200ms", d)
	}
	// The next call must not read the first one's late answer.
	postEcho(t, c, 1)
	if n := dials.Load(); n != 2 {
		t.Fatalf("%d dials, want 2", n)
	}
}

func TestDirectCallEndsWithItsContext(t *testing.T) {
	hung := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-hung
	}))
	defer srv.Close()
	defer close(hung)
	c, _ := directClient(t, srv.URL, ClientOptions{Concurrency: 1})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err := c.Post(ctx, smallEvent(0, 100), true)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("post: %v, want context.Canceled", err)
	}
}

func TestDirectDialFailureIsUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String() + "/"
	ln.Close()
	c, _ := directClient(t, url, ClientOptions{Concurrency: 1})
	if _, err := c.Post(context.Background(), smallEvent(0, 10), true); !IsUnreachable(err) {
		t.Fatalf("post to a closed port: %v, want unreachable", err)
	}
}

func TestDirectOnlyForPlainHTTP(t *testing.T) {
	for url, want := range map[string]bool{
		"http://fn.default.svc.cluster.local": true,
		"http://127.0.0.1:8080/path?q=1":      true,
		"https://fn.example.com/":             false,
		"http://user:pw@fn/":                  false,
		"unix:///tmp/sock":                    false,
		"::not a url":                         false,
	} {
		if got := newDirect(url, nil, 1) != nil; got != want {
			t.Errorf("direct path for %s: %v, want %v", url, got, want)
		}
	}
	if d := newDirect("http://fn.default.svc.cluster.local", nil, 1); d == nil || d.addr != "fn.default.svc.cluster.local:80" {
		t.Errorf("address of a URL without a port: %+v", d)
	}
	if c := NewClient(ClientOptions{URL: "http://127.0.0.1:1/", H2C: true}); c.direct != nil {
		t.Error("direct path with H2C set")
	}
}

func TestDirectRefusesEndlessInterimAnswers(t *testing.T) {
	url := rawServer(t, func(conn net.Conn, _ *bufio.Reader) {
		_, _ = io.WriteString(conn, strings.Repeat("HTTP/1.1 100 Continue\r\n\r\n", maxInterim+1)+"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
	})
	c, _ := directClient(t, url, ClientOptions{Concurrency: 1})
	if _, err := c.Post(context.Background(), smallEvent(0, 10), true); err == nil || !strings.Contains(err.Error(), "interim") {
		t.Fatalf("post: %v, want too many interim answers", err)
	}
}

func TestDirectLargeBodyToAFunctionThatNeverAnswersTimesOut(t *testing.T) {
	hung := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-hung // reads nothing, answers nothing
	}))
	defer srv.Close()
	defer close(hung)
	c, _ := directClient(t, srv.URL, ClientOptions{Concurrency: 1, Timeout: 200 * time.Millisecond})
	writing := trackWrites(c)
	ev := smallEvent(0, 10)
	ev.DataEncoded = make([]byte, 64<<20)
	_, err := c.Post(context.Background(), ev, true)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("post: %v, want a deadline exceeded", err)
	}
	if n := writing.Load(); n != 0 {
		t.Fatalf("post returned with %d writes under way: they may still read the data", n)
	}
}

func TestDirectClosesConnectionsIdleTooLong(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(echo))
	defer srv.Close()
	c, dials := directClient(t, srv.URL, ClientOptions{Concurrency: 2})
	// Two connections in the pool, as two calls at once leave them, both
	// idle since long ago.
	d := c.direct
	var conns []*directConn
	for range 2 {
		dc, err := d.get(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, dc)
	}
	for _, dc := range conns {
		d.put(dc)
	}
	d.mu.Lock()
	for _, dc := range d.idle {
		dc.idleSince = dc.idleSince.Add(-2 * idleTimeout)
	}
	d.mu.Unlock()
	// The call takes the one used last; putting it back closes the other.
	postEcho(t, c, 0)
	d.mu.Lock()
	idle := append([]*directConn(nil), d.idle...)
	d.mu.Unlock()
	if len(idle) != 1 || idle[0] != conns[1] {
		t.Fatalf("idle after the call: %d connections, want the one it used", len(idle))
	}
	if err := conns[0].conn.SetDeadline(time.Time{}); err == nil {
		t.Fatal("the connection idle for longer than the timeout is still open")
	}
	if n := dials.Load(); n != 2 {
		t.Fatalf("%d dials, want 2", n)
	}
}

func TestDirectNoticesACloseRightAfterAnAnswer(t *testing.T) {
	// The function closes each connection just after its answer, without
	// saying so (no Connection: close), as a server shutting down does.
	url := rawServer(t, func(conn net.Conn, _ *bufio.Reader) {
		_, _ = io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		conn.Close()
	})
	c, dials := directClient(t, url, ClientOptions{Concurrency: 1})
	postsAnsweredOK(t, c, 3, 20*time.Millisecond) // the close arrives in the pause; more than staleAfter
	if n := dials.Load(); n != 3 {
		t.Fatalf("%d dials, want 3: one per post, each after the function closed the last", n)
	}
}

// Both ways of checking an idle connection tell an open, quiet one from
// one the peer closed and one with bytes the peer sent unasked.
func TestIdleConnectionChecks(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for name, tc := range map[string]struct {
		peer func(net.Conn)
		want bool
	}{
		"quiet":   {peer: func(net.Conn) {}, want: true},
		"closed":  {peer: func(c net.Conn) { c.Close() }, want: false},
		"unasked": {peer: func(c net.Conn) { _, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\n") }, want: false},
	} {
		t.Run(name, func(t *testing.T) {
			conn, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			peer, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer peer.Close()
			tc.peer(peer)
			time.Sleep(50 * time.Millisecond) // the close or the bytes arrive
			if usable, ok := peekIdle(conn); !ok || usable != tc.want {
				t.Errorf("peekIdle: usable %v (ok %v), want %v", usable, ok, tc.want)
			}
			if usable, ok := peekIdle(countingConn{conn, new(atomic.Int32)}); ok || usable {
				t.Errorf("peekIdle of a wrapped connection: usable %v, ok %v; want neither", usable, ok)
			}
			dc := &directConn{conn: conn, br: bufio.NewReader(conn)}
			if got := dc.aliveAfterRead(); got != tc.want {
				t.Errorf("aliveAfterRead: %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDirectRefusesASwitchOfProtocols(t *testing.T) {
	url := rawServer(t, func(conn net.Conn, _ *bufio.Reader) {
		_, _ = io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	})
	c, _ := directClient(t, url, ClientOptions{Concurrency: 1})
	_, err := c.Post(context.Background(), smallEvent(0, 10), true)
	var te *TransportError
	if err == nil || !strings.Contains(err.Error(), "switched protocols") || !errors.As(err, &te) || te.Unreachable() {
		t.Fatalf("post answered 101: %v, want a transport error of a reached peer", err)
	}
}
