package cloudevents

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/monovertex/monovertex/adapters/internal/cewire"
	"github.com/monovertex/monovertex/adapters/internal/cewire/cewiretest"
	"github.com/monovertex/monovertex/internal/cetest"
	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/conformance"
	"github.com/monovertex/monovertex/runner/runnertest"
)

func newTransformer(t *testing.T, url string, edit func(*Config)) *Transformer {
	t.Helper()
	cfg := Config{URL: url, Mode: "binary", Concurrency: 16, Timeout: 10 * time.Second, MaxReply: 64 << 20}
	if edit != nil {
		edit(&cfg)
	}
	tr, err := New(cfg, "orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close(context.Background()) })
	return tr
}

func TestConformance(t *testing.T) {
	for _, mode := range []string{"binary", "structured"} {
		t.Run(mode, func(t *testing.T) {
			f := cetest.StartFunction(t, cetest.Reference)
			conformance.RunTransformer(t, conformance.TransformerCase{
				New: func(t *testing.T) runner.Transformer {
					return newTransformer(t, f.URL, func(c *Config) { c.Mode = mode })
				},
				Features: conformance.TransformerFeatures{Lifecycle: conformance.Lifecycle{CloseTwice: true, ConcurrentClose: true, ContinuesAfterErrors: true, BadInput: true}},
			})
		})
	}
}

func transformOne(t *testing.T, tr *Transformer, m *runner.Message) runner.TransformResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := tr.Transform(ctx, []*runner.Message{m})
	if err != nil {
		t.Fatalf("transform: %v", err)
	}
	if len(res) != 1 {
		t.Fatalf("%d results", len(res))
	}
	return res[0]
}

func TestAnswersDecideTheResult(t *testing.T) {
	type want int
	const (
		oneOutput want = iota
		drop
		retryable
		permanent
	)
	cases := []struct {
		name   string
		answer cetest.Answer
		want   want
	}{
		{"200 with a reply event", func(w http.ResponseWriter, r *http.Request, ev *event.Event, _ int) { cetest.Reply(w, r, *ev) }, oneOutput},
		{"202 without a body", status(202, ""), drop},
		{"202 with an event is still a drop", func(w http.ResponseWriter, r *http.Request, ev *event.Event, _ int) {
			_ = cehttp.WriteResponseWriter(r.Context(), binding.ToMessage(ev), http.StatusAccepted, w)
		}, drop},
		{"204", status(204, ""), drop},
		{"200 without a body", status(200, ""), drop},
		{"empty batch", func(w http.ResponseWriter, _ *http.Request, _ *event.Event, _ int) { cetest.ReplyBatch(w, nil) }, drop},
		{"500", status(500, "boom"), retryable},
		{"503", status(503, ""), retryable},
		{"404", status(404, ""), retryable},
		{"408", status(408, ""), retryable},
		{"409", status(409, ""), retryable},
		{"429", status(429, ""), retryable},
		{"400", status(400, "bad"), permanent},
		// The function refuses the runner, not the message: held.
		{"401", status(401, ""), retryable},
		{"403", status(403, ""), retryable},
		{"413", status(413, ""), permanent},
		{"422", status(422, ""), permanent},
		{"302 is not followed", func(w http.ResponseWriter, r *http.Request, _ *event.Event, _ int) {
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		}, permanent},
		{"200 with a plain body", status(200, "hello, not an event"), permanent},
		{"200 with broken structured JSON", func(w http.ResponseWriter, _ *http.Request, _ *event.Event, _ int) {
			w.Header().Set("Content-Type", "application/cloudevents+json")
			_, _ = w.Write([]byte(`{"specversion":"1.0","id":`))
		}, permanent},
		{"200 with an event missing its type", func(w http.ResponseWriter, _ *http.Request, _ *event.Event, _ int) {
			w.Header().Set("Ce-Specversion", "1.0")
			w.Header().Set("Ce-Id", "x")
			w.Header().Set("Ce-Source", "/x")
			_, _ = w.Write([]byte("data"))
		}, permanent},
		{"200 with a broken batch", func(w http.ResponseWriter, _ *http.Request, _ *event.Event, _ int) {
			w.Header().Set("Content-Type", cewire.BatchContentType)
			_, _ = w.Write([]byte(`[{"specversion":"1.0"},`))
		}, permanent},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := cetest.StartFunction(t, c.answer)
			tr := newTransformer(t, f.URL, nil)
			r := transformOne(t, tr, &runner.Message{ID: "m1", Value: []byte("v")})
			switch c.want {
			case oneOutput:
				if r.Err != nil || len(r.Outputs) != 1 {
					t.Fatalf("want one output, got %d outputs, err %v", len(r.Outputs), r.Err)
				}
			case drop:
				if r.Err != nil || len(r.Outputs) != 0 || r.Nack {
					t.Fatalf("want a drop, got %d outputs, err %v", len(r.Outputs), r.Err)
				}
			case retryable:
				if r.Err == nil || runner.IsPermanent(r.Err) {
					t.Fatalf("want a retryable error, got %v", r.Err)
				}
			case permanent:
				if !runner.IsPermanent(r.Err) {
					t.Fatalf("want a permanent error, got %d outputs, err %v", len(r.Outputs), r.Err)
				}
			}
		})
	}
}

