package cewire

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
)

// A function may answer before it read the body; net/http then goes on
// writing it after Do returns. Post returns only once the transport closed
// the body, so the caller may reuse the event's data at once. The direct
// path takes the early answer too, and returns once its writer stopped.
func TestPostReturnsOnlyOnceTheBodyIsNoLongerRead(t *testing.T) {
	// The function answers at once and keeps the connection without
	// reading it, so the transport is still writing (blocked on full
	// socket buffers) when the answer arrives.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		_, _ = rw.WriteString("HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n")
		_ = rw.Flush()
		time.Sleep(300 * time.Millisecond)
	}))
	defer srv.Close()
	t.Run("net/http", func(t *testing.T) {
		c := NewClient(ClientOptions{URL: srv.URL, Mode: ModeBinary, Concurrency: 1})
		c.direct = nil
		rec := &bodyRecorder{next: c.http.Transport}
		c.http.Transport = rec
		for i := range 3 {
			data := make([]byte, 64<<20)
			postAccepted(t, c, i, data)
			if st := rec.body.state.Load(); st != bodyClosed {
				t.Fatalf("post %d returned with its body in state %d, not closed: the transport may still read the data", i, st)
			}
			clear(data) // what the engine's next message does to a reused buffer
		}
	})
	t.Run("direct", func(t *testing.T) {
		c, dials := directClient(t, srv.URL, ClientOptions{Concurrency: 1})
		writing := trackWrites(c)
		for i := range 3 {
			data := make([]byte, 64<<20)
			postAccepted(t, c, i, data)
			if n := writing.Load(); n != 0 {
				t.Fatalf("post %d returned with %d writes under way: they may still read the data", i, n)
			}
			clear(data)
		}
		if n := dials.Load(); n != 3 {
			t.Fatalf("%d dials, want 3: a connection whose request did not go out whole is not reused", n)
		}
	})
}

// dialFunc is how a transport or the direct path dials.
type dialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)

// wrapDial returns dial with wrap applied to each connection it makes.
func wrapDial(dial dialFunc, wrap func(net.Conn) net.Conn) dialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return wrap(conn), nil
	}
}

// trackWrites makes c's direct path count the writes under way on its
// connections (see writingConn).
func trackWrites(c *Client) *atomic.Int32 {
	var writing atomic.Int32
	c.direct.dial = wrapDial(c.direct.dial, func(conn net.Conn) net.Conn { return writingConn{conn, &writing} })
	return &writing
}

// writingConn counts the writes under way on a connection. A write that
// failed takes 100 ms more to return, as a writer slow to notice would:
// the caller must still wait for it.
type writingConn struct {
	net.Conn
	writing *atomic.Int32
}

func (c writingConn) Write(p []byte) (int, error) {
	c.writing.Add(1)
	defer c.writing.Add(-1)
	n, err := c.Conn.Write(p)
	if err != nil {
		time.Sleep(100 * time.Millisecond)
	}
	return n, err
}

// postAccepted posts data as event i's and wants a 202.
func postAccepted(t *testing.T, c *Client, i int, data []byte) {
	t.Helper()
	ev := event.New()
	ev.SetID("e")
	ev.SetSource("s")
	ev.SetType("t")
	ev.DataEncoded = data
	ev.SetDataContentType("application/octet-stream")
	resp, err := c.Post(context.Background(), &ev, false)
	if err != nil {
		t.Fatalf("post %d: %v", i, err)
	}
	if resp.Status != http.StatusAccepted {
		t.Fatalf("post %d: status %d", i, resp.Status)
	}
}

// bodyRecorder keeps the body of the last request it passes on.
type bodyRecorder struct {
	next http.RoundTripper
	body *watchedBody
}

func (r *bodyRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.body, _ = req.Body.(*watchedBody)
	return r.next.RoundTrip(req)
}

func TestBodyWatchIgnoresBodiesThatWereNeverRead(t *testing.T) {
	// A 307 makes the client call GetBody for the next request before
	// CheckRedirect refuses to follow it; that body is never closed.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
	}))
	defer srv.Close()
	c := NewClient(ClientOptions{URL: srv.URL, Mode: ModeBinary, Concurrency: 1})
	c.direct = nil // the direct path needs no watch
	ev := event.New()
	ev.SetID("e")
	ev.SetSource("s")
	ev.SetType("t")
	ev.DataEncoded = bytes.Repeat([]byte("p"), smallBody+1) // a small body is sent from a copy, unwatched
	var w bodyWatch
	resp, err := c.post(context.Background(), &ev, false, &w)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != http.StatusTemporaryRedirect {
		t.Fatalf("status %d", resp.Status)
	}
	if err := w.wait(0); err != nil || w.open.Load() != 0 {
		t.Fatalf("wait: %v with %d bodies open", err, w.open.Load())
	}
}

