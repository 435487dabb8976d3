package cloudevents_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/protocol"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	cesink "github.com/monovertex/monovertex/adapters/sink/cloudevents"
	httpsrc "github.com/monovertex/monovertex/adapters/source/http"
	cetransformer "github.com/monovertex/monovertex/adapters/transformer/cloudevents"
	"github.com/monovertex/monovertex/internal/cetest"
	"github.com/monovertex/monovertex/internal/testutil"
	"github.com/monovertex/monovertex/runner"
)

// gatedReceiver holds events whose id starts with "gated" until open is closed.
func gatedReceiver(t *testing.T) (*cetest.Receiver, func()) {
	gate := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	r := cetest.StartReceiver(t, func(ev event.Event) protocol.Result {
		if strings.HasPrefix(ev.ID(), "gated") {
			<-gate
		}
		return nil
	})
	t.Cleanup(open) // runs before the receiver stops
	return r, open
}

func hasID(evs []event.Event, id string) bool {
	for _, ev := range evs {
		if ev.ID() == id {
			return true
		}
	}
	return false
}

func TestAnswerArrivesOnlyAfterTheSinkHasTheEvent(t *testing.T) {
	sink, open := gatedReceiver(t)
	p := startPipeline(t, pipelineSpec{sinkURL: sink.URL})
	ch := sendAsync(p.URL, "payload", httpsrc.HeaderID, "gated-1")
	notYet(t, ch, 300*time.Millisecond)
	if hasID(sink.Events(), "gated-1") {
		t.Fatalf("sink accepted the event while its handler was held")
	}
	open()
	a := wait(t, ch)
	if a.Status != http.StatusOK || a.ID != "gated-1" {
		t.Fatalf("answer %+v, want 200 with the id", a)
	}
	// The receiver recorded the event before it answered the runner, and
	// the runner answered the caller only after that.
	if !hasID(sink.Events(), "gated-1") {
		t.Fatalf("200 arrived before the sink had the event")
	}
}

func TestDuplicateInFlightIs409(t *testing.T) {
	sink, open := gatedReceiver(t)
	p := startPipeline(t, pipelineSpec{sinkURL: sink.URL})
	first := sendAsync(p.URL, "one", httpsrc.HeaderID, "gated-dup")
	testWaitFor(t, "the first request in flight", func() bool { return p.Engine.Status().Totals.Read == 1 })
	if a := wait(t, sendAsync(p.URL, "two", httpsrc.HeaderID, "gated-dup")); a.Status != http.StatusConflict {
		t.Fatalf("second request: %+v, want 409", a)
	}
	open()
	if a := wait(t, first); a.Status != http.StatusOK {
		t.Fatalf("first request: %+v", a)
	}
	if n := len(sink.Events()); n != 1 {
		t.Fatalf("sink got %d events, want 1", n)
	}
}

func TestFullBufferIs429(t *testing.T) {
	sink := cetest.StartReceiver(t, nil)
	p := startPipeline(t, pipelineSpec{sinkURL: sink.URL, source: httpsrc.Config{BufferSize: 2}, paused: true})
	a, b := sendAsync(p.URL, "a"), sendAsync(p.URL, "b")
	testWaitFor(t, "two queued requests", func() bool { n, _ := p.Source.Pending(context.Background()); return n == 2 })
	if c := wait(t, sendAsync(p.URL, "c")); c.Status != http.StatusTooManyRequests {
		t.Fatalf("third request: %+v, want 429", c)
	}
	p.Engine.SetPaused(false)
	for _, ch := range []<-chan answer{a, b} {
		if r := wait(t, ch); r.Status != http.StatusOK {
			t.Fatalf("queued request: %+v", r)
		}
	}
	if n := len(sink.Events()); n != 2 {
		t.Fatalf("sink got %d events, want 2", n)
	}
}

func TestShutdownAnswers500(t *testing.T) {
	sink, _ := gatedReceiver(t) // never opened while the engine runs
	// One batch of one in flight: the held message blocks further reads.
	p := startPipeline(t, pipelineSpec{sinkURL: sink.URL, opts: runner.Options{ShutdownTimeout: 300 * time.Millisecond, BatchSize: 1, InflightBatches: 1}})
	held := sendAsync(p.URL, "held", httpsrc.HeaderID, "gated-held")
	testWaitFor(t, "the first request read", func() bool { return p.Engine.Status().Totals.Read == 1 })
	queued := sendAsync(p.URL, "queued", httpsrc.HeaderID, "queued-1")
	testWaitFor(t, "a queued request", func() bool { n, _ := p.Source.Pending(context.Background()); return n == 1 })
	if err := p.stop(t); err == nil {
		t.Fatalf("engine stopped cleanly with a held message; want a shutdown timeout")
	}
	for name, ch := range map[string]<-chan answer{"held": held, "queued": queued} {
		if a := wait(t, ch); a.Status != http.StatusInternalServerError {
			t.Fatalf("%s request: %+v, want 500", name, a)
		}
	}
	if r := wait(t, sendAsync(p.URL, "late")); r.Status != http.StatusInternalServerError {
		t.Fatalf("request after shutdown: %+v, want 500", r)
	}
}