func status(code int, body string) cetest.Answer {
	return func(w http.ResponseWriter, _ *http.Request, _ *event.Event, _ int) {
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	}
}

func TestRequestCarriesTheMapping(t *testing.T) {
	f := cetest.StartFunction(t, status(202, ""))
	tr := newTransformer(t, f.URL, func(c *Config) { c.Type = "com.example.order" })
	at := time.UnixMilli(1_700_000_000_123)
	transformOne(t, tr, &runner.Message{
		ID: "order-7", Keys: []string{"eu", "shop,1"}, Value: []byte(`{"n":1}`), EventTime: at,
		Headers: map[string]string{"content-type": "application/json", "origin": "test", "X-Not-An-Ext": "dropped"},
	})
	evs := f.Events()
	if len(evs) != 1 {
		t.Fatalf("function got %d events", len(evs))
	}
	ev := evs[0]
	if ev.ID() != "order-7" || ev.Source() != "/monovertex/orders" || ev.Type() != "com.example.order" ||
		!ev.Time().Equal(at) || ev.DataContentType() != "application/json" || string(ev.Data()) != `{"n":1}` {
		t.Fatalf("event attributes wrong:\n%s", ev)
	}
	ext := ev.Extensions()
	if ext["partitionkey"] != "eu,shop%2C1" || ext["origin"] != "test" || len(ext) != 2 {
		t.Fatalf("extensions %v", ext)
	}
	h := f.Headers()[0]
	if h.Get("Ce-Id") != "order-7" || h.Get("Prefer") != "reply" {
		t.Fatalf("want binary mode with Prefer: reply, headers %v", h)
	}
}

func TestStructuredModeOnTheWire(t *testing.T) {
	f := cetest.StartFunction(t, status(202, ""))
	tr := newTransformer(t, f.URL, func(c *Config) { c.Mode = "structured" })
	transformOne(t, tr, &runner.Message{ID: "s1", Value: []byte("x")})
	if ct := f.Headers()[0].Get("Content-Type"); !strings.HasPrefix(ct, "application/cloudevents+json") {
		t.Fatalf("content type %q, want structured mode", ct)
	}
}

