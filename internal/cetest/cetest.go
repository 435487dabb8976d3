// Package cetest runs real CloudEvents peers on loopback for tests: a
// receiver built on the sdk-go client (what K_SINK points at) and a
// function that decodes with the sdk-go HTTP binding and can answer with
// replies, drops, batches and errors (what MV_TRANSFORMER_URL points at).
package cetest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ceclient "github.com/cloudevents/sdk-go/v2/client"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/protocol"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/monovertex/monovertex/internal/cereply"
)

// Receiver is an sdk-go CloudEvents receiver listening on 127.0.0.1.
type Receiver struct {
	URL string

	mu      sync.Mutex
	events  []event.Event
	headers []http.Header
	notify  chan struct{}
}

// StartReceiver starts a receiver; answer returns the result for each event
// (nil accepts it with 200). It stops when the test ends.
func StartReceiver(t testing.TB, answer func(ev event.Event) protocol.Result) *Receiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &Receiver{URL: "http://" + ln.Addr().String(), notify: make(chan struct{}, 1)}
	p, err := cehttp.New(
		cehttp.WithListener(ln),
		cehttp.WithShutdownTimeout(2*time.Second),
		cehttp.WithMiddleware(func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				r.mu.Lock()
				r.headers = append(r.headers, req.Header.Clone())
				r.mu.Unlock()
				next.ServeHTTP(w, req)
			})
		}),
	)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ceclient.New(p)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.StartReceiver(ctx, func(_ context.Context, ev event.Event) protocol.Result {
			var res protocol.Result
			if answer != nil {
				res = answer(ev)
			}
			if res == nil || protocol.IsACK(res) {
				r.mu.Lock()
				r.events = append(r.events, ev)
				r.mu.Unlock()
				select {
				case r.notify <- struct{}{}:
				default:
				}
			}
			return res
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

// Events returns the events accepted so far.
func (r *Receiver) Events() []event.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]event.Event(nil), r.events...)
}

// Headers returns the HTTP headers of every request so far.
func (r *Receiver) Headers() []http.Header {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]http.Header(nil), r.headers...)
}

// WaitCount waits until at least n events were accepted and returns them.
func (r *Receiver) WaitCount(t testing.TB, n int, timeout time.Duration) []event.Event {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		evs := r.Events()
		if len(evs) >= n {
			return evs
		}
		select {
		case <-r.notify:
		case <-time.After(20 * time.Millisecond):
		case <-deadline.C:
			t.Fatalf("receiver got %d events, want %d, within %v", len(evs), n, timeout)
		}
	}
}

// Function is a CloudEvents function on 127.0.0.1 that decodes each request
// with the sdk-go HTTP binding and lets the test answer.
type Function struct {
	*httptest.Server
	mu       sync.Mutex
	received []*event.Event
	headers  []http.Header
	calls    map[string]int
	conns    atomic.Int64
}

// Answer writes the function's reply; call counts the deliveries of this
// event id, from 1.
type Answer func(w http.ResponseWriter, r *http.Request, ev *event.Event, call int)

// StartFunction starts a function; malformed requests get 400 and never
// reach answer.
func StartFunction(t testing.TB, answer Answer) *Function {
	t.Helper()
	f := &Function{calls: map[string]int{}}
	f.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ev, err := cehttp.NewEventFromHTTPRequest(r)
		if err == nil {
			err = ev.Validate()
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		f.received = append(f.received, ev)
		f.headers = append(f.headers, r.Header.Clone())
		f.calls[ev.ID()]++
		call := f.calls[ev.ID()]
		f.mu.Unlock()
		answer(w, r, ev, call)
	}))
	f.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			f.conns.Add(1)
		}
	}
	f.Start()
	t.Cleanup(f.Close)
	return f
}

// Events returns the events the function received, in arrival order.
func (f *Function) Events() []*event.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*event.Event(nil), f.received...)
}

// Headers returns the HTTP headers of every request it decoded.
func (f *Function) Headers() []http.Header {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]http.Header(nil), f.headers...)
}

// Calls returns how often the event with this id arrived.
func (f *Function) Calls(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[id]
}

// Connections is how many TCP connections clients opened.
func (f *Function) Connections() int64 { return f.conns.Load() }

// Reply answers 200 with ev in binary mode.
func Reply(w http.ResponseWriter, r *http.Request, ev event.Event) {
	if err := cereply.Reply(w, r, ev); err != nil {
		panic(fmt.Sprintf("cetest: write reply: %v", err))
	}
}

// SetBinary sets the context attributes of a binary-mode CloudEvent on h,
// for the handlers that write a reply by hand because they stream it, cut
// it or send it wrong on purpose, which the SDK's writer cannot do.
func SetBinary(h http.Header, id, source, typ string) {
	h.Set("Ce-Specversion", "1.0")
	h.Set("Ce-Id", id)
	h.Set("Ce-Source", source)
	h.Set("Ce-Type", typ)
}

// ReplyBatch answers 200 with evs as application/cloudevents-batch+json.
func ReplyBatch(w http.ResponseWriter, evs []event.Event) {
	if err := cereply.Batch(w, evs); err != nil {
		panic(fmt.Sprintf("cetest: marshal batch: %v", err))
	}
}

// Reference answers as the transformer conformance suite expects (see
// cereply): "drop" gets 202, "fanout" a batch of three copies, anything
// else an echo.
func Reference(w http.ResponseWriter, r *http.Request, ev *event.Event, _ int) {
	if err := cereply.Reference(w, r, ev, (*event.Event).Clone); err != nil {
		panic(fmt.Sprintf("cetest: reference answer: %v", err))
	}
}
