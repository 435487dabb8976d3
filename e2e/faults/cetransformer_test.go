package faults_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/monovertex/monovertex/internal/cetest"
	"github.com/monovertex/monovertex/internal/testutil"
)

// faultyFunction is a CloudEvents function on 127.0.0.1 that echoes each
// event back as its reply, except when its rule says to misbehave for that
// event and attempt: hang past the caller's timeout, answer 503, answer 200
// with a body that is no CloudEvent, reset the connection, or give the
// answer of its misbehave handler. A storm makes it answer 500 to
// everything for a while. It counts calls per event id.
type faultyFunction struct {
	*httptest.Server
	rule func(seq, attempt int) string
	// poison and misbehave are set by startCEFunction: the messages poison
	// picks get the answer of misbehave, every time.
	poison    func(seq int) bool
	misbehave http.HandlerFunc

	mu     sync.Mutex
	storm  bool
	calls  map[string]int
	faults map[string]int // fault kind -> answers given
	total  atomic.Int64
}

func startFunction(t *testing.T, rule func(seq, attempt int) string) *faultyFunction {
	t.Helper()
	return serveFunction(t, &faultyFunction{rule: rule})
}

// startCEFunction starts a function that answers the messages poison picks
// with misbehave, on every attempt, and echoes the others.
func startCEFunction(t *testing.T, poison func(seq int) bool, misbehave http.HandlerFunc) *faultyFunction {
	t.Helper()
	rule := func(seq, _ int) string {
		if poison(seq) {
			return "misbehave"
		}
		return "ok"
	}
	return serveFunction(t, &faultyFunction{rule: rule, poison: poison, misbehave: misbehave})
}

func serveFunction(t *testing.T, fn *faultyFunction) *faultyFunction {
	fn.calls, fn.faults = map[string]int{}, map[string]int{}
	fn.Server = httptest.NewServer(http.HandlerFunc(fn.handle))
	t.Cleanup(fn.Close)
	return fn
}

func (fn *faultyFunction) setStorm(on bool) {
	fn.mu.Lock()
	fn.storm = on
	fn.mu.Unlock()
}

func (fn *faultyFunction) handle(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return
	}
	id := eventID(req, body)
	seq := seqOf(id)
	fn.mu.Lock()
	fn.calls[id]++
	attempt := fn.calls[id]
	kind := "ok"
	if fn.storm {
		kind = "storm"
	} else if fn.rule != nil {
		kind = fn.rule(seq, attempt)
	}
	fn.faults[kind]++
	fn.mu.Unlock()
	fn.total.Add(1)
	switch kind {
	case "misbehave":
		fn.misbehave(w, req)
	case "storm":
		http.Error(w, "storm", http.StatusInternalServerError)
	case "503":
		http.Error(w, "busy", http.StatusServiceUnavailable)
	case "timeout":
		select {
		case <-req.Context().Done():
		case <-time.After(10 * time.Second):
		}
	case "garbage":
		w.Header().Set("Content-Type", "application/cloudevents+json")
		w.WriteHeader(http.StatusOK)
		w.Write([]byte(`{"specversion":"1.0","id":`))
	case "reset":
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		if tc, ok := conn.(*net.TCPConn); ok {
			tc.SetLinger(0) // close with RST
		}
		conn.Close()
	default:
		cetest.SetBinary(w.Header(), id, "/faulty-function", "dev.monovertex.echo")
		if ct := req.Header.Get("Content-Type"); ct != "" {
			w.Header().Set("Content-Type", ct)
		}
		w.WriteHeader(http.StatusOK)
		w.Write(body)
	}
}

func (fn *faultyFunction) stats() string {
	fn.mu.Lock()
	defer fn.mu.Unlock()
	total := 0
	for _, c := range fn.calls {
		total += c
	}
	return fmt.Sprintf("%d calls: %v", total, fn.faults)
}

// firstAttemptFaults misbehaves once per message by its sequence number:
// a hang past the timeout, two 503s, a garbage body, a connection reset.
func firstAttemptFaults(seq, attempt int) string {
	switch {
	case seq%5 == 1 && attempt == 1:
		return "timeout"
	case seq%5 == 2 && attempt <= 2:
		return "503"
	case seq%5 == 3 && attempt == 1:
		return "garbage"
	case seq%5 == 4 && attempt == 1:
		return "reset"
	}
	return "ok"
}

func transformerEnv(f *jsFixture, url string) map[string]string {
	env := f.Env("faults")
	env["MV_TRANSFORMER"] = "cloudevents"
	env["MV_TRANSFORMER_URL"] = url
	env["MV_TRANSFORMER_TIMEOUT"] = "500ms"
	env["MV_READ_BATCH_SIZE"] = "100"
	env["MV_RETRY_INTERVAL"] = "20ms"
	return env
}

