package faults_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/monovertex/monovertex/internal/testutil"
)

// receiver is a CloudEvents receiver on a fixed 127.0.0.1 port that can be
// switched between answering 200, answering 503, and being gone (its
// listener closed: connection refused) and back. It records, per event id,
// the events it accepted and the failures it answered.
type receiver struct {
	t    *testing.T
	addr string
	URL  string

	mu       sync.Mutex
	mode     string // "ok", "503" or "down"
	srv      *http.Server
	accepted map[string]int
	failed   map[string]int
	// delay, when set, is how long the answer to an event takes.
	delay func(id string) time.Duration
	// tls, when set, makes the receiver serve HTTPS from its next start.
	tls *tls.Config
}

func startReceiver(t *testing.T) *receiver {
	t.Helper()
	// A port of testutil.FreePort's, which nothing else takes while the
	// receiver is down.
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(testutil.FreePort(t)))
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{t: t, addr: ln.Addr().String(), mode: "ok", accepted: map[string]int{}, failed: map[string]int{}}
	r.URL = "http://" + r.addr
	r.serve(ln)
	t.Cleanup(func() { r.setMode("down") })
	return r
}

func (r *receiver) serve(ln net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(r.handle), ReadHeaderTimeout: 5 * time.Second}
	r.srv = srv
	go srv.Serve(ln)
}

// eventID returns the id of the CloudEvent in a request, binary or structured.
func eventID(req *http.Request, body []byte) string {
	if id := req.Header.Get("Ce-Id"); id != "" {
		return id
	}
	if mt, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type")); mt == "application/cloudevents+json" {
		var ev struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(body, &ev) == nil {
			return ev.ID
		}
	}
	return ""
}

func (r *receiver) handle(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return
	}
	id := eventID(req, body)
	if id == "" {
		http.Error(w, "no CloudEvent", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	mode, delay := r.mode, r.delay
	r.mu.Unlock()
	if delay != nil {
		select {
		case <-time.After(delay(id)):
		case <-req.Context().Done():
			return // the caller gave up: not accepted
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if mode != "ok" || r.mode != "ok" {
		// A request that reached a receiver on its way down is answered
		// 503 on a connection that is then closed.
		if mode == "down" || r.mode == "down" {
			w.Header().Set("Connection", "close")
		}
		r.failed[id]++
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
		return
	}
	r.accepted[id]++
	w.WriteHeader(http.StatusOK)
}

// setMode switches the receiver: "ok", "503", or "down": the listener and
// every connection are closed at once, like a crashed pod, and new
// connections are refused.
func (r *receiver) setMode(mode string) {
	r.mu.Lock()
	prev, srv := r.mode, r.srv
	r.mode = mode
	r.mu.Unlock()
	switch {
	case mode == "down" && prev != "down":
		srv.Close()
	case mode != "down" && prev == "down":
		var ln net.Listener
		var err error
		for i := 0; i < 100; i++ { // the port may take a moment to be free
			if ln, err = net.Listen("tcp", r.addr); err == nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil {
			r.t.Errorf("receiver: listen on %s again: %v", r.addr, err)
			return
		}
		r.mu.Lock()
		if r.tls != nil {
			ln = tls.NewListener(ln, r.tls)
		}
		r.serve(ln)
		r.mu.Unlock()
	}
}

// snapshot copies the accepted and failed counts.
func (r *receiver) snapshot() (accepted, failed map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	accepted, failed = make(map[string]int, len(r.accepted)), make(map[string]int, len(r.failed))
	for k, v := range r.accepted {
		accepted[k] = v
	}
	for k, v := range r.failed {
		failed[k] = v
	}
	return accepted, failed
}

func (r *receiver) distinct() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.accepted)
}

// inputIDs are the message IDs the JetStream source gives the n messages of
// a fresh input stream.
func inputIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = inStream + ":" + strconv.Itoa(i+1)
	}
	return ids
}

// seqOf is the input stream sequence of a message ID from inputIDs.
func seqOf(id string) int {
	seq, _ := strconv.Atoi(strings.TrimPrefix(id, inStream+":"))
	return seq
}

