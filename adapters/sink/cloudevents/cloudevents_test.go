package cloudevents

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/protocol"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/monovertex/monovertex/adapters/internal/cewire"
	"github.com/monovertex/monovertex/adapters/internal/cewire/cewiretest"
	"github.com/monovertex/monovertex/internal/cetest"
	"github.com/monovertex/monovertex/internal/testutil"
	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/conformance"
	"github.com/monovertex/monovertex/runner/runnertest"
)

// messages maps what the receiver accepted back to messages.
func messages(t *testing.T, r *cetest.Receiver) []*runner.Message {
	var out []*runner.Message
	for _, ev := range r.Events() {
		m, err := cewire.ToMessage(&ev)
		if err != nil {
			t.Fatalf("receiver accepted an event that does not map back: %v", err)
		}
		out = append(out, m)
	}
	return out
}

func newSink(t *testing.T, role runner.Role, url string, edit func(*Config)) *Sink {
	t.Helper()
	cfg := Config{Mode: "binary", Concurrency: 16, Timeout: ptr(10 * time.Second)}
	if role == runner.RoleFallbackSink {
		cfg.Fallback.URL = url
	} else {
		cfg.Sink.URL = url
	}
	if edit != nil {
		edit(&cfg)
	}
	s, err := New(cfg, role, "orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// refuseFail answers 500 to events whose data starts with "fail", as the
// conformance suite's AnswersFailure asks.
func refuseFail(ev event.Event) protocol.Result {
	if strings.HasPrefix(string(ev.Data()), "fail") {
		return cehttp.NewResult(http.StatusInternalServerError, "refused")
	}
	return nil
}

func TestConformance(t *testing.T) {
	for _, mode := range []string{"binary", "structured"} {
		t.Run(mode, func(t *testing.T) {
			var r *cetest.Receiver
			conformance.RunSink(t, conformance.SinkCase{
				New: func(t *testing.T) runner.Sink {
					r = cetest.StartReceiver(t, refuseFail)
					return newSink(t, runner.RoleSink, r.URL, func(c *Config) { c.Mode = mode })
				},
				Received: func(t *testing.T) []*runner.Message { return messages(t, r) },
				Features: conformance.SinkFeatures{Lifecycle: conformance.Lifecycle{CloseTwice: true, ConcurrentClose: true, ContinuesAfterErrors: true, BadInput: true}, AnswersFailure: true, KeepsKeys: true, KeepsEventTime: true, KeepsHeaders: true},
			})
		})
	}
}

func TestFallbackRoleUsesItsURL(t *testing.T) {
	r := cetest.StartReceiver(t, nil)
	s := newSink(t, runner.RoleFallbackSink, r.URL, func(c *Config) { c.Sink.URL = "http://127.0.0.1:1/never" })
	res, err := s.Write(context.Background(), []*runner.Message{{ID: "fb-1", Value: []byte("x")}})
	if err != nil || res[0].Status != runner.WriteOK {
		t.Fatalf("write: %v %v", res, err)
	}
	if n := len(r.Events()); n != 1 {
		t.Fatalf("fallback receiver got %d events", n)
	}
}

func TestStatusesFollowKnativeRules(t *testing.T) {
	cases := []struct {
		code      int
		ok        bool
		permanent bool
	}{
		{200, true, false}, {201, true, false}, {202, true, false}, {204, true, false},
		{500, false, false}, {502, false, false}, {503, false, false},
		{404, false, false}, {408, false, false}, {409, false, false}, {429, false, false},
		{400, false, true}, {413, false, true}, {422, false, true},
		// 401 and 403 refuse the runner (an OIDC token, an EventPolicy),
		// not the message: held (Unavailable), never dropped for it.
		{401, false, false}, {403, false, false},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.code), func(t *testing.T) {
			r := cetest.StartReceiver(t, func(event.Event) protocol.Result {
				if c.code == 200 {
					return nil
				}
				return cehttp.NewResult(c.code, "answer %d", c.code)
			})
			s := newSink(t, runner.RoleSink, r.URL, nil)
			res, err := s.Write(context.Background(), []*runner.Message{{ID: "s", Value: []byte("x")}})
			if err != nil {
				t.Fatalf("whole-call error: %v", err)
			}
			got := res[0]
			switch {
			case c.ok && got.Status != runner.WriteOK:
				t.Fatalf("status %s (%v), want ok", got.Status, got.Err)
			case !c.ok && (got.Status != runner.WriteFailed || got.Err == nil):
				t.Fatalf("status %s (%v), want failed", got.Status, got.Err)
			case !c.ok && runner.IsPermanent(got.Err) != c.permanent:
				t.Fatalf("permanent=%v (%v), want %v", runner.IsPermanent(got.Err), got.Err, c.permanent)
			}
			if !c.ok && !strings.Contains(got.Err.Error(), fmt.Sprint(c.code)) {
				t.Fatalf("error %q does not name the status", got.Err)
			}
		})
	}
}