// countingConn counts the writes a connection makes.
type countingConn struct {
	net.Conn
	writes *atomic.Int32
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// A small event goes out in one write, headers and body together, on
// either path, and nothing reads the event's data once Post returned: the
// caller may change it at once. net/http's transport sends it from a copy;
// the direct path writes it before it reads the answer.
func TestSmallBodiesGoOutInOneWrite(t *testing.T) {
	got := make(chan []byte, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- b
	}))
	defer srv.Close()
	for _, path := range []string{"direct", "net/http"} {
		t.Run(path, func(t *testing.T) {
			c := NewClient(ClientOptions{URL: srv.URL, Mode: ModeBinary, Concurrency: 1})
			var writes atomic.Int32
			counting := func(dial dialFunc) dialFunc {
				return wrapDial(dial, func(conn net.Conn) net.Conn { return countingConn{conn, &writes} })
			}
			tr := c.http.Transport.(*http.Transport)
			tr.DialContext = counting(tr.DialContext)
			if c.direct == nil {
				t.Fatal("no direct path to a plain http:// URL")
			}
			c.direct.dial = counting(c.direct.dial)
			if path == "net/http" {
				c.direct = nil
			}
			const posts = 5
			for i := range posts {
				data := bytes.Repeat([]byte{byte('a' + i)}, 1024)
				ev := event.New()
				ev.SetID("e")
				ev.SetSource("s")
				ev.SetType("t")
				ev.DataEncoded = data
				resp, err := c.Post(context.Background(), &ev, false)
				if err != nil || resp.Status != http.StatusOK {
					t.Fatalf("post %d: %v, %+v", i, err, resp)
				}
				clear(data)
				if b := <-got; !bytes.Equal(b, bytes.Repeat([]byte{byte('a' + i)}, 1024)) {
					t.Fatalf("post %d: the function got %q...", i, b[:8])
				}
			}
			if n := writes.Load(); n != posts {
				t.Fatalf("%d posts made %d writes; want one each", posts, n)
			}
		})
	}
}

// gateReader blocks each Read until gate is closed, and counts the Reads
// that started.
type gateReader struct {
	gate    chan struct{}
	started chan struct{}
	reads   atomic.Int32
}

func (g *gateReader) Read(p []byte) (int, error) {
	if g.reads.Add(1) == 1 {
		close(g.started)
	}
	<-g.gate
	return len(p), nil
}

func (g *gateReader) Close() error { return nil }

// HTTP/2's transport closes a request body from a goroutine of its own
// while its writer may be in a Read. The watch must not report the body
// closed (and the event's data free) until that Read is over, and nothing
// may be read after the Close.
func TestABodyClosedDuringAReadIsFreeOnlyOnceTheReadIsOver(t *testing.T) {
	g := &gateReader{gate: make(chan struct{}), started: make(chan struct{})}
	var w bodyWatch
	req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1/", g)
	if err != nil {
		t.Fatal(err)
	}
	w.watch(req)
	body := req.Body
	readDone := make(chan error, 1)
	go func() {
		_, err := body.Read(make([]byte, 8))
		readDone <- err
	}()
	<-g.started
	closed := make(chan struct{})
	go func() {
		body.Close()
		close(closed)
	}()
	if err := w.wait(100 * time.Millisecond); err == nil {
		t.Fatal("the watch reported the body closed while a Read was still under way")
	}
	select {
	case <-closed:
		t.Fatal("Close returned while a Read was still under way")
	default:
	}
	close(g.gate)
	if err := <-readDone; err != nil {
		t.Fatalf("the Read under way failed: %v", err)
	}
	<-closed
	if err := w.wait(time.Second); err != nil {
		t.Fatalf("after the Read and the Close: %v", err)
	}
	if n, err := body.Read(make([]byte, 8)); n != 0 || err == nil {
		t.Fatalf("a Read after Close read %d bytes, error %v; want none and an error", n, err)
	}
	if n := g.reads.Load(); n != 1 {
		t.Fatalf("the data was read %d times, want once (none after Close)", n)
	}
}

// Over HTTP/2 a function that answers before it read a large body makes
// the transport close the body from another goroutine while its writer may
// be reading it, and the watched body's Close now waits for that Read: the
// real transport must still finish every post (no Close stuck behind a
// Read), and the caller clears the data as soon as Post returns, as the
// engine reuses a payload. (The race itself is shown by the test above;
// this one did not catch it in five -race runs of the code before.)
func TestH2CEarlyAnswersToLargeBodiesReturn(t *testing.T) {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 {
			http.Error(w, "want HTTP/2", http.StatusHTTPVersionNotSupported)
			return
		}
		w.WriteHeader(http.StatusAccepted) // without reading the body
	}))
	srv.Config.Protocols = &p
	srv.Start()
	defer srv.Close()
	c := NewClient(ClientOptions{URL: srv.URL, Mode: ModeBinary, Concurrency: 4, H2C: true})
	for i := range 20 {
		data := bytes.Repeat([]byte{byte(i)}, 1<<20)
		postAccepted(t, c, i, data)
		clear(data)
	}
}
