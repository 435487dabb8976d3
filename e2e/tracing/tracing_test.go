// Package tracing tests OpenTelemetry tracing end to end: the runner binary
// between a caller, a CloudEvents function and a CloudEvents sink, sending
// its spans to an OTLP/gRPC receiver in this process.
package tracing

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	otelobs "github.com/cloudevents/sdk-go/observability/opentelemetry/v2/client"
	"github.com/cloudevents/sdk-go/v2/event"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	"github.com/monovertex/monovertex/internal/cetest"
	"github.com/monovertex/monovertex/internal/testutil"
)

// collector is an OTLP/gRPC trace receiver on 127.0.0.1: the collector's
// TraceService, keeping every span with its resource's service.name.
type collector struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []receivedSpan
}

type receivedSpan struct {
	service string
	span    *tracepb.Span
}

func (c *collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.spans = append(c.spans, receivedSpan{service, s})
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// inTrace returns the spans received for trace id, by name.
func (c *collector) inTrace(id trace.TraceID) map[string][]receivedSpan {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string][]receivedSpan{}
	for _, s := range c.spans {
		if bytes.Equal(s.span.GetTraceId(), id[:]) {
			out[s.span.GetName()] = append(out[s.span.GetName()], s)
		}
	}
	return out
}

func startCollector(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, c)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	collectors[t.Name()] = c
	return "http://" + ln.Addr().String()
}

var collectors = map[string]*collector{}

func intAttr(s *tracepb.Span, key string) int64 {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			return kv.GetValue().GetIntValue()
		}
	}
	return -1
}