func TestRedirectIsPermanent(t *testing.T) {
	srv := httptest.NewServer(http.RedirectHandler("/elsewhere", http.StatusTemporaryRedirect))
	defer srv.Close()
	s := newSink(t, runner.RoleSink, srv.URL, nil)
	res, err := s.Write(context.Background(), []*runner.Message{{ID: "r", Value: []byte("x")}})
	if err != nil || !runner.IsPermanent(res[0].Err) {
		t.Fatalf("want a permanent failure, got %v %v", res, err)
	}
}

func TestReplyEventIsIgnored(t *testing.T) {
	r := cetest.StartReceiver(t, nil)
	var replies atomic.Int64
	// A sink that answers with an event, like a function would.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Ce-Specversion", "1.0")
		w.Header().Set("Ce-Id", "reply")
		w.Header().Set("Ce-Source", "/x")
		w.Header().Set("Ce-Type", "reply")
		_, _ = w.Write([]byte("reply data"))
		replies.Add(1)
	}))
	defer srv.Close()
	s := newSink(t, runner.RoleSink, srv.URL, nil)
	res, err := s.Write(context.Background(), []*runner.Message{{ID: "a", Value: []byte("x")}, {ID: "b", Value: []byte("y")}})
	if err != nil || res[0].Status != runner.WriteOK || res[1].Status != runner.WriteOK {
		t.Fatalf("write: %v %v", res, err)
	}
	if replies.Load() != 2 || len(r.Events()) != 0 {
		t.Fatalf("replies %d, events elsewhere %d", replies.Load(), len(r.Events()))
	}
	if h := r.Headers(); len(h) != 0 {
		t.Fatalf("unexpected deliveries: %v", h)
	}
}

func TestOverridesAndAttributesArrive(t *testing.T) {
	r := cetest.StartReceiver(t, nil)
	s := newSink(t, runner.RoleSink, r.URL, func(c *Config) {
		c.Overrides = `{"extensions":{"team":"payments","origin":"overridden"}}`
		c.Source = "https://example.com/monovertex"
		c.Type = "com.example.order"
	})
	at := time.UnixMilli(1_700_000_000_001)
	res, err := s.Write(context.Background(), []*runner.Message{{
		ID: "o-1", Keys: []string{"user-1"}, Value: []byte("payload"), EventTime: at,
		Headers: map[string]string{"origin": "msg", "content-type": "text/plain", "Not_Valid": "x"},
	}})
	if err != nil || res[0].Status != runner.WriteOK {
		t.Fatalf("write: %v %v", res, err)
	}
	evs := r.Events()
	if len(evs) != 1 {
		t.Fatalf("%d events", len(evs))
	}
	ev := evs[0]
	if ev.ID() != "o-1" || ev.Source() != "https://example.com/monovertex" || ev.Type() != "com.example.order" ||
		!ev.Time().Equal(at) || ev.DataContentType() != "text/plain" || string(ev.Data()) != "payload" {
		t.Fatalf("attributes:\n%s", ev)
	}
	want := map[string]any{"team": "payments", "origin": "overridden", "partitionkey": "user-1"}
	if fmt.Sprint(ev.Extensions()) != fmt.Sprint(want) {
		t.Fatalf("extensions %v, want %v", ev.Extensions(), want)
	}
	if r.Headers()[0].Get("Ce-Id") != "o-1" {
		t.Fatalf("want binary mode, headers %v", r.Headers()[0])
	}
	if r.Headers()[0].Get("Prefer") != "" {
		t.Fatalf("the sink must not ask for replies")
	}
}

func TestUnreachableSinkFailsEachMessageAsUnavailableThenRecovers(t *testing.T) {
	addr := "127.0.0.1:" + strconv.Itoa(testutil.FreePort(t)) // no one takes it meanwhile
	s := newSink(t, runner.RoleSink, "http://"+addr, nil)
	msgs := []*runner.Message{{ID: "u1", Value: []byte("x")}, {ID: "u2", Value: []byte("y")}}
	res, err := s.Write(context.Background(), msgs)
	if err != nil || len(res) != 2 {
		t.Fatalf("want one result per message, got %v, %v", res, err)
	}
	for i, r := range res {
		if r.Status != runner.WriteFailed || !runner.IsUnavailable(r.Err) || !cewire.IsUnreachable(r.Err) {
			t.Fatalf("message %d: %+v; want a failure marked unavailable that wraps the dial error", i, r)
		}
	}
	// The sink comes up on the same address: the retried batch goes through.
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var got atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := cehttp.NewEventFromHTTPRequest(r); err == nil {
			got.Add(1)
		}
		w.WriteHeader(http.StatusAccepted)
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	res, err = s.Write(context.Background(), msgs)
	if err != nil || res[0].Status != runner.WriteOK || res[1].Status != runner.WriteOK || got.Load() != 2 {
		t.Fatalf("after recovery: %v %v, %d received", res, err, got.Load())
	}
}

