package cewire

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
)

// A function may answer before it read the body; net/http then goes on
// writing it after Do returns. Post returns only once the transport closed
// the body, so the caller may reuse the event's data at once.
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
	c := NewClient(ClientOptions{URL: srv.URL, Mode: ModeBinary, Concurrency: 1})
	rec := &bodyRecorder{next: c.http.Transport}
	c.http.Transport = rec
	for i := range 3 {
		data := make([]byte, 64<<20)
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
		if st := rec.body.state.Load(); st != bodyClosed {
			t.Fatalf("post %d returned with its body in state %d, not closed: the transport may still read the data", i, st)
		}
		clear(data) // what the engine's next message does to a reused buffer
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
	ev := event.New()
	ev.SetID("e")
	ev.SetSource("s")
	ev.SetType("t")
	ev.DataEncoded = []byte("payload")
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
