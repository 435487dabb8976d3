package cewire

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/monovertex/monovertex/runner"
)

// BenchmarkWriteBinaryRequest is the per-post cost of building a binary
// request for a 1 KiB message with keys and an event time, as the
// CloudEvents transformer and sink build one for every message.
func BenchmarkWriteBinaryRequest(b *testing.B) {
	m := newMapper(b)
	msg := &runner.Message{ID: "orders-0-123456", Value: make([]byte, 1024), Keys: []string{"k1"},
		EventTime: time.UnixMilli(1_700_000_000_123), Headers: map[string]string{"content-type": "application/octet-stream"}}
	b.ReportAllocs()
	for b.Loop() {
		ev, err := m.ToEvent(msg)
		if err != nil {
			b.Fatal(err)
		}
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, "http://127.0.0.1/", nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := WriteRequest(context.Background(), req, &ev, ModeBinary); err != nil {
			b.Fatal(err)
		}
	}
}