func TestTimeoutIsRetryable(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Reading the body lets the server notice the client hanging up.
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}))
	defer srv.Close()
	for _, c := range []struct {
		name string
		set  func(*Config)
	}{
		{"MV_CE_SINK_TIMEOUT", func(c *Config) { c.Timeout = ptr(200 * time.Millisecond) }},
		// Knative's K_SINK_TIMEOUT bounds the delivery when
		// MV_CE_SINK_TIMEOUT is not set.
		{"K_SINK_TIMEOUT", func(c *Config) { c.Timeout, c.SinkTimeout = nil, ptr(1) }},
	} {
		s := newSink(t, runner.RoleSink, srv.URL, c.set)
		res, err := s.Write(context.Background(), []*runner.Message{{ID: "t", Value: []byte("x")}})
		if err != nil || res[0].Status != runner.WriteFailed || runner.IsPermanent(res[0].Err) || !errors.Is(res[0].Err, context.DeadlineExceeded) {
			t.Fatalf("%s: want a retryable timeout, got %v %v", c.name, res, err)
		}
	}
}

func TestConcurrencyIsBoundedAndUsed(t *testing.T) {
	const limit = 4
	probe := cewiretest.NewInflightProbe(limit)
	srv := httptest.NewServer(probe)
	defer srv.Close()
	s := newSink(t, runner.RoleSink, srv.URL, func(c *Config) { c.Concurrency = limit })
	msgs := make([]*runner.Message, 20)
	for i := range msgs {
		msgs[i] = &runner.Message{ID: fmt.Sprint(i), Value: []byte("x")}
	}
	res, err := s.Write(context.Background(), msgs)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Status != runner.WriteOK {
			t.Fatalf("%v", r.Err)
		}
	}
	probe.Check(t, "deliveries")
}

func TestInvalidMessageIDIsPermanent(t *testing.T) {
	r := cetest.StartReceiver(t, nil)
	s := newSink(t, runner.RoleSink, r.URL, nil)
	res, err := s.Write(context.Background(), []*runner.Message{{ID: " ", Value: []byte("x")}, {ID: "ok", Value: []byte("y")}})
	if err != nil || !runner.IsPermanent(res[0].Err) || res[1].Status != runner.WriteOK {
		t.Fatalf("results %v, err %v", res, err)
	}
}

func TestConfigValidation(t *testing.T) {
	ok := Config{Roles: runner.Roles[Target]{Sink: Target{URL: "http://broker-ingress.knative-eventing.svc/ns/default"}}, Mode: "binary", Concurrency: 1, Timeout: ptr(time.Second)}
	type cases = []runnertest.ConfigCase[Config]
	runnertest.ConfigErrors(t, ok, runner.RoleSink, cases{
		{Name: "missing K_SINK", Edit: func(c *Config) { c.Sink.URL = "" }, Var: "K_SINK"},
		{Name: "relative K_SINK", Edit: func(c *Config) { c.Sink.URL = "broker" }, Var: "K_SINK"},
		{Name: "overrides not JSON", Edit: func(c *Config) { c.Overrides = "team=payments" }, Var: "K_CE_OVERRIDES"},
		{Name: "override name invalid", Edit: func(c *Config) { c.Overrides = `{"extensions":{"Team-Name":"x"}}` }, Var: "K_CE_OVERRIDES"},
		{Name: "override of an attribute", Edit: func(c *Config) { c.Overrides = `{"extensions":{"type":"x"}}` }, Var: "K_CE_OVERRIDES"},
		{Name: "mode", Edit: func(c *Config) { c.Mode = "json" }, Var: "MV_CE_SINK_MODE"},
		{Name: "concurrency", Edit: func(c *Config) { c.Concurrency = -1 }, Var: "MV_CE_SINK_CONCURRENCY"},
		{Name: "ce source", Edit: func(c *Config) { c.Source = "%zz" }, Var: "MV_CE_SOURCE"},
	}, nil)
	withFallback := ok
	withFallback.Fallback.URL = "http://fallback.default.svc"
	runnertest.ConfigErrors(t, withFallback, runner.RoleFallbackSink, cases{
		{Name: "missing fallback URL", Edit: func(c *Config) { c.Fallback.URL = "" }, Var: "MV_FALLBACK_SINK_URL"},
	}, nil)
	withOverrides := ok
	withOverrides.Overrides = `{"extensions":{"team":"payments"}}`
	if err := withOverrides.Validate(runner.RoleSink); err != nil {
		t.Fatalf("valid overrides rejected: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }
