package runner_test

import (
	"fmt"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/runnertest"
)

// traceparent builds a sampled W3C traceparent for trace t and span s.
func traceparent(t, s byte) string {
	return fmt.Sprintf("00-%032x-%016x-01", t, s)
}

func tracedEngine(t *testing.T, msgs []*runner.Message, p runner.Pipeline) (*tracetest.SpanRecorder, *runnertest.Source) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	src := runnertest.NewSource(msgs)
	p.Kinds.Source, p.Kinds.Sink, p.Kinds.Fallback = "mem", "mem", "mem"
	opts := runner.Options{BatchSize: len(msgs), Tracer: tp.Tracer("test")}
	if p.Fallback != nil {
		opts.OnFailure = runner.OnFailureFallback
	}
	runAcked(t, opts, src, len(msgs), p)
	return rec, src
}

func intAttr(s sdktrace.ReadOnlySpan, key string) (int64, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == attribute.Key(key) {
			return kv.Value.AsInt64(), true
		}
	}
	return 0, false
}

// TestTracingBatchOfOneTraceIsItsChild: a batch whose messages all carry
// one trace context gets a batch span that is a child of it, with a span
// per stage (read, transformer, sink, fallback sink, ack) under it that
// counts the messages, and the trace context travels on to the sink on
// outputs that did not carry it (a transformer reply without one).
func TestTracingBatchOfOneTraceIsItsChild(t *testing.T) {
	const n = 10
	msgs := runnertest.Messages(n)
	tp := traceparent(0xab, 0xcd)
	for _, m := range msgs {
		m.Headers = map[string]string{runner.TraceParentHeader: tp, runner.TraceStateHeader: "vendor=1"}
	}
	tr := runnertest.NewTransformer(func(m *runner.Message, _ int) runner.TransformResult {
		// A reply with headers of its own but no trace context.
		return runner.TransformResult{Outputs: []*runner.Message{{Value: m.Value, Headers: map[string]string{"reply": "yes"}}}}
	})
	sink := runnertest.NewSink(func(m *runner.Message, _ int) runner.WriteResult {
		if num(m.ID) < 3 {
			return runner.WriteResult{Status: runner.WriteFallback}
		}
		return runner.WriteResult{}
	})
	fb := runnertest.NewSink(func(*runner.Message, int) runner.WriteResult { return runner.WriteResult{} })
	rec, _ := tracedEngine(t, msgs, runner.Pipeline{
		Stages: []runner.Stage{{Kind: "mem", Role: runner.RoleTransformer, Transformer: tr}}, Sink: sink, Fallback: fb,
	})
	for _, id := range sink.WrittenIDs() {
		h := sink.Message(id).Headers
		if h[runner.TraceParentHeader] != tp || h[runner.TraceStateHeader] != "vendor=1" || h["reply"] != "yes" {
			t.Fatalf("sink got %s with headers %v: want the input's trace context beside the reply's header", id, h)
		}
	}

	spans := rec.Ended()
	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byName[s.Name()] = s
	}
	batch, ok := byName["batch"]
	if !ok {
		t.Fatalf("no batch span among %d spans", len(spans))
	}
	wantTrace := batch.SpanContext().TraceID()
	if wantTrace.String() != fmt.Sprintf("%032x", 0xab) || batch.Parent().SpanID().String() != fmt.Sprintf("%016x", 0xcd) || !batch.Parent().IsRemote() {
		t.Fatalf("batch span in trace %s under %s: want a child of the messages' context %s", wantTrace, batch.Parent().SpanID(), tp)
	}
	for _, c := range []struct {
		name     string
		messages int64
	}{
		{"read (mem)", n}, {"transformer (mem)", n}, {"sink (mem)", n}, {"fallback sink (mem)", 3}, {"ack", -1},
	} {
		s, ok := byName[c.name]
		if !ok {
			t.Fatalf("no %q span; spans: %v", c.name, names(spans))
		}
		if s.SpanContext().TraceID() != wantTrace || s.Parent().SpanID() != batch.SpanContext().SpanID() {
			t.Fatalf("%s span is in trace %s under %s: want the batch span's child", c.name, s.SpanContext().TraceID(), s.Parent().SpanID())
		}
		if got, _ := intAttr(s, "messaging.batch.message_count"); c.messages >= 0 && got != c.messages {
			t.Fatalf("%s span counts %d messages, want %d", c.name, got, c.messages)
		}
	}
	var acked int64
	for _, s := range spans {
		if s.Name() == "ack" {
			c, _ := intAttr(s, "messaging.batch.message_count")
			acked += c
		}
	}
	if acked != n {
		t.Fatalf("ack spans count %d messages, want %d", acked, n)
	}
	if w, _ := intAttr(byName["sink (mem)"], "mvtx.written"); w != n-3 {
		t.Fatalf("sink span says %d written, want %d", w, n-3)
	}
}

// TestTracingMixedBatchLinksEveryTrace: a batch of messages from several
// traces (and some from none) gets a root batch span linked to each
// distinct trace context once.
func TestTracingMixedBatchLinksEveryTrace(t *testing.T) {
	msgs := runnertest.Messages(12)
	for i, m := range msgs {
		if i%4 != 3 {
			m.Headers = map[string]string{runner.TraceParentHeader: traceparent(byte(1+i%4), byte(1+i%4))}
		}
	}
	msgs[0].Headers = map[string]string{runner.TraceParentHeader: "not-a-traceparent"}
	sink := runnertest.NewSink(func(*runner.Message, int) runner.WriteResult { return runner.WriteResult{} })
	rec, _ := tracedEngine(t, msgs, runner.Pipeline{Sink: sink})
	var batch sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "batch" {
			batch = s
		}
	}
	if batch == nil {
		t.Fatal("no batch span")
	}
	if batch.Parent().IsValid() {
		t.Fatalf("batch span has parent %s: want a root span for a batch of several traces", batch.Parent().SpanID())
	}
	got := map[trace.TraceID]bool{}
	for _, l := range batch.Links() {
		if got[l.SpanContext.TraceID()] {
			t.Fatalf("trace %s linked twice", l.SpanContext.TraceID())
		}
		got[l.SpanContext.TraceID()] = true
	}
	if len(got) != 3 {
		t.Fatalf("batch span links %d traces (%v), want 3", len(got), got)
	}
	for i := byte(1); i <= 3; i++ {
		var id trace.TraceID
		id[15] = i
		if !got[id] {
			t.Fatalf("trace %s not linked", id)
		}
	}
}

// TestTracingOffRecordsNothing: without a Tracer the engine makes no
// spans and leaves the headers as they were.
func TestTracingOffRecordsNothing(t *testing.T) {
	msgs := runnertest.Messages(5)
	for _, m := range msgs {
		m.Headers = map[string]string{runner.TraceParentHeader: traceparent(9, 9)}
	}
	sink := runnertest.NewSink(func(*runner.Message, int) runner.WriteResult { return runner.WriteResult{} })
	src := runnertest.NewSource(msgs)
	if _, err := runPipeline(t, runner.Options{BatchSize: 5}, runner.Pipeline{Source: src, Sink: sink}); err != nil {
		t.Fatal(err)
	}
	if len(src.Acked()) != 5 || sink.Message("m-4").Headers[runner.TraceParentHeader] != traceparent(9, 9) {
		t.Fatalf("acked %d, sink headers %v", len(src.Acked()), sink.Message("m-4").Headers)
	}
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}
