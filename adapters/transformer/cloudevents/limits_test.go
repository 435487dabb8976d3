package cloudevents

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/monovertex/monovertex/adapters/internal/cewire"
	"github.com/monovertex/monovertex/adapters/internal/cewire/cewiretest"
	"github.com/monovertex/monovertex/internal/cetest"
	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/runnertest"
)

// streamForever answers 200 with a binary CloudEvent whose body never ends
// (chunked, no Content-Length), counting the bytes the client took.
type streamForever struct {
	written atomic.Int64
}

func (s *streamForever) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	cetest.SetBinary(w.Header(), "big", "/big", "big")
	w.WriteHeader(http.StatusOK)
	chunk := make([]byte, 32<<10)
	for r.Context().Err() == nil {
		n, err := w.Write(chunk)
		s.written.Add(int64(n))
		if err != nil {
			return
		}
		w.(http.Flusher).Flush()
	}
}

func TestEndlessReplyStopsAtTheLimitAndIsPermanent(t *testing.T) {
	const limit = 1 << 20
	src := &streamForever{}
	srv := httptest.NewServer(src)
	defer srv.Close()
	tr := newTransformer(t, srv.URL, func(c *Config) { c.MaxReply = limit })
	start := time.Now()
	r := transformOne(t, tr, &runner.Message{ID: "m", Value: []byte("x")})
	if !runner.IsPermanent(r.Err) || !errors.Is(r.Err, cewire.ErrReplyTooLarge) || !strings.Contains(r.Err.Error(), "MV_TRANSFORMER_MAX_REPLY") {
		t.Fatalf("want a permanent reply-too-large error naming MV_TRANSFORMER_MAX_REPLY, got %v", r.Err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("took %v to give up on an endless reply", took)
	}
	if tr.budget.Used() != 0 {
		t.Fatalf("budget still holds %d bytes", tr.budget.Used())
	}
}

func TestAnnouncedOversizeReplyIsNotRead(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/cloudevents+json")
		w.Header().Set("Content-Length", strconv.Itoa(10<<20))
		w.WriteHeader(http.StatusOK)
		w.Write(make([]byte, 100))
	}))
	defer srv.Close()
	tr := newTransformer(t, srv.URL, func(c *Config) { c.MaxReply = 1 << 20 })
	r := transformOne(t, tr, &runner.Message{ID: "m", Value: []byte("x")})
	if !runner.IsPermanent(r.Err) || !strings.Contains(r.Err.Error(), "announces") {
		t.Fatalf("want a permanent error for the announced size, got %v", r.Err)
	}
}

func TestConcurrentRepliesStayWithinTheBudget(t *testing.T) {
	const size = 1 << 20
	payload := make([]byte, size)
	f := cetest.StartFunction(t, func(w http.ResponseWriter, r *http.Request, ev *event.Event, _ int) {
		out := ev.Clone()
		out.DataEncoded = payload
		cetest.Reply(w, r, out)
	})
	var peak atomic.Int64
	tr := newTransformer(t, f.URL, func(c *Config) {
		c.MaxReply = 2 * size
		c.MaxEvents = 1
		c.ReplyBudget = 4*(2*size) + 1
		c.Concurrency = 32
	})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			u := tr.budget.Used()
			for p := peak.Load(); u > p && !peak.CompareAndSwap(p, u); p = peak.Load() {
			}
			time.Sleep(100 * time.Microsecond)
		}
	}()
	msgs := make([]*runner.Message, 64)
	for i := range msgs {
		msgs[i] = &runner.Message{ID: "m" + strconv.Itoa(i), Value: []byte("x")}
	}
	res, err := tr.Transform(context.Background(), msgs)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	ok := 0
	for _, r := range res {
		if r.Err == nil && len(r.Outputs) == 1 && len(r.Outputs[0].Value) == size {
			ok++
		} else if runner.IsPermanent(r.Err) {
			t.Fatalf("a reply within the limits failed permanently: %v", r.Err)
		}
	}
	if ok != len(msgs) {
		t.Fatalf("%d of %d replies got through: a reply of known length takes its share at once and never waits holding part of the budget", ok, len(msgs))
	}
	if p := peak.Load(); p > tr.budget.Limit() || p == 0 {
		t.Fatalf("budget peak %d, limit %d", p, tr.budget.Limit())
	}
	t.Logf("%d of %d replies of 1 MiB through a budget of %d bytes (peak %d)", ok, len(msgs), tr.budget.Limit(), peak.Load())
}

