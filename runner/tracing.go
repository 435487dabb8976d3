package runner

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// The message headers that carry a message's W3C trace context. They are
// also the names of the CloudEvents distributed-tracing extension, which
// the CloudEvents adapters map to and from headers, and Numaflow containers
// receive them with the other headers.
const (
	TraceParentHeader = "traceparent"
	TraceStateHeader  = "tracestate"
)

// maxLinks bounds the links of one batch span: the SDK keeps 128 by
// default and drops the rest anyway.
const maxLinks = 128

// Span attribute keys. The message count uses the OpenTelemetry messaging
// convention's name, which trace UIs know.
var (
	attrMessages = attribute.Key("messaging.batch.message_count")
	attrOutputs  = attribute.Key("mvtx.outputs")
	attrWritten  = attribute.Key("mvtx.written")
	attrAttempts = attribute.Key("mvtx.attempts")
	attrLinked   = attribute.Key("mvtx.linked_traces")
)

var traceContext = propagation.TraceContext{}

// messageTrace returns the trace context a message carries in its headers,
// or an invalid one.
func messageTrace(m *Message) trace.SpanContext {
	if m.Headers[TraceParentHeader] == "" {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(traceContext.Extract(context.Background(), propagation.MapCarrier(m.Headers)))
}

// startBatch starts the span of one read batch, and its read span, which
// ran from readStart to readEnd. When every message of the batch carries
// the same trace context (one request, or one upstream batch), the batch
// span is a child of it, so the runner's work shows inside the caller's
// trace; otherwise it is a root span linked to each message's trace (at
// most maxLinks of them), as OpenTelemetry's messaging conventions do for
// batches. Called only with tracing on.
func (e *Engine) startBatch(ctx context.Context, msgs []*Message, readStart, readEnd time.Time) (context.Context, trace.Span) {
	var (
		parent trace.SpanContext
		same   = true
		last   string
		links  []trace.Link
		seen   = map[[24]byte]bool{}
	)
	for _, m := range msgs {
		tp := m.Headers[TraceParentHeader]
		if tp == "" {
			same = false
			continue
		}
		if tp == last {
			continue // the common case of many messages of one request
		}
		last = tp
		sc := messageTrace(m)
		if !sc.IsValid() {
			same = false
			continue
		}
		if !parent.IsValid() {
			parent = sc
		} else if sc.TraceID() != parent.TraceID() || sc.SpanID() != parent.SpanID() {
			same = false
		}
		var key [24]byte
		tid, sid := sc.TraceID(), sc.SpanID()
		copy(key[:16], tid[:])
		copy(key[16:], sid[:])
		if !seen[key] && len(links) < maxLinks {
			seen[key] = true
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	opts := []trace.SpanStartOption{trace.WithTimestamp(readStart), trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attrMessages.Int(len(msgs)), attrLinked.Int(len(links)))}
	if same && parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
	} else {
		opts = append(opts, trace.WithNewRoot(), trace.WithLinks(links...))
	}
	ctx, span := e.tracer.Start(ctx, "batch", opts...)
	_, read := e.tracer.Start(ctx, adapterName("read", e.kinds.Source), trace.WithTimestamp(readStart), trace.WithAttributes(attrMessages.Int(len(msgs))))
	read.End(trace.WithTimestamp(readEnd))
	return ctx, span
}

// startSpan starts a stage span under the batch span, or returns ctx and
// nil when tracing is off.
func (b *batch) startSpan(ctx context.Context, name string, messages int) (context.Context, trace.Span) {
	if b.span == nil {
		return ctx, nil
	}
	return b.e.tracer.Start(trace.ContextWithSpan(ctx, b.span), name, trace.WithAttributes(attrMessages.Int(messages)))
}

// endSpan ends a span from startSpan, recording err; a nil span is a no-op.
func endSpan(span trace.Span, err error, attrs ...attribute.KeyValue) {
	if span == nil {
		return
	}
	span.SetAttributes(attrs...)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// carryTrace gives an output that carries no trace context its input's,
// so the trace goes on through a transformer that does not propagate it
// (a function whose reply has no traceparent extension).
func carryTrace(out, in map[string]string) {
	tp, ok := in[TraceParentHeader]
	if !ok {
		return
	}
	if _, has := out[TraceParentHeader]; has {
		return
	}
	out[TraceParentHeader] = tp
	if ts, ok := in[TraceStateHeader]; ok {
		out[TraceStateHeader] = ts
	}
}