func TestRejectionsThroughTheEngine(t *testing.T) {
	sink := cetest.StartReceiver(t, nil)
	p := startPipeline(t, pipelineSpec{sinkURL: sink.URL, source: httpsrc.Config{AuthToken: "tok", MaxBody: 512}})
	bearer := []string{"Authorization", "Bearer tok"}
	expectStatuses(t, p.URL, []request{
		{"no token", "x", nil, http.StatusUnauthorized},
		{"wrong token", "x", []string{"Authorization", "Bearer nope"}, http.StatusUnauthorized},
		{"oversize", strings.Repeat("x", 513), bearer, http.StatusRequestEntityTooLarge},
		{"invalid CloudEvent", "x", append([]string{"Ce-Specversion", "1.0", "Ce-Id", "1"}, bearer...), http.StatusBadRequest},
		{"bad event time", "x", append([]string{httpsrc.HeaderEventTime, "soon"}, bearer...), http.StatusBadRequest},
		{"good", "x", append([]string{httpsrc.HeaderID, "ok-1"}, bearer...), http.StatusOK},
	})
	evs := sink.Events()
	if len(evs) != 1 || evs[0].ID() != "ok-1" {
		t.Fatalf("sink got %d events, want only ok-1", len(evs))
	}
	for _, h := range sink.Headers() {
		if h.Get("Authorization") != "" || h.Get("Ce-Authorization") != "" {
			t.Fatalf("the bearer token was forwarded: %v", h)
		}
	}
}