func TestReplyAttributesBecomeTheOutput(t *testing.T) {
	f := cetest.StartFunction(t, func(w http.ResponseWriter, r *http.Request, ev *event.Event, _ int) {
		out := event.New()
		out.SetID("reply-1")
		out.SetSource("/fn/enricher")
		out.SetType("com.example.enriched")
		out.SetExtension("enriched", "yes")
		_ = out.SetData("text/plain", []byte("ENRICHED"))
		cetest.Reply(w, r, out)
	})
	tr := newTransformer(t, f.URL, nil)
	r := transformOne(t, tr, &runner.Message{ID: "in-1", Keys: []string{"k"}, Value: []byte("x")})
	if r.Err != nil || len(r.Outputs) != 1 {
		t.Fatalf("%d outputs, %v", len(r.Outputs), r.Err)
	}
	o := r.Outputs[0]
	if string(o.Value) != "ENRICHED" || o.Headers[cewire.HeaderType] != "com.example.enriched" ||
		o.Headers[cewire.HeaderSource] != "/fn/enricher" || o.Headers["enriched"] != "yes" ||
		o.Headers[cewire.HeaderContentType] != "text/plain" {
		t.Fatalf("output %+v", o)
	}
	if o.Keys != nil {
		t.Fatalf("keys %v: a reply without partitionkey leaves keys to the engine (inherited from the input)", o.Keys)
	}
}

func TestTimeoutIsRetryable(t *testing.T) {
	f := cetest.StartFunction(t, func(w http.ResponseWriter, r *http.Request, _ *event.Event, _ int) {
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
		w.WriteHeader(http.StatusAccepted)
	})
	tr := newTransformer(t, f.URL, func(c *Config) { c.Timeout = 200 * time.Millisecond })
	r := transformOne(t, tr, &runner.Message{ID: "slow", Value: []byte("x")})
	if r.Err == nil || runner.IsPermanent(r.Err) {
		t.Fatalf("want a retryable error, got %v", r.Err)
	}
}

func TestOversizeReplyIsPermanent(t *testing.T) {
	f := cetest.StartFunction(t, func(w http.ResponseWriter, r *http.Request, ev *event.Event, _ int) {
		out := ev.Clone()
		out.DataEncoded = make([]byte, 4096)
		cetest.Reply(w, r, out)
	})
	tr := newTransformer(t, f.URL, func(c *Config) { c.MaxReply = 1024 })
	r := transformOne(t, tr, &runner.Message{ID: "big", Value: []byte("x")})
	if !runner.IsPermanent(r.Err) {
		t.Fatalf("want a permanent error, got %v", r.Err)
	}
}

func TestUnreachableFunctionFailsEachMessageAsUnavailable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close()
	tr := newTransformer(t, url, nil)
	res, err := tr.Transform(context.Background(), []*runner.Message{{ID: "a", Value: []byte("x")}, {ID: "b", Value: []byte("y")}})
	if err != nil || len(res) != 2 {
		t.Fatalf("want one result per message, got %v (results %v)", err, res)
	}
	for i, r := range res {
		var te *cewire.TransportError
		if !runner.IsUnavailable(r.Err) || runner.IsPermanent(r.Err) || !errors.As(r.Err, &te) {
			t.Fatalf("message %d: %v; want an unavailable (not permanent) error wrapping the transport error", i, r.Err)
		}
	}
}

func TestConcurrencyIsBoundedAndUsed(t *testing.T) {
	const limit = 3
	probe := cewiretest.NewInflightProbe(limit)
	f := cetest.StartFunction(t, func(w http.ResponseWriter, r *http.Request, _ *event.Event, _ int) {
		probe.ServeHTTP(w, r)
	})
	tr := newTransformer(t, f.URL, func(c *Config) { c.Concurrency = limit })
	var wg sync.WaitGroup
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msgs := make([]*runner.Message, 12)
			for i := range msgs {
				msgs[i] = &runner.Message{ID: fmt.Sprintf("g%d-%d", g, i), Value: []byte("x")}
			}
			if _, err := tr.Transform(context.Background(), msgs); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	probe.Check(t, "calls")
	if c := f.Connections(); c > limit {
		t.Fatalf("%d connections opened for %d calls in flight: keep-alive not used", c, limit)
	}
}