// TestTransformerFaultsWithRetry sends every message through a function
// that fails each one once (four of five messages: a timeout, two 503s, a
// garbage body, a connection reset) and has a one-second storm of 500s in
// the middle. With MV_ON_FAILURE=retry every message must reach the output
// stream exactly once.
func TestTransformerFaultsWithRetry(t *testing.T) {
	n := pick(3000, 20000)
	f := newJS(t)
	fn := startFunction(t, firstAttemptFaults)
	env := transformerEnv(f, fn.URL)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	published := f.pace(ctx, n, 64, 4*time.Second)
	p := startRunner(t, env)
	testutil.WaitFor(t, 60*time.Second, "a quarter written", func() bool { return f.StreamMsgs(outStream) >= uint64(n/4) })
	fn.setStorm(true)
	time.Sleep(time.Second)
	fn.setStorm(false)
	stormEnd := time.Now()
	before := f.StreamMsgs(outStream)
	testutil.WaitFor(t, 30*time.Second, "output growing after the storm", func() bool { return f.StreamMsgs(outStream) > before })
	recovered := time.Since(stormEnd)
	if err := <-published; err != nil {
		t.Fatal(err)
	}
	f.WaitSettled(n, 120*time.Second)
	tl := f.Count(n, true)
	tl.MustBeComplete(t)
	if len(tl.Fallback) > 0 {
		t.Fatalf("%d messages in the fallback stream without a fallback sink", len(tl.Fallback))
	}
	st, _ := p.Status()
	t.Logf("function: %s; runner: read %d acked %d written %d transformer errors %d", fn.stats(), st.Totals.Read, st.Totals.Acked, st.Totals.Written, st.Totals.TransformerErrors)
	stopClean(t, p)
	report(t, result{
		Scenario: "CloudEvents function: timeout, 503 x2, garbage, reset per message + 1s storm of 500s, retry", Messages: n, Lost: tl.Lost,
		Duplicated: fmt.Sprintf("0 stored; %d published twice", tl.DuplicatePublish), Recovery: round(recovered),
		Notes: "recovery: storm end to output growing",
	})
}

// TestTransformerFaultsWithFallback: with MV_ON_FAILURE=fallback and three
// retry steps the passing faults (timeouts, 503s, resets) are retried away,
// and the messages answered with garbage (a bug in the function, so a
// permanent failure that is not retried) go to the fallback sink at once;
// the fallback stream must hold exactly those.
func TestTransformerFaultsWithFallback(t *testing.T) {
	n := pick(3000, 20000)
	f := newJS(t)
	poison := func(seq int) bool { return seq%5 == 3 }
	fn := startFunction(t, firstAttemptFaults)
	env := transformerEnv(f, fn.URL)
	env["MV_ON_FAILURE"] = "fallback"
	env["MV_RETRY_STEPS"] = "3"
	env["MV_FALLBACK_SINK"] = "jetstream"
	// The garbage reply must reach the runner for the message to belong in
	// the fallback stream; under a loaded CI machine 500ms can cut it off,
	// and the retry then (rightly) writes it to the output. The timeout
	// fault waits for the client to give up, so a longer limit only slows
	// those messages down.
	env["MV_TRANSFORMER_TIMEOUT"] = "2s"
	f.PublishAll(n, 64)
	p := startRunner(t, env)
	f.WaitSettled(n, 120*time.Second)
	tl := f.Count(n, true)
	tl.MustBeComplete(t)
	wrong := misplaced(n, poison, tl.Fallback)
	if wrong > 0 {
		t.Fatalf("%d messages in the wrong stream: the fallback stream must hold exactly the %d answered with garbage", wrong, n/5)
	}
	fn.mu.Lock()
	for id, c := range fn.calls {
		if poison(seqOf(id)) && c != 1 {
			t.Errorf("message %s got %d calls: a garbage reply is permanent and must not be retried", id, c)
		}
	}
	fn.mu.Unlock()
	st, _ := p.Status()
	t.Logf("fallback stream holds exactly the %d messages answered with garbage; function: %s; runner: read %d acked %d written %d fallback %d",
		len(tl.Fallback), fn.stats(), st.Totals.Read, st.Totals.Acked, st.Totals.Written, st.Totals.FallbackWritten)
	stopClean(t, p)
	report(t, result{
		Scenario: "CloudEvents function: timeout, 503 x2, garbage, reset per message, MV_ON_FAILURE=fallback, 3 steps", Messages: n, Lost: tl.Lost,
		Duplicated: fmt.Sprintf("0 stored; %d published twice", tl.DuplicatePublish), Recovery: "-",
		Notes: fmt.Sprintf("fallback = exactly the %d answered with garbage", len(tl.Fallback)),
	})
}

// TestSigtermDuringTransformerStorm stops the runner in the middle of a
// storm of 500s: in-flight batches finish once the storm passes, within
// MV_SHUTDOWN_TIMEOUT, the runner exits 0, and a new runner moves the rest.
func TestSigtermDuringTransformerStorm(t *testing.T) {
	n := pick(3000, 20000)
	f := newJS(t)
	fn := startFunction(t, firstAttemptFaults)
	env := transformerEnv(f, fn.URL)
	env["MV_SHUTDOWN_TIMEOUT"] = "8s"
	f.PublishAll(n, 64)
	p := startRunner(t, env)
	testutil.WaitFor(t, 60*time.Second, "a quarter written", func() bool { return f.StreamMsgs(outStream) >= uint64(n/4) })
	fn.setStorm(true)
	time.AfterFunc(1500*time.Millisecond, func() { fn.setStorm(false) })
	time.Sleep(300 * time.Millisecond)
	code, took := sigterm(t, p, 30*time.Second)
	read, acked := lastTotals(t, p)
	t.Logf("SIGTERM during the storm: exit %d after %v; read %d acked %d; output holds %d", code, took.Round(time.Millisecond), read, acked, f.StreamMsgs(outStream))
	if code != 0 || took > 8*time.Second+3*time.Second {
		t.Fatalf("exit %d after %v; want 0 within MV_SHUTDOWN_TIMEOUT=8s", code, took)
	}
	if read != acked {
		t.Fatalf("the drain left %d of %d read messages unacked although the storm passed within the budget", read-acked, read)
	}
	tl, recovered := f.restartAndCount(t, env, n, p)
	report(t, result{
		Scenario: "SIGTERM during a storm of 500s from the function, then restart", Messages: n, Lost: tl.Lost,
		Duplicated: fmt.Sprintf("0 stored; %d published twice", tl.DuplicatePublish), Recovery: round(recovered),
		Notes: fmt.Sprintf("exit 0 after %s, in-flight drained; restart to all written", round(took)),
	})
}
