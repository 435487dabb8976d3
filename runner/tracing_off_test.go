package runner

import (
	"context"
	"testing"
)

// TestTracingOffAllocatesNothing: with tracing off (no Tracer, so a batch
// has no span) the span steps of a stage and the trace carrying of an
// output allocate nothing, so the hot path pays only the nil checks.
func TestTracingOffAllocatesNothing(t *testing.T) {
	b := &batch{e: &Engine{}}
	ctx := context.Background()
	in := map[string]string{"k": "v"}
	out := map[string]string{"reply": "yes"}
	allocs := testing.AllocsPerRun(1000, func() {
		sctx, span := b.startSpan(ctx, "sink (log)", 500)
		if span != nil || sctx != ctx {
			t.Fatal("a span with tracing off")
		}
		carryTrace(out, in)
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per stage with tracing off, want 0", allocs)
	}
	if len(out) != 1 {
		t.Fatalf("output headers %v: nothing to carry without a traceparent", out)
	}
}
