package http

import (
	"context"
	"net/http"
	"testing"

	"github.com/monovertex/monovertex/adapters/internal/cewire"
	"github.com/monovertex/monovertex/runner"
)

// TestTraceContextOnMessages: the W3C trace context reaches the message
// headers from the traceparent/tracestate request headers (plain body,
// binary and structured CloudEvents) and from the CloudEvents
// distributed-tracing extension, which wins over the request header.
func TestTraceContextOnMessages(t *testing.T) {
	const (
		callTP  = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
		eventTP = "00-11111111111111111111111111111111-2222222222222222-01"
	)
	for _, c := range []struct {
		name           string
		header         http.Header
		body           string
		wantTP, wantTS string
	}{
		{"plain body with the headers", hdr("Traceparent", callTP, "Tracestate", "a=1"), "x", callTP, "a=1"},
		{"binary event with the headers", hdr("Ce-Specversion", "1.0", "Ce-Id", "b", "Ce-Source", "/s", "Ce-Type", "t", "Traceparent", callTP, "Tracestate", "a=1"), "x", callTP, "a=1"},
		{"binary event with the extension", hdr("Ce-Specversion", "1.0", "Ce-Id", "b", "Ce-Source", "/s", "Ce-Type", "t", "Ce-Traceparent", eventTP, "Traceparent", callTP), "x", eventTP, ""},
		{"structured event with the headers", hdr("Content-Type", "application/cloudevents+json", "Traceparent", callTP),
			`{"specversion":"1.0","id":"s","source":"/s","type":"t","data":"x"}`, callTP, ""},
		{"structured event with the extension", hdr("Content-Type", "application/cloudevents+json", "Traceparent", callTP),
			`{"specversion":"1.0","id":"s","source":"/s","type":"t","traceparent":"` + eventTP + `","tracestate":"e=2","data":"x"}`, eventTP, "e=2"},
		{"batch without any", hdr("Content-Type", cewire.BatchContentType), `[{"specversion":"1.0","id":"s","source":"/s","type":"t","data":"x"}]`, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			src, url := start(t, testConfig())
			ch := post(url, c.header, c.body)
			m := readN(t, src, 1)[0]
			tp, has := m.Headers[runner.TraceParentHeader]
			if tp != c.wantTP || m.Headers[runner.TraceStateHeader] != c.wantTS || (c.wantTP == "" && has) {
				t.Fatalf("headers %v: want traceparent %q and tracestate %q", m.Headers, c.wantTP, c.wantTS)
			}
			_ = src.Ack(context.Background(), []*runner.Message{m})
			if r := await(t, ch); r.status != http.StatusOK {
				t.Fatalf("answer %d", r.status)
			}
		})
	}
}