// misplaced counts the n input messages that are in the fallback stream
// although poison does not pick them, or that poison picks but are not.
func misplaced(n int, poison func(seq int) bool, fallback map[string]bool) int {
	wrong := 0
	for _, id := range inputIDs(n) {
		if poison(seqOf(id)) != fallback[id] {
			wrong++
		}
	}
	return wrong
}

// idCount is the end count over receivers.
type idCount struct{ lost, inBoth, dups int }

// countIDs checks every input id against the accepted sets.
func countIDs(n int, sets ...map[string]int) idCount {
	var c idCount
	for _, id := range inputIDs(n) {
		found := 0
		for _, s := range sets {
			if s[id] > 0 {
				found++
				c.dups += s[id] - 1
			}
		}
		switch {
		case found == 0:
			c.lost++
		case found > 1:
			c.inBoth++
		}
	}
	return c
}

// mustHaveAll counts the input ids over what the receivers accepted and
// fails the test if any of the n messages is in none of them.
func mustHaveAll(t *testing.T, n int, rs ...*receiver) idCount {
	t.Helper()
	sets := make([]map[string]int, len(rs))
	for i, r := range rs {
		sets[i], _ = r.snapshot()
	}
	c := countIDs(n, sets...)
	if c.lost > 0 {
		t.Fatalf("%d of %d messages lost", c.lost, n)
	}
	return c
}

// restartAndReceive starts a new runner with env after the runner earlier
// stopped, waits up to timeout until the receiver r holds all n messages,
// fails the test if one is lost, and stops the new runner cleanly. It
// returns the count and how long the new runner took to deliver.
func (f *jsFixture) restartAndReceive(t *testing.T, env map[string]string, n int, timeout time.Duration, r *receiver, earlier *testutil.Process) (idCount, time.Duration) {
	t.Helper()
	p, recovered := restart(t, env, func() { f.waitReceived(n, timeout, r) })
	c := mustHaveAll(t, n, r)
	stopClean(t, p, earlier)
	return c, recovered
}

// waitReceived waits until the receivers together hold n distinct events
// and the consumer is idle.
func (f *jsFixture) waitReceived(n int, timeout time.Duration, rs ...*receiver) {
	f.T.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := 0
		for _, r := range rs {
			got += r.distinct()
		}
		if got >= n && f.Idle() {
			return
		}
		if time.Now().After(deadline) {
			info, _ := f.ConsumerInfo()
			if info != nil {
				f.T.Fatalf("after %v the receivers hold %d of %d events; consumer: %d pending, %d unacked", timeout, got, n, info.NumPending, info.NumAckPending)
			}
			f.T.Fatalf("after %v the receivers hold %d of %d events", timeout, got, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pace publishes n messages of size bytes over about d, in batches of 100.
func (f *jsFixture) pace(ctx context.Context, n, size int, d time.Duration) chan error {
	done := make(chan error, 1)
	tick := d / time.Duration(max(n/100, 1))
	go func() {
		err := f.Publish(ctx, 0, n, 100, size, tick)
		if errors.Is(err, context.Canceled) {
			err = nil
		}
		done <- err
	}()
	return done
}

// waitFor polls cond every 20ms for at most d.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// newCESink is the CloudEvents sink scenario: the JetStream fixture as the
// source, a receiver as the sink, and the runner's environment for them.
func newCESink(t *testing.T) (*jsFixture, *receiver, map[string]string) {
	f := newJS(t)
	r := startReceiver(t)
	return f, r, ceSinkEnv(f, r.URL)
}

func ceSinkEnv(f *jsFixture, url string) map[string]string {
	env := f.Env("faults")
	env["MV_SINK"] = "cloudevents"
	env["K_SINK"] = url
	env["MV_READ_BATCH_SIZE"] = "100"
	env["MV_RETRY_INTERVAL"] = "50ms"
	env["MV_RETRY_STEPS"] = "3"
	env["MV_CE_SINK_TIMEOUT"] = "2s"
	return env
}