// TestTraceThroughEveryHop: two requests, one with a W3C traceparent
// header (a binary CloudEvent) and one with the CloudEvents
// distributed-tracing extension (a structured CloudEvent), go through the
// HTTP source, a CloudEvents function that drops the trace context from
// its reply, and the CloudEvents sink. Each arrives at the function and at
// the sink in its own trace (extension and header), and the collector gets
// the runner's spans for every stage of each batch (read, transformer,
// sink, ack) in that trace: the batch span a child of the caller's span
// (each batch holds one request), the stage spans children of the batch
// span, each counting one message.
func TestTraceThroughEveryHop(t *testing.T) {
	endpoint := startCollector(t)
	col := collectors[t.Name()]
	fn := cetest.StartFunction(t, func(w http.ResponseWriter, r *http.Request, ev *event.Event, _ int) {
		out := ev.Clone()
		// A function that does not propagate: the runner carries the
		// input's trace context to the outputs itself.
		out.SetExtension("traceparent", nil)
		out.SetExtension("tracestate", nil)
		out.SetExtension("handled", "yes")
		cetest.Reply(w, r, out)
	})
	sink := cetest.StartReceiver(t, nil)
	p := testutil.StartRunner(t, map[string]string{
		"MV_SOURCE":                   "http",
		"MV_TRANSFORMER":              "cloudevents",
		"MV_TRANSFORMER_URL":          fn.URL,
		"MV_SINK":                     "cloudevents",
		"K_SINK":                      sink.URL,
		"MV_READ_TIMEOUT":             "50ms",
		"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
		"OTEL_SERVICE_NAME":           "e2e-runner",
		"OTEL_BSP_SCHEDULE_DELAY":     "100",
	})
	p.WaitReady(90 * time.Second)

	requests := []struct {
		id, traceID, spanID string
		header              map[string]string
		body                string
	}{
		{id: "with-header", traceID: "4bf92f3577b34da6a3ce929d0e0e4736", spanID: "00f067aa0ba902b7"},
		{id: "with-extension", traceID: "0af7651916cd43dd8448eb211c80319c", spanID: "b7ad6b7169203331"},
	}
	requests[0].header = map[string]string{"Ce-Specversion": "1.0", "Ce-Id": "with-header", "Ce-Source": "/caller", "Ce-Type": "t",
		"Traceparent": "00-" + requests[0].traceID + "-" + requests[0].spanID + "-01", "Tracestate": "caller=1"}
	requests[0].body = "one"
	requests[1].header = map[string]string{"Content-Type": "application/cloudevents+json"}
	requests[1].body = fmt.Sprintf(`{"specversion":"1.0","id":"with-extension","source":"/caller","type":"t","data":"two","traceparent":"00-%s-%s-01"}`,
		requests[1].traceID, requests[1].spanID)
	// One after the other, so each request is a batch of its own.
	for _, r := range requests {
		if code, _ := testutil.Post(t, p.PortURL+"/", []byte(r.body), r.header); code != http.StatusOK {
			t.Fatalf("%s: answer %d, want 200", r.id, code)
		}
	}

	events := sink.WaitCount(t, 2, 30*time.Second)
	sinkHeaders := sink.Headers()
	for _, r := range requests {
		var got *event.Event
		var header http.Header
		for i := range events {
			if events[i].ID() == r.id {
				got, header = &events[i], sinkHeaders[i]
			}
		}
		if got == nil {
			t.Fatalf("%s did not reach the sink", r.id)
		}
		// The extension, read the way sdk-go's OpenTelemetry support reads it.
		sc := trace.SpanContextFromContext(otelobs.ExtractDistributedTracingExtension(context.Background(), *got))
		if sc.TraceID().String() != r.traceID || got.Extensions()["handled"] != "yes" {
			t.Fatalf("%s at the sink in trace %s (extensions %v), want %s", r.id, sc.TraceID(), got.Extensions(), r.traceID)
		}
		if tp := header.Get("Traceparent"); !strings.Contains(tp, r.traceID) {
			t.Fatalf("%s at the sink with traceparent header %q, want trace %s", r.id, tp, r.traceID)
		}
		var fnSaw bool
		for i, ev := range fn.Events() {
			if ev.ID() == r.id {
				fnSaw = strings.Contains(fn.Headers()[i].Get("Traceparent"), r.traceID) && strings.Contains(fmt.Sprint(ev.Extensions()["traceparent"]), r.traceID)
			}
		}
		if !fnSaw {
			t.Fatalf("%s reached the function without its trace context in the traceparent header and extension", r.id)
		}
	}

	stages := []string{"batch", "read (http)", "transformer (cloudevents)", "sink (cloudevents)", "ack"}
	for _, r := range requests {
		raw, _ := hex.DecodeString(r.traceID)
		var id trace.TraceID
		copy(id[:], raw)
		var spans map[string][]receivedSpan
		testutil.WaitFor(t, 30*time.Second, "the runner's spans of "+r.id, func() bool {
			spans = col.inTrace(id)
			for _, name := range stages {
				if len(spans[name]) == 0 {
					return false
				}
			}
			return true
		})
		batch := spans["batch"]
		if len(batch) != 1 || hex.EncodeToString(batch[0].span.GetParentSpanId()) != r.spanID || batch[0].service != "e2e-runner" {
			t.Fatalf("%s: %d batch spans, the first under %x from %q: want one, a child of the caller's span %s, from e2e-runner",
				r.id, len(batch), batch[0].span.GetParentSpanId(), batch[0].service, r.spanID)
		}
		for _, name := range stages[1:] {
			for _, s := range spans[name] {
				if !bytes.Equal(s.span.GetParentSpanId(), batch[0].span.GetSpanId()) {
					t.Fatalf("%s: %s span under %x, want the batch span %x", r.id, name, s.span.GetParentSpanId(), batch[0].span.GetSpanId())
				}
				if n := intAttr(s.span, "messaging.batch.message_count"); n != 1 {
					t.Fatalf("%s: %s span counts %d messages, want 1", r.id, name, n)
				}
			}
		}
		if len(spans["ack"]) != 1 {
			t.Fatalf("%s: %d ack spans, want 1", r.id, len(spans["ack"]))
		}
	}

	// Nothing lost: both read, written and acked.
	st, err := p.Status()
	if err != nil {
		t.Fatal(err)
	}
	if st.Totals.Read != 2 || st.Totals.Acked != 2 || st.Totals.Written != 2 {
		t.Fatalf("totals %+v: want 2 read, written and acked", st.Totals)
	}
}