func TestH2C(t *testing.T) {
	var protos sync.Map
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		protos.Store(r.Proto, true)
		ev, err := cehttp.NewEventFromHTTPRequest(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		cetest.Reference(w, r, ev, 1)
	}))
	srv.Config.Protocols = &p
	srv.Start()
	t.Cleanup(srv.Close)
	tr := newTransformer(t, srv.URL, func(c *Config) { c.H2C = true })
	r := transformOne(t, tr, &runner.Message{ID: "h", Value: []byte("fanout")})
	if r.Err != nil || len(r.Outputs) != 3 {
		t.Fatalf("%d outputs, %v", len(r.Outputs), r.Err)
	}
	if _, ok := protos.Load("HTTP/2.0"); !ok {
		t.Fatalf("function saw no HTTP/2 request")
	}
}

func TestConfigValidation(t *testing.T) {
	ok := Config{URL: "http://fn.default.svc", Mode: "binary", Concurrency: 1, Timeout: time.Second, MaxReply: 1}
	runnertest.ConfigErrors(t, ok, runner.RoleTransformer, []runnertest.ConfigCase[Config]{
		{Name: "missing URL", Edit: func(c *Config) { c.URL = "" }, Var: "MV_TRANSFORMER_URL"},
		{Name: "relative URL", Edit: func(c *Config) { c.URL = "/fn" }, Var: "MV_TRANSFORMER_URL"},
		{Name: "ftp URL", Edit: func(c *Config) { c.URL = "ftp://x" }, Var: "MV_TRANSFORMER_URL"},
		{Name: "mode", Edit: func(c *Config) { c.Mode = "batch" }, Var: "MV_TRANSFORMER_MODE"},
		{Name: "concurrency", Edit: func(c *Config) { c.Concurrency = 0 }, Var: "MV_TRANSFORMER_CONCURRENCY"},
		{Name: "max reply", Edit: func(c *Config) { c.MaxReply = 0 }, Var: "MV_TRANSFORMER_MAX_REPLY"},
		{Name: "ce type", Edit: func(c *Config) { c.Type = "a\nb" }, Var: "MV_CE_TYPE"},
	}, nil)
}

// A large reply is read into a pooled buffer. In binary mode the output's
// value is the reply body itself, so the output carries the buffer's
// release for the engine (after the input's ack); an output decoded out
// of the body (structured mode) holds none, and keeps its bytes while
// later replies reuse the buffer.
func TestLargeRepliesArePooledAndReleasedThroughTheirOutputs(t *testing.T) {
	f := cetest.StartFunction(t, cetest.Reference)
	for _, mode := range []string{"binary", "structured"} {
		t.Run(mode, func(t *testing.T) {
			tr := newTransformer(t, f.URL, func(c *Config) { c.Mode = mode })
			var kept []*runner.Message
			var want [][]byte
			for i := range 6 {
				v := bytes.Repeat([]byte{byte('a' + i)}, 200<<10)
				res := transformOne(t, tr, &runner.Message{ID: fmt.Sprintf("big-%d", i), Value: v})
				if res.Err != nil || len(res.Outputs) != 1 {
					t.Fatalf("reply %d: %+v", i, res)
				}
				o := res.Outputs[0]
				if !bytes.Equal(o.Value, v) {
					t.Fatalf("reply %d: output of %d bytes differs from the %d sent", i, len(o.Value), len(v))
				}
				if mode == "binary" && o.Release == nil {
					t.Fatalf("reply %d: a binary reply's output holds its pooled body without a Release", i)
				}
				if o.Release != nil {
					o.Release() // as the engine does after the ack
					continue
				}
				kept, want = append(kept, o), append(want, v)
				for j, k := range kept {
					if !bytes.Equal(k.Value, want[j]) {
						t.Fatalf("after reply %d the output of an earlier reply changed: it aliased a released buffer", i)
					}
				}
			}
		})
	}
}
