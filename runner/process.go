package runner

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/monovertex/monovertex/internal/clock"
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
		b.inputs[i].msg = m
		b.inputs[i].release, m.Release = m.Release, nil
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
	if first := e.firstWorkStage(); first == nil || first.Role != StageTransformer {
		outs = b.bypass(outs, &toSink)
	}
	for _, st := range e.stages {
		var err error
		if outs, err = b.transform(ctx, st, outs); err != nil {
			return err
		}
		b.ackFinal(ctx)
		if st.Role != StageFilter {
			outs = b.bypass(outs, &toSink)
		}
	}
	if e.bypass.Sink != nil {
		// Numaflow: with conditions on the primary sink, what reaches it
		// without matching them is dropped there.
		for _, o := range outs {
			// numaflow-core acks them and counts them in no metric
			// (sinker/sink.rs, process_batch's bypass check).
			e.totals.bypassDropped.Add(1)
			e.totals.dropped.Add(1)
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

// firstWorkStage is the first stage that is not a filter, or nil.
func (e *Engine) firstWorkStage() *stage {
	for _, st := range e.stages {
		if st.Role != StageFilter {
			return st
		}
	}
	return nil
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
		b.e.totals.bypassed.Add(1)
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
	defer e.release(len(ready))
	// After the ack: the next message of each one's lane may start.
	defer e.freeLanes(ready)
	// Out of the set before the ack, as numaflow-core takes an offset out
	// of its tracker before it acks (source.rs): whatever the ack's
	// outcome, the source may deliver it again from now on.
	e.settled(ready)
	// The payloads go back after the ack (whatever its outcome): the
	// sinks are done with them, and a redelivery brings its own.
	defer b.recycle(first, ready)
	b.handResults(first, ready)
	if b.span != nil {
		ctx, span := b.startSpan(ctx, "ack", len(ready))
		attempts, err := b.ack(ctx, ready)
		endSpan(span, err, attrAttempts.Int(attempts))
		return
	}
	b.ack(ctx, ready)
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
			e.count(&e.totals.acked, e.m.AckTotal, len(ready))
			e.rate.add(time.Now(), int64(len(ready)))
			return attempt + 1, nil
		}
		e.totals.ackErrors.Add(1)
		e.recordError(fmt.Errorf("source ack: %w", err))
		if attempt >= 4 || ctx.Err() != nil {
			e.log.Errorw("ack failed, the source will redeliver these messages", "count", len(ready), zap.Error(err))
			return attempt + 1, err
		}
		if !clock.Sleep(ctx, e.callDelay(attempt)) {
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
			g.msgs = append(g.msgs, in.msg)
			n++
		}
	}
	if n == 0 {
		return
	}
	e := b.e
	defer e.release(n)
	defer func() {
		for _, g := range groups {
			e.freeLanes(g.msgs)
		}
	}()
	e.count(&e.totals.nacked, e.m.NackTotal, n)
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

// callBackoff waits before retrying a call that failed as a whole.
func (b *batch) callBackoff(ctx context.Context, round int) error {
	if !clock.Sleep(ctx, b.e.callDelay(round)) {
		return ctx.Err()
	}
	return nil
}

// backoff waits before the next round of a stage or tier. When every
// message left failed only because its peer is away (Unavailable), it waits
// on the call schedule and spends no retry step; otherwise it waits on
// MV_RETRY_* and the round counts.
func (b *batch) backoff(ctx context.Context, policy *RetryPolicy, peerAway bool, round, calls *int) error {
	if peerAway {
		err := b.callBackoff(ctx, *calls)
		*calls++
		return err
	}
	*calls = 0
	p := b.e.opts.Retry
	if policy != nil {
		p = *policy
	}
	err := b.retryBackoff(ctx, p, *round)
	*round++
	return err
}

// retryBackoff waits before retrying the messages of a round that failed:
// the policy's delay, or longer where a failure asked to wait longer
// (RetryAfter), as Knative's dispatcher takes the larger of its backoff
// and a Retry-After (generateBackoffFn in pkg/kncloudevents/retries.go).
func (b *batch) retryBackoff(ctx context.Context, p RetryPolicy, round int) error {
	d := max(p.Delay(round), b.retryAfter)
	b.retryAfter = 0
	if !clock.Sleep(ctx, d) {
		return ctx.Err()
	}
	return nil
}

// waitAsked records how long err asked the next try to wait (RetryAfter),
// for the backoff before the round that retries it.
func (b *batch) waitAsked(err error) {
	if d := RetryAfterOf(err); d > b.retryAfter {
		b.retryAfter = d
	}
}

// exhausted reports whether a message that failed in round (counting from
// 0) has no retries left, or failed permanently.
func (b *batch) exhausted(round int, err error) bool {
	return IsPermanent(err) || b.e.opts.Retry.Exhausted(round)
}

// transform runs one stage over outs, retrying failed messages, and
// returns the stage's outputs. Messages the stage drops become final,
// nacks mark their input, and failures whose retries are spent go where
// MV_ON_FAILURE says.
func (b *batch) transform(ctx context.Context, st *stage, outs []output) ([]output, error) {
	if b.span == nil {
		next, _, err := b.transformRounds(ctx, st, outs)
		return next, err
	}
	ctx, span := b.startSpan(ctx, st.name, len(outs))
	next, calls, err := b.transformRounds(ctx, st, outs)
	endSpan(span, err, attrOutputs.Int(len(next)), attrAttempts.Int(calls))
	return next, err
}

// transformRounds is transform without its span; it also returns how many
// calls it made.
func (b *batch) transformRounds(ctx context.Context, st *stage, outs []output) (next []output, attempts int, err error) {
	e := b.e
	call := roundCall[TransformResult]{name: st.name, failed: "call failed", call: st.t.Transform, time: st.time, nErr: st.nErr, errors: st.errors}
	if st.Retry != nil {
		call.retry = &st.Retry.Policy
	}
	if et, ok := st.t.(EachTransformer); ok {
		call.each = et.TransformEach
		call.early = func(o output, r TransformResult) {
			if r.Err == nil && !r.Nack && len(r.Outputs) > 0 {
				b.freeInput(o, r.Outputs)
			}
		}
	}
	attempts, err = runRounds(ctx, b, call, outs, func(_ context.Context, pending []output, results []TransformResult, round int) ([]output, int, error) {
		var again []output
		away := 0
		for j, r := range results {
			o := pending[j]
			in := &b.inputs[o.parent]
			switch {
			case r.Nack:
				b.nack(o.parent, r.NackOptions)
				b.final(o.parent)
			case r.Err != nil:
				b.tainted = true
				e.count(st.nErr, st.errors, 1)
				e.recordError(fmt.Errorf("%s: message %s: %w", st.name, o.msg.ID, r.Err))
				if IsUnavailable(r.Err) {
					e.failures.warn(st.name+" unavailable, retrying", r.Err, o.msg.ID, 1)
					away++
					again = append(again, o)
					continue
				}
				if !IsPermanent(r.Err) && !st.exhausted(e.opts.Retry, round) {
					e.failures.warn(st.name+" failed, retrying", r.Err, o.msg.ID, 1)
					b.waitAsked(r.Err)
					again = append(again, o)
					continue
				}
				onFailure := e.opts.OnFailure
				if st.Retry != nil && st.Retry.OnFailure != OnFailureDrop {
					// numaflow-core's RetryStep::Nack: the input goes
					// back to the source, to come again.
					e.failures.error(st.name+" failed, its retries spent: the input is handed back to the source", r.Err, o.msg.ID, 1)
					b.nack(o.parent, Nack{Reason: fmt.Sprintf("%s failed after its retries: %v", st.name, r.Err)})
					b.final(o.parent)
					continue
				} else if st.Retry != nil {
					onFailure = OnFailureDrop
				}
				switch onFailure {
				case OnFailureFallback:
					e.failures.error(st.name+" failed, message sent to the fallback sink", r.Err, o.msg.ID, 1)
					o.msg.FallbackCause = r.Err
					b.toFallback = append(b.toFallback, o)
				case OnFailureDrop:
					e.failures.error(st.name+" failed, message dropped", r.Err, o.msg.ID, 1)
					// numaflow-core counts a stage's retry-exhausted drops
					// in the stage's dropped counter (transformer.rs,
					// mapper/map.rs), not in monovtx_dropped_total.
					e.count(st.nDropped, st.dropped, 1)
					e.totals.dropped.Add(1)
					b.final(o.parent)
				default:
					e.failures.warn(st.name+" failed, retrying", r.Err, o.msg.ID, 1)
					b.waitAsked(r.Err)
					again = append(again, o)
				}
			case len(r.Outputs) == 0:
				e.count(st.nDropped, st.dropped, 1)
				e.totals.dropped.Add(1)
				b.final(o.parent)
			default:
				in.remaining += len(r.Outputs) - 1
				b.freeInput(o, r.Outputs)
				for k, out := range r.Outputs {
					if out.Release != nil && out != o.msg {
						in.releases = append(in.releases, out.Release)
						out.Release = nil
					}
					if out == in.msg && len(r.Outputs) > 1 {
						// The input passed on beside other outputs stays the
						// source's ack handle: its ID must not become an
						// output's, and a later stage replacing it must not
						// look like that stage replacing the input (a sibling
						// may still read its payload). Passed on alone, it
						// keeps its ID and has no sibling: no copy.
						cp := *out
						out = &cp
					}
					place := k
					if len(r.Indexes) == len(r.Outputs) {
						place = r.Indexes[k]
					}
					out.ID = e.outputID(st, o.msg, k, place, len(r.Outputs))
					out.offset = o.msg.offset
					if out.EventTime.IsZero() {
						out.EventTime = o.msg.EventTime
					}
					if out.Keys == nil {
						out.Keys = o.msg.Keys
					}
					if out.Headers == nil {
						out.Headers = o.msg.Headers
					} else {
						carryTrace(out.Headers, o.msg.Headers)
					}
					if out.Metadata == nil {
						out.Metadata = o.msg.Metadata
					}
					next = append(next, output{msg: out, parent: o.parent})
				}
			}
		}
		return again, away, nil
	})
	if err != nil {
		return nil, attempts, err
	}
	return next, attempts, nil
}

// freeInput lets go of the payload of o's input when only outs, none of
// which shares it, travel on from the first stage; the input stays for its
// ack handle. Releasing the payload keeps a transformer from doubling the
// memory of a batch of large messages: its buffer can take the next read
// at once. It runs as the result arrives (EachTransformer) or as it is
// settled, whichever comes first; the second time it finds nothing to do.
func (b *batch) freeInput(o output, outs []*Message) {
	in := &b.inputs[o.parent]
	if o.msg != in.msg || in.msg.Value == nil {
		return
	}
	for _, out := range outs {
		if out == o.msg || overlaps(out.Value, o.msg.Value) {
			return
		}
	}
	in.msg.Value = nil
	if rel := in.release; rel != nil && !b.tainted {
		in.release = nil
		rel()
	}
}

// roundCall is the call a retry round makes, a stage's Transform or a
// tier's Write, with the metrics and log line its failures go to.
type roundCall[R any] struct {
	name string
	// failed is what the log says happened when the call itself failed.
	failed string
	call   func(context.Context, []*Message) ([]R, error)
	time   prometheus.Observer
	nErr   *atomic.Int64
	errors prometheus.Counter
	// errorsPerMessage counts a failed call once per message in it (a
	// sink write fails every message it carried) instead of once.
	errorsPerMessage bool
	// stamp writes the round into each message's metadata (MetadataSink).
	stamp bool
	// each, when set, makes the call instead of call, handing each result
	// over as it comes (EachTransformer); early then sees every result as
	// it arrives, in the calling goroutine.
	each  func(ctx context.Context, msgs []*Message, done func(k int, r R)) error
	early func(o output, r R)
	// retry is the backoff between rounds; nil takes Options.Retry.
	retry *RetryPolicy
}

// invoke makes one call of c over msgs, the messages of pending. got says
// which messages have a result when the call failed after handing some
// over (EachTransformer); it is nil otherwise.
func (c roundCall[R]) invoke(ctx context.Context, msgs []*Message, pending []output) (results []R, got []bool, err error) {
	if c.each == nil {
		results, err = c.call(ctx, msgs)
		return results, nil, err
	}
	results, got = make([]R, len(msgs)), make([]bool, len(msgs))
	n := 0
	err = c.each(ctx, msgs, func(k int, r R) {
		if k < 0 || k >= len(msgs) || got[k] {
			return // out of contract: the first result stands
		}
		results[k], got[k] = r, true
		n++
		if c.early != nil {
			c.early(pending[k], r)
		}
	})
	if err == nil && n < len(msgs) {
		err = fmt.Errorf("%s gave results for %d of %d messages", c.name, n, len(msgs))
	}
	if err == nil || n == 0 {
		got = nil
	}
	return results, got, err
}

// countTrue returns how many of bs are true.
func countTrue(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// runRounds is the retry loop a stage and a tier share: it calls c with
// the messages of pending, retries a failed call after the call backoff,
// hands the results of a call to settle, and offers what settle returns
// again after the round backoff (or the wait for an unavailable peer when
// every one of them was unavailable). It returns how many calls it made.
func runRounds[R any](ctx context.Context, b *batch, c roundCall[R], pending []output, settle func(ctx context.Context, pending []output, results []R, round int) (again []output, away int, err error)) (attempts int, err error) {
	e := b.e
	msgs := make([]*Message, 0, len(pending))
	// spent holds the messages that failed in this round in the part of a
	// call that was answered before the call failed: they have had this
	// round's try, so they wait for the next round with its backoff instead
	// of riding along when the rest of the call is offered again.
	var spent []output
	for round, calls := 0, 0; len(pending) > 0 || len(spent) > 0; {
		if len(pending) == 0 {
			// Only spent messages are left: the round is over.
			pending, spent = spent, nil
			if err := b.backoff(ctx, c.retry, false, &round, &calls); err != nil {
				return attempts, err
			}
			continue
		}
		msgs = msgs[:0]
		for _, o := range pending {
			if c.stamp {
				stampRetryCount(o.msg, round)
			}
			msgs = append(msgs, o.msg)
		}
		start := time.Now()
		attempts++
		results, got, err := c.invoke(ctx, msgs, pending)
		observeSince(c.time, start)
		if err == nil && len(results) != len(msgs) {
			err = fmt.Errorf("%s returned %d results for %d messages", c.name, len(results), len(msgs))
		}
		if err != nil {
			b.tainted = true
			if IsFatal(err) || ctx.Err() != nil {
				return attempts, err
			}
			n := 1
			if c.errorsPerMessage {
				n = len(msgs)
			}
			e.count(c.nErr, c.errors, n)
			e.recordError(fmt.Errorf("%s: %w", c.name, err))
			e.failures.warn(c.name+" "+c.failed+", retrying", err, "", len(msgs)-countTrue(got))
			if got != nil {
				// The results handed over before the failure stand (their
				// inputs' payloads may be gone already); only the messages
				// without one are offered again in this round. Those that
				// failed wait for the next round, unless all of them only
				// found their peer away, which spends no step.
				var done, rest []output
				var doneRes []R
				for k, o := range pending {
					if got[k] {
						done, doneRes = append(done, o), append(doneRes, results[k])
					} else {
						rest = append(rest, o)
					}
				}
				again, away, err := settle(ctx, done, doneRes, round)
				if err != nil {
					return attempts, err
				}
				if len(again) == away {
					pending = append(rest, again...)
				} else {
					pending, spent = rest, append(spent, again...)
				}
				if len(pending) == 0 {
					continue
				}
			}
			if err := b.callBackoff(ctx, calls); err != nil {
				return attempts, err
			}
			calls++
			continue
		}
		again, away, err := settle(ctx, pending, results, round)
		if err != nil {
			return attempts, err
		}
		peerAway := len(again) == away && len(spent) == 0
		pending, spent = append(again, spent...), nil
		if len(pending) > 0 {
			if err := b.backoff(ctx, c.retry, peerAway, &round, &calls); err != nil {
				return attempts, err
			}
		}
	}
	return attempts, nil
}

// tier is one sink level: the primary sink, the fallback sink or the
// onSuccess sink.
type tier struct {
	name string
	// spanName is name with the sink's kind, for its trace span.
	spanName string
	sink     Sink
	time     prometheus.Observer
	written  prometheus.Counter
	errors   prometheus.Counter
	nWrit    *atomic.Int64
	nErr     *atomic.Int64
	// stamp writes the retry count into Numaflow metadata (MetadataSink).
	stamp bool
	// keeps: what this tier writes is a result (ResultTaker): the sink's
	// and the fallback sink's writes, not the onSuccess sink's copies.
	keeps bool
}

func newTier(name, kind string, s Sink, time prometheus.Observer, written, errors prometheus.Counter, nWrit, nErr *atomic.Int64) tier {
	_, stamp := s.(MetadataSink)
	return tier{name, adapterName(name, kind), s, time, written, errors, nWrit, nErr, stamp, false}
}

func (e *Engine) primaryTier() tier {
	t := newTier("sink", e.kinds.Sink, e.sink, e.m.SinkTime, e.m.SinkWriteTotal, e.m.SinkWriteErrors, &e.totals.written, &e.totals.sinkErrors)
	t.keeps = true
	return t
}

func (e *Engine) fallbackTier() tier {
	t := newTier("fallback sink", e.kinds.Fallback, e.fallback, e.m.FallbackSinkTime, e.m.FallbackSinkWriteTotal, e.m.FallbackSinkErrors, &e.totals.fallbackWritten, &e.totals.fallbackErrors)
	t.keeps = true
	return t
}

func (e *Engine) onSuccessTier() tier {
	return newTier("onSuccess sink", e.kinds.OnSuccess, e.onSuccess, e.m.OnSuccessSinkTime, e.m.OnSuccessSinkWriteTotal, e.m.OnSuccessSinkErrors, &e.totals.onSuccessWritten, &e.totals.onSuccessErrors)
}

// Numaflow's system metadata group and key that tell a sink how many times
// this message was offered to it before (0 on the first attempt).
const (
	SinkMetadataGroup = "sink"
	RetryCountKey     = "retry_count"
)

// stampRetryCount records the attempt in the message's system metadata,
// on a copy, since outputs of one input may share their metadata.
func stampRetryCount(m *Message, attempt int) {
	md := &Metadata{}
	if m.Metadata != nil {
		*md = *m.Metadata
	}
	sys := make(map[string]map[string][]byte, len(md.System)+1)
	for k, v := range md.System {
		sys[k] = v
	}
	sys[SinkMetadataGroup] = map[string][]byte{RetryCountKey: []byte(strconv.Itoa(attempt))}
	md.System = sys
	m.Metadata = md
}

// write offers outs to the tier's sink until each is written or settled
// by onResult, acking inputs as they become final. onResult gets every
// result that is not OK (failures are counted as errors already) and
// reports whether to offer that output again. afterRound runs after each
// round, before a retry waits.
func (b *batch) write(ctx context.Context, t tier, outs []output, onResult func(o output, r WriteResult, round int) (again bool, err error), afterRound func(context.Context) error) error {
	if b.span == nil {
		_, _, err := b.writeRounds(ctx, t, outs, onResult, afterRound)
		return err
	}
	ctx, span := b.startSpan(ctx, t.spanName, len(outs))
	written, attempts, err := b.writeRounds(ctx, t, outs, onResult, afterRound)
	endSpan(span, err, attrWritten.Int(written), attrAttempts.Int(attempts))
	return err
}

// writeRounds is write without its span; it also returns how many
// messages the sink took and how many calls it made.
func (b *batch) writeRounds(ctx context.Context, t tier, outs []output, onResult func(o output, r WriteResult, round int) (again bool, err error), afterRound func(context.Context) error) (total, attempts int, err error) {
	e := b.e
	call := roundCall[WriteResult]{name: t.name, failed: "write failed", call: t.sink.Write, time: t.time, nErr: t.nErr, errors: t.errors, errorsPerMessage: true, stamp: t.stamp}
	attempts, err = runRounds(ctx, b, call, outs, func(ctx context.Context, outs []output, results []WriteResult, round int) ([]output, int, error) {
		var again []output
		written, away := 0, 0
		for j, r := range results {
			o := outs[j]
			switch r.Status {
			case WriteOK:
				written++
				if t.keeps {
					b.keepResult(o)
				}
				b.final(o.parent)
				continue
			case WriteFailed:
				b.tainted = true
				e.count(t.nErr, t.errors, 1)
				if r.Err == nil {
					r.Err = fmt.Errorf("%s reported failure for message %s", t.name, o.msg.ID)
				}
				if IsUnavailable(r.Err) {
					e.recordError(fmt.Errorf("%s: message %s: %w", t.name, o.msg.ID, r.Err))
					e.failures.warn(t.name+" unavailable, retrying", r.Err, o.msg.ID, 1)
					away++
					again = append(again, o)
					continue
				}
			case WriteNack:
				// Numaflow hands a nacked message back to the source with
				// its options; it is not retried on the sink.
				e.totals.sinkNacked.Add(1)
				b.nack(o.parent, r.NackOptions)
				b.final(o.parent)
				continue
			}
			retry, err := onResult(o, r, round)
			if err != nil {
				return nil, 0, err
			}
			if retry {
				b.waitAsked(r.Err)
				again = append(again, o)
			}
		}
		e.count(t.nWrit, t.written, written)
		total += written
		b.ackFinal(ctx)
		if afterRound != nil {
			if err := afterRound(ctx); err != nil {
				return nil, 0, err
			}
		}
		return again, away, nil
	})
	return total, attempts, err
}

// drop settles an output on purpose after its retries were spent.
func (b *batch) drop(o output) {
	e := b.e
	e.count(&e.totals.sinkDropped, e.m.SinkDropped, 1)
	e.totals.dropped.Add(1)
	b.final(o.parent)
}

// exhaustedFailure applies MV_ON_FAILURE to a message whose write failed in
// round, and reports whether to offer it to the same tier again. next is
// false on the last tier, which has no fallback after it.
func (b *batch) exhaustedFailure(t tier, o output, r WriteResult, round int, next bool) bool {
	f := b.e.failures
	if !b.exhausted(round, r.Err) {
		f.warn(t.name+" write failed, retrying", r.Err, o.msg.ID, 1)
		return true
	}
	switch b.e.opts.OnFailure {
	case OnFailureFallback:
		if next {
			f.error(t.name+" write failed, message sent to the fallback sink", r.Err, o.msg.ID, 1)
			o.msg.FallbackCause = r.Err
			b.toFallback = append(b.toFallback, o)
			return false
		}
	case OnFailureDrop:
		f.error(t.name+" write failed, message dropped", r.Err, o.msg.ID, 1)
		b.drop(o)
		return false
	}
	f.warn(t.name+" write failed, retrying", r.Err, o.msg.ID, 1)
	return true
}

// missingTier is the error for a sink status whose target is not set up.
// Numaflow stops the vertex with an error in that case; so does the runner
// (exit 1), leaving the message unacked for redelivery, because the fix is
// a setting the user has to add.
func missingTier(status, id, variable string) error {
	return Fatal(fmt.Errorf("the sink answered %s for message %s, but %s is not set; set it, or change the sink to answer otherwise", status, id, variable))
}

// writePrimary writes outputs to the sink until each is written, routed to
// the fallback or onSuccess sink, handed back or dropped.
func (b *batch) writePrimary(ctx context.Context, outs []output) error {
	e := b.e
	t := e.primaryTier()
	return b.write(ctx, t, outs, func(o output, r WriteResult, round int) (bool, error) {
		switch r.Status {
		case WriteFallback:
			if e.fallback == nil {
				return false, missingTier("FALLBACK", o.msg.ID, "MV_FALLBACK_SINK")
			}
			o.msg.FallbackCause = nil
			b.toFallback = append(b.toFallback, o)
			return false, nil
		case WriteOnSuccess:
			// The primary sink wrote it; the input is final once the
			// onSuccess sink wrote it too.
			e.count(&e.totals.written, e.m.SinkWriteTotal, 1)
			b.keepResult(o)
			if e.onSuccess == nil {
				return false, missingTier("ON_SUCCESS", o.msg.ID, "MV_ON_SUCCESS_SINK")
			}
			if r.OnSuccess != nil {
				o.msg = r.OnSuccess
			}
			b.toOnSuccess = append(b.toOnSuccess, o)
			return false, nil
		}
		e.recordError(fmt.Errorf("sink: %w", r.Err))
		return b.exhaustedFailure(t, o, r, round, e.fallback != nil), nil
	}, b.writeSecondary)
}

// writeSecondary writes what waits for the fallback and onSuccess sinks.
func (b *batch) writeSecondary(ctx context.Context) error {
	e := b.e
	if err := b.writeLast(ctx, &b.toFallback, e.fallback, "FALLBACK", "MV_FALLBACK_SINK", e.fallbackTier); err != nil {
		return err
	}
	return b.writeLast(ctx, &b.toOnSuccess, e.onSuccess, "ON_SUCCESS", "MV_ON_SUCCESS_SINK", e.onSuccessTier)
}

// writeLast writes the outputs waiting in queue to a tier with no tier
// after it, and empties the queue. sink is that tier's sink, nil when it
// is not configured; answer and variable name it in that error.
func (b *batch) writeLast(ctx context.Context, queue *[]output, sink Sink, answer, variable string, tierOf func() tier) error {
	outs := *queue
	if len(outs) == 0 {
		return nil
	}
	*queue = nil
	if sink == nil {
		return missingTier(answer, outs[0].msg.ID, variable)
	}
	t := tierOf()
	return b.write(ctx, t, outs, b.lastTierResult(t), nil)
}

// lastTierResult handles the results of the fallback and onSuccess sinks,
// which have no tier after them. One that answers "fallback" is an error:
// that message goes back to the source instead of looping. ON_SUCCESS
// counts as written (Numaflow ignores it there). Failures are retried
// unless MV_ON_FAILURE=drop.
func (b *batch) lastTierResult(t tier) func(o output, r WriteResult, round int) (bool, error) {
	e := b.e
	return func(o output, r WriteResult, round int) (bool, error) {
		switch r.Status {
		case WriteFallback:
			e.count(t.nErr, t.errors, 1)
			e.recordError(fmt.Errorf("%s answered \"fallback\" for message %s: it must write or fail; the message goes back to the source", t.name, o.msg.ID))
			e.failures.error(t.name+" answered \"fallback\", which it may not: message handed back to the source", nil, "", 1)
			b.inputs[o.parent].failed = true
			return false, nil
		case WriteOnSuccess:
			e.count(t.nWrit, t.written, 1)
			if t.keeps {
				b.keepResult(o)
			}
			b.final(o.parent)
			return false, nil
		}
		e.recordError(fmt.Errorf("%s: %w", t.name, r.Err))
		return b.exhaustedFailure(t, o, r, round, false), nil
	}
}
