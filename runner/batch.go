package runner

import (
	"context"
	"fmt"
	"time"
	"unsafe"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// inputState tracks one message read from the source until it is acked or
// handed back.
type inputState struct {
	msg       *Message
	remaining int  // outputs not yet in a final state
	nack      bool // give it back to the source
	nackWith  Nack // what the nack that asked to wait longest asked for
	failed    bool // it cannot reach a final state in this attempt
	settled   bool // acked or nacked already
	// id is the ID the source gave msg, which the engine gives it back
	// before Ack and Nack (sourceIDs): under NumaflowIDs the engine names
	// it (nameNumaflow), and a stage that passes it on alone gives it its
	// output's ID.
	id string
	// offset is, under NumaflowIDs, the offset numaflow-core names its
	// outputs from (NumaflowOffsetter, or else id).
	offset string
	// release is the input's own Message.Release, taken off the message
	// as the batch starts: a transformer that copies the struct (out :=
	// *m) must not carry it into an output, which would release the
	// buffer twice.
	release func()
	// releases are the Release functions of its outputs, called with its
	// own once it is acked: outputs of one input may share one buffer.
	releases []func()
	// written are its outputs the sinks wrote, kept only for a
	// ResultTaker source (see keepResult).
	written []*Message
}

// overlaps reports whether a and b share memory, as an output that is a
// slice of its input's payload does.
func overlaps(a, b []byte) bool {
	if cap(a) == 0 || cap(b) == 0 {
		return false
	}
	a0, b0 := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return a0 < b0+uintptr(cap(b)) && b0 < a0+uintptr(cap(a))
}

// output is one message on its way to the sink, tied to its input.
type output struct {
	msg    *Message
	parent int
}

// batch is one read batch on its way through the stages. Only the goroutine
// that processes it touches it.
type batch struct {
	e      *Engine
	inputs []inputState
	// Messages waiting for the fallback and onSuccess tiers. They are
	// written after every round of the tier before them, so a message that
	// asked for fallback does not wait for its siblings' retries.
	toFallback, toOnSuccess []output
	// span is the batch's trace span; nil when tracing is off, which every
	// tracing step checks first so that it costs nothing then.
	span trace.Span
	// retryAfter is the longest wait a failure of this round asked for
	// before its retry (RetryAfter); the backoff waits at least that.
	retryAfter time.Duration
	// tainted is set once a call failed or a message had to be retried: an
	// attempt that was cut short may still read its payloads, so from then
	// on the batch releases none of them (see Message.Release).
	tainted bool
}

// process moves one read batch through the stages and the sink tiers,
// acking inputs as soon as all their outputs are final and handing back
// the rest. The read took from readStart to readEnd (readEnd is set only
// when tracing is on).
func (e *Engine) process(ctx context.Context, msgs []*Message, readStart, readEnd time.Time) error {
	start := time.Now()
	b := &batch{e: e, inputs: make([]inputState, len(msgs))}
	for i, m := range msgs {
		in := &b.inputs[i]
		in.msg, in.id = m, m.ID
		in.release, m.Release = m.Release, nil
	}
	if e.opts.MessageIDs == NumaflowIDs {
		b.nameNumaflow()
	}
	if e.tracer != nil {
		ctx, b.span = e.startBatch(ctx, msgs, readStart, readEnd)
	}
	err := b.run(ctx)
	b.handBack(ctx)
	observeSince(e.m.ProcessingTime, start)
	if b.span != nil {
		endSpan(b.span, err)
	}
	return err
}

func (b *batch) run(ctx context.Context) error {
	e := b.e
	outs := make([]output, len(b.inputs))
	for i := range b.inputs {
		b.inputs[i].remaining = 1
		outs[i] = output{msg: b.inputs[i].msg, parent: i}
	}
	var toSink []output
	// Numaflow checks the bypass conditions as messages leave the source
	// (after its transformer) and as they leave each map UDF.
	// A filter changes no tags, so it neither moves nor adds a check.
	if first := e.firstWorkStage(); first == nil || first.Role != RoleTransformer {
		outs = b.bypass(outs, &toSink)
	}
	for _, st := range e.stages {
		var err error
		if outs, err = b.transform(ctx, st, outs); err != nil {
			return err
		}
		b.ackFinal(ctx)
		if st.Role != RoleFilter {
			outs = b.bypass(outs, &toSink)
		}
	}
	if e.bypass.Sink != nil {
		// Numaflow: with conditions on the primary sink, what reaches it
		// without matching them is dropped there.
		for _, o := range outs {
			// numaflow-core acks them and counts them in no metric
			// (sinker/sink.rs, process_batch's bypass check).
			e.totals.bypassDropped.add(1)
			e.totals.dropped.add(1)
			b.final(o.parent)
		}
		outs = nil
	}
	toSink = append(toSink, outs...)
	if err := b.writeSecondary(ctx); err != nil {
		return err
	}
	b.ackFinal(ctx)
	if err := b.writePrimary(ctx, toSink); err != nil {
		return err
	}
	return b.writeSecondary(ctx)
}

// bypass takes the outputs whose tags match a sink's bypass condition out
// of outs, in Numaflow's order (sink, fallback, onSuccess; the first match
// wins), and returns the rest.
func (b *batch) bypass(outs []output, toSink *[]output) []output {
	by := &b.e.bypass
	if by.empty() {
		return outs
	}
	rest := outs[:0]
	for _, o := range outs {
		switch {
		case by.Sink.Match(o.msg.Tags):
			*toSink = append(*toSink, o)
		case by.Fallback.Match(o.msg.Tags):
			b.toFallback = append(b.toFallback, o)
		case by.OnSuccess.Match(o.msg.Tags):
			b.toOnSuccess = append(b.toOnSuccess, o)
		default:
			rest = append(rest, o)
			continue
		}
		b.e.totals.bypassed.add(1)
	}
	return rest
}

// final records that one output of input i reached a final state.
func (b *batch) final(i int) {
	b.inputs[i].remaining--
}

// nack marks input i to be handed back with n (or with an earlier nack
// of another of its outputs that asked to wait longer).
func (b *batch) nack(i int, n Nack) {
	in := &b.inputs[i]
	if in.nack {
		in.nackWith = in.nackWith.longer(n)
	} else {
		// The first nack's options stand as they came, even without a
		// delay to compare.
		in.nackWith = n
	}
	in.nack = true
}

// ackFinal acks every input whose outputs are all final and which is not
// acked yet. An ack that keeps failing is given up after a few tries: the
// source redelivers, which makes a duplicate, never a loss.
func (b *batch) ackFinal(ctx context.Context) {
	var ready []*Message
	first := -1
	for i := range b.inputs {
		in := &b.inputs[i]
		if !in.settled && !in.nack && !in.failed && in.remaining == 0 {
			in.settled = true
			ready = append(ready, in.msg)
			if first < 0 {
				first = i
			}
		}
	}
	if len(ready) == 0 {
		return
	}
	e := b.e
	defer e.budget.release(len(ready))
	// After the ack: the next message of each one's lane may start.
	defer e.freeLanes(ready)
	// The payloads go back after the ack (whatever its outcome): the
	// sinks are done with them, and a redelivery brings its own.
	defer b.recycle(first, ready)
	b.handResults(first, ready)
	// The results are handed over under the IDs the sinks saw; the ack
	// goes under the source's.
	acks := b.sourceIDs(first, ready)
	// Out of the set before the ack, as numaflow-core takes an offset out
	// of its tracker before it acks (source.rs): whatever the ack's
	// outcome, the source may deliver it again from now on.
	e.settled(acks)
	if b.span != nil {
		ctx, span := b.startSpan(ctx, "ack", len(acks))
		attempts, err := b.ack(ctx, acks)
		endSpan(span, err, attrAttempts.Int(attempts))
		return
	}
	b.ack(ctx, acks)
}

// recycle releases the payloads of the inputs in ready, which are the
// settled inputs from index first on, in order, unless the batch is
// tainted.
func (b *batch) recycle(first int, ready []*Message) {
	if b.tainted {
		return
	}
	for i := first; len(ready) > 0 && i < len(b.inputs); i++ {
		in := &b.inputs[i]
		if in.msg != ready[0] {
			continue
		}
		ready = ready[1:]
		if r := in.release; r != nil {
			in.release = nil
			r()
		}
		for _, r := range in.releases {
			r()
		}
		in.releases = nil
	}
}

// ack acks ready, retrying a few times; it returns the calls it made and
// the last error when it gave up.
func (b *batch) ack(ctx context.Context, ready []*Message) (int, error) {
	e := b.e
	for attempt := 0; ; attempt++ {
		start := time.Now()
		err := e.src.Ack(ctx, ready)
		observeSince(e.m.AckTime, start)
		if err == nil {
			e.totals.acked.add(len(ready))
			e.load.rate.add(time.Now(), int64(len(ready)))
			return attempt + 1, nil
		}
		e.totals.ackErrors.add(1)
		e.recordError(fmt.Errorf("source ack: %w", err))
		if attempt >= 4 || ctx.Err() != nil {
			e.log.Errorw("ack failed, the source will redeliver these messages", "count", len(ready), zap.Error(err))
			return attempt + 1, err
		}
		if !Sleep(ctx, e.callDelay(attempt)) {
			return attempt + 1, err
		}
	}
}

// handBack nacks what could not be finished (a nack from a stage or a
// sink, a fallback that failed for good, or work cut short by shutdown or
// a fatal error), so the source redelivers it; sources without Nack
// redeliver after their own timeout. Inputs are grouped by what their
// nack asked for.
func (b *batch) handBack(ctx context.Context) {
	type group struct {
		nack Nack
		msgs []*Message
	}
	var groups []*group
	byKey := map[string]*group{}
	// mine are the engine's messages, which the lanes know; the groups
	// may hold copies under the source's IDs (sourceMsg).
	var mine []*Message
	n := 0
	for i := range b.inputs {
		in := &b.inputs[i]
		if !in.settled {
			in.settled = true
			k := in.nackWith.key()
			g := byKey[k]
			if g == nil {
				g = &group{nack: in.nackWith}
				byKey[k] = g
				groups = append(groups, g)
			}
			g.msgs = append(g.msgs, b.sourceMsg(in))
			mine = append(mine, in.msg)
			n++
		}
	}
	if n == 0 {
		return
	}
	e := b.e
	defer e.budget.release(n)
	defer e.freeLanes(mine)
	e.totals.nacked.add(n)
	// Out of the set before the nack, so a redelivery it brings at once
	// is not taken for a duplicate.
	for _, g := range groups {
		e.settled(g.msgs)
	}
	nacker, ok := e.src.(Nacker)
	if !ok {
		return
	}
	// The work context may be gone (shutdown budget spent, or a fatal
	// error); a nack is still worth a try, as it only speeds up redelivery,
	// but a short one, so the shutdown budget holds even with the source's
	// server away.
	timeout := 2 * time.Second
	if ctx.Err() != nil {
		timeout = 250 * time.Millisecond
	}
	nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	nctx, span := b.startSpan(nctx, "nack", n)
	var nackErr error
	for _, g := range groups {
		start := time.Now()
		err := nacker.Nack(nctx, g.msgs, g.nack)
		observeSince(e.m.NackTime, start)
		if err != nil {
			nackErr = err
			e.log.Warnw("nack failed, the source will redeliver after its ack timeout", "count", len(g.msgs), zap.Error(err))
		}
	}
	if span != nil {
		endSpan(span, nackErr)
	}
}