// TestConcurrentLoadNoneLost posts thousands of requests from many callers
// that retry on 429 and 500; every id must get 200 and reach the sink.
func TestConcurrentLoadNoneLost(t *testing.T) {
	const total, callers = 5000, 100
	sink := cetest.StartReceiver(t, nil)
	p := startPipeline(t, pipelineSpec{sinkURL: sink.URL, source: httpsrc.Config{BufferSize: 500}})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: callers, MaxConnsPerHost: callers}}
	ids := make(chan int, total)
	for i := 0; i < total; i++ {
		ids <- i
	}
	close(ids)
	var ok, retries atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	for c := 0; c < callers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range ids {
				id := fmt.Sprintf("load-%d", i)
				for attempt := 0; ; attempt++ {
					a := send(ctx, client, p.URL+"/vertices/in", "v-"+id, httpsrc.HeaderID, id, httpsrc.HeaderKeys, fmt.Sprint(i%7))
					if a.Err == nil && a.Status == http.StatusOK && a.ID == id {
						ok.Add(1)
						break
					}
					if ctx.Err() != nil || attempt > 200 {
						errs <- fmt.Errorf("%s: gave up after %d attempts: %d %v", id, attempt, a.Status, a.Err)
						return
					}
					retries.Add(1)
					time.Sleep(5 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if ok.Load() != total {
		t.Fatalf("%d of %d requests answered 200", ok.Load(), total)
	}
	got := map[string]int{}
	for _, ev := range sink.Events() {
		got[ev.ID()]++
	}
	for i := 0; i < total; i++ {
		if got[fmt.Sprintf("load-%d", i)] == 0 {
			t.Fatalf("load-%d was answered 200 but never reached the sink", i)
		}
	}
	st := p.Engine.Status().Totals
	t.Logf("%d requests, %d retries (429/500), engine read %d acked %d written %d", total, retries.Load(), st.Read, st.Acked, st.Written)
	if st.Acked < total || st.Written < total {
		t.Fatalf("engine totals %+v below %d", st, total)
	}
}

// rules is the function's script, keyed by the payload's prefix.
func rules(w http.ResponseWriter, r *http.Request, ev *event.Event, call int) {
	data := string(ev.Data())
	switch {
	case strings.HasPrefix(data, "drop"):
		w.WriteHeader(http.StatusAccepted)
	case strings.HasPrefix(data, "fan"):
		evs := make([]event.Event, 3)
		for i := range evs {
			evs[i] = ev.Clone()
			evs[i].SetID(fmt.Sprintf("%s-copy%d", ev.ID(), i))
			evs[i].SetType("com.example.fanned")
		}
		cetest.ReplyBatch(w, evs)
	case strings.HasPrefix(data, "flaky") && call == 1:
		http.Error(w, "warming up", http.StatusServiceUnavailable)
	case strings.HasPrefix(data, "bad"):
		http.Error(w, "cannot handle this", http.StatusBadRequest)
	case strings.HasPrefix(data, "garbage"):
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("this is not an event"))
	default:
		out := ev.Clone()
		out.SetType("com.example.reply")
		out.SetExtension("handledby", "test-function")
		cetest.Reply(w, r, out)
	}
}

func TestFunctionRulesEveryMessageAccountedFor(t *testing.T) {
	fn := cetest.StartFunction(t, rules)
	sink := cetest.StartReceiver(t, nil)
	fallback := cetest.StartReceiver(t, nil)
	p := startPipeline(t, pipelineSpec{
		opts:     runner.Options{OnFailure: runner.OnFailureFallback, Retry: runner.RetryPolicy{Interval: time.Millisecond, Steps: 3}},
		fnURL:    fn.URL,
		sinkURL:  sink.URL,
		fallback: fallback.URL,
		sink:     func(c *cesink.Config) { c.Overrides = `{"extensions":{"team":"payments"}}` },
	})
	kinds := []string{"echo", "drop", "fan", "flaky", "bad", "garbage"}
	const per = 5
	at := time.UnixMilli(1_700_000_000_000)
	var chans []<-chan answer
	for _, k := range kinds {
		for i := 0; i < per; i++ {
			id := fmt.Sprintf("%s-%d", k, i)
			chans = append(chans, sendAsync(p.URL, k+" payload", httpsrc.HeaderID, id, httpsrc.HeaderKeys, "k"+id,
				httpsrc.HeaderEventTime, fmt.Sprint(at.UnixMilli()), "Content-Type", "text/plain"))
		}
	}
	for _, ch := range chans {
		if a := wait(t, ch); a.Status != http.StatusOK {
			t.Fatalf("answer %+v, want 200 (written, fallback-written or dropped)", a)
		}
	}
	byID := func(evs []event.Event) map[string]event.Event {
		m := map[string]event.Event{}
		for _, ev := range evs {
			if _, dup := m[ev.ID()]; dup {
				t.Fatalf("event %s delivered twice", ev.ID())
			}
			m[ev.ID()] = ev
		}
		return m
	}
	main, fb := byID(sink.Events()), byID(fallback.Events())
	for i := 0; i < per; i++ {
		for _, id := range []string{fmt.Sprintf("echo-%d", i), fmt.Sprintf("flaky-%d", i)} {
			ev, ok := main[id]
			if !ok {
				t.Fatalf("%s missing at the sink", id)
			}
			if ev.Type() != "com.example.reply" || ev.Extensions()["handledby"] != "test-function" {
				t.Fatalf("%s: reply attributes lost:\n%s", id, ev)
			}
			checkCommon(t, ev, "k"+id, at)
		}
		for k := 0; k < 3; k++ {
			id := fmt.Sprintf("fan-%d-%d", i, k) // the engine names fan-out outputs
			ev, ok := main[id]
			if !ok {
				t.Fatalf("%s missing at the sink (have %d events)", id, len(main))
			}
			if ev.Type() != "com.example.fanned" || string(ev.Data()) != "fan payload" {
				t.Fatalf("%s:\n%s", id, ev)
			}
			checkCommon(t, ev, fmt.Sprintf("kfan-%d", i), at)
		}
		for _, id := range []string{fmt.Sprintf("bad-%d", i), fmt.Sprintf("garbage-%d", i)} {
			ev, ok := fb[id]
			if !ok {
				t.Fatalf("%s missing at the fallback sink", id)
			}
			if ev.Type() != "com.example.test" {
				t.Fatalf("%s: the fallback gets the input as it was:\n%s", id, ev)
			}
			checkCommon(t, ev, "k"+id, at)
		}
	}
	if want := per * (1 + 1 + 3); len(main) != want {
		t.Fatalf("sink got %d events, want %d", len(main), want)
	}
	if len(fb) != 2*per {
		t.Fatalf("fallback got %d events, want %d", len(fb), 2*per)
	}
	// Retries exactly where the rules say: 503 once, then ok; 400 and
	// garbage are permanent, never retried.
	for i := 0; i < per; i++ {
		want := map[string]int{"echo": 1, "drop": 1, "fan": 1, "flaky": 2, "bad": 1, "garbage": 1}
		for k, n := range want {
			if got := fn.Calls(fmt.Sprintf("%s-%d", k, i)); got != n {
				t.Fatalf("function called %d times for %s-%d, want %d", got, k, i, n)
			}
		}
	}
	// The HTTP source answers once a message is final, and the engine counts
	// the ack just after: wait (bounded) for the last acks to be counted.
	st := p.Engine.Status().Totals
	for deadline := time.Now().Add(5 * time.Second); st.Acked != st.Read && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		st = p.Engine.Status().Totals
	}
	if st.Read != int64(len(kinds)*per) || st.Acked != st.Read || st.TransformerDropped != per ||
		st.Written != int64(5*per) || st.FallbackWritten != int64(2*per) {
		t.Fatalf("engine totals %+v", st)
	}
}