func TestHugeFanOutIsPermanent(t *testing.T) {
	f := cetest.StartFunction(t, func(w http.ResponseWriter, _ *http.Request, ev *event.Event, _ int) {
		evs := make([]event.Event, 101)
		for i := range evs {
			evs[i] = ev.Clone()
			evs[i].SetID(ev.ID() + "-" + strconv.Itoa(i))
		}
		cetest.ReplyBatch(w, evs)
	})
	tr := newTransformer(t, f.URL, func(c *Config) { c.MaxEvents = 100 })
	r := transformOne(t, tr, &runner.Message{ID: "m", Value: []byte("x")})
	if !runner.IsPermanent(r.Err) || !strings.Contains(r.Err.Error(), "MV_TRANSFORMER_MAX_REPLY_EVENTS") {
		t.Fatalf("want a permanent error naming MV_TRANSFORMER_MAX_REPLY_EVENTS, got %v", r.Err)
	}
	tr2 := newTransformer(t, f.URL, func(c *Config) { c.MaxEvents = 101 })
	if r := transformOne(t, tr2, &runner.Message{ID: "m", Value: []byte("x")}); r.Err != nil || len(r.Outputs) != 101 {
		t.Fatalf("a fan-out at the bound: %d outputs, %v", len(r.Outputs), r.Err)
	}
}

func TestRedirectIsPermanentAndNotPostedAgainWithinTheFloor(t *testing.T) {
	url, calls := cewiretest.RedirectingReceiver(t)
	tr := newTransformer(t, url, nil)
	m := &runner.Message{ID: "m", Value: []byte("x")}
	if r := transformOne(t, tr, m); !runner.IsPermanent(r.Err) || !strings.Contains(r.Err.Error(), "301") {
		t.Fatalf("want a permanent 301 failure, got %v", r.Err)
	}
	// The engine retries at once (MV_RETRY_INTERVAL=1ms); the adapter holds
	// the same message back for the floor, but not another one.
	start := time.Now()
	other := transformOne(t, tr, &runner.Message{ID: "other", Value: []byte("x")})
	if took := time.Since(start); took > cewire.PermanentRetryFloor/2 {
		t.Fatalf("a message never answered permanently waited %v", took)
	}
	if !runner.IsPermanent(other.Err) {
		t.Fatalf("got %v", other.Err)
	}
	start = time.Now()
	for i := 0; i < 3; i++ {
		transformOne(t, tr, m)
	}
	took := time.Since(start)
	if took < 3*cewire.PermanentRetryFloor-100*time.Millisecond {
		t.Fatalf("3 retries of a message answered 301 took %v, want at least 3 x %v", took, cewire.PermanentRetryFloor)
	}
	if c := calls.Load(); c != 5 {
		t.Fatalf("function got %d calls, want 5", c)
	}
}

func TestLimitSettingsValidation(t *testing.T) {
	ok := Config{URL: "http://fn.default.svc", Mode: "binary", Concurrency: 1, Timeout: time.Second, MaxReply: 1 << 20}
	runnertest.ConfigErrors(t, ok, runner.RoleTransformer, []runnertest.ConfigCase[Config]{
		{Name: "max reply above 1 GiB", Edit: func(c *Config) { c.MaxReply = 2 << 30 }, Var: "MV_TRANSFORMER_MAX_REPLY"},
		{Name: "budget below twice the max reply", Edit: func(c *Config) { c.ReplyBudget = 2 << 20 }, Var: "MV_TRANSFORMER_REPLY_BUDGET"},
		{Name: "budget above 64 GiB", Edit: func(c *Config) { c.ReplyBudget = 65 << 30 }, Var: "MV_TRANSFORMER_REPLY_BUDGET"},
		{Name: "budget negative", Edit: func(c *Config) { c.ReplyBudget = -1 }, Var: "MV_TRANSFORMER_REPLY_BUDGET"},
		{Name: "events negative", Edit: func(c *Config) { c.MaxEvents = -1 }, Var: "MV_TRANSFORMER_MAX_REPLY_EVENTS"},
		{Name: "events above a million", Edit: func(c *Config) { c.MaxEvents = 1000001 }, Var: "MV_TRANSFORMER_MAX_REPLY_EVENTS"},
	}, nil)
	big := ok
	big.MaxReply = 200 << 20
	if err := big.Validate(runner.RoleTransformer); err != nil {
		t.Fatalf("a larger max reply with the budget left unset was rejected: %v", err)
	}
	if d := big.withDefaults(); d.ReplyBudget < d.minBudget() {
		t.Fatalf("default budget %d below the minimum %d", d.ReplyBudget, d.minBudget())
	}
}