func checkCommon(t *testing.T, ev event.Event, key string, at time.Time) {
	t.Helper()
	ext := ev.Extensions()
	if ext["team"] != "payments" {
		t.Fatalf("%s: K_CE_OVERRIDES extension missing: %v", ev.ID(), ext)
	}
	if ext["partitionkey"] != key {
		t.Fatalf("%s: partitionkey %v, want %s", ev.ID(), ext["partitionkey"], key)
	}
	if !ev.Time().Equal(at) {
		t.Fatalf("%s: time %v, want %v", ev.ID(), ev.Time(), at)
	}
	if ev.Source() != "/monovertex/in" {
		t.Fatalf("%s: source %q", ev.ID(), ev.Source())
	}
}

func TestUnreachableFunctionHoldsMessagesUntilItIsUp(t *testing.T) {
	addr := "127.0.0.1:" + strconv.Itoa(testutil.FreePort(t)) // no one takes it meanwhile
	sink := cetest.StartReceiver(t, nil)
	// One retry step and MV_ON_FAILURE=drop: were connection failures
	// counted per message, the message would be dropped at once.
	p := startPipeline(t, pipelineSpec{
		opts:    runner.Options{OnFailure: runner.OnFailureDrop, Retry: runner.RetryPolicy{Interval: time.Millisecond, Steps: 1}},
		fnURL:   "http://" + addr,
		sinkURL: sink.URL,
	})
	ch := sendAsync(p.URL, "hello", httpsrc.HeaderID, "wait-1")
	testWaitFor(t, "failed calls to the function", func() bool { return p.Engine.Status().Totals.TransformerErrors >= 2 })
	notYet(t, ch, 50*time.Millisecond)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ev, err := cehttp.NewEventFromHTTPRequest(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		cetest.Reply(w, r, *ev)
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	if a := wait(t, ch); a.Status != http.StatusOK {
		t.Fatalf("answer %+v", a)
	}
	if !hasID(sink.Events(), "wait-1") {
		t.Fatalf("answered 200 but the sink has nothing")
	}
	if st := p.Engine.Status().Totals; st.Dropped != 0 {
		t.Fatalf("%d messages dropped while the function was away", st.Dropped)
	}
}

func TestStructuredModesBothWays(t *testing.T) {
	fn := cetest.StartFunction(t, cetest.Reference)
	sink := cetest.StartReceiver(t, nil)
	p := startPipeline(t, pipelineSpec{
		fnURL: fn.URL, fn: func(c *cetransformer.Config) { c.Mode = "structured" },
		sinkURL: sink.URL, sink: func(c *cesink.Config) { c.Mode = "structured" },
	})
	a := wait(t, sendAsync(p.URL, `{"specversion":"1.0","id":"st-1","source":"/producer","type":"com.example.in","myext":"x","datacontenttype":"text/plain","data":"fanout"}`,
		"Content-Type", "application/cloudevents+json"))
	if a.Status != http.StatusOK {
		t.Fatalf("answer %+v", a)
	}
	evs := sink.Events()
	if len(evs) != 3 {
		t.Fatalf("sink got %d events, want 3", len(evs))
	}
	for _, ev := range evs {
		// The producer's own attributes travel through the function to the sink.
		if ev.Source() != "/producer" || ev.Type() != "com.example.in" || ev.Extensions()["myext"] != "x" || string(ev.Data()) != "fanout" {
			t.Fatalf("attributes lost:\n%s", ev)
		}
	}
	for _, h := range append(fn.Headers(), sink.Headers()...) {
		if !strings.HasPrefix(h.Get("Content-Type"), "application/cloudevents+json") {
			t.Fatalf("want structured mode, got headers %v", h)
		}
	}
}

func testWaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
