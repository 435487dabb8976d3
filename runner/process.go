package runner

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// inputState tracks one message read from the source until it is acked or
// handed back.
type inputState struct {
	msg       *Message
	remaining int  // outputs not yet in a final state
	nack      bool // give it back to the source
	failed    bool // it cannot reach a final state in this attempt
	settled   bool // acked or nacked already
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
}

// process moves one read batch through transform, write and fallback, acking
// inputs as soon as all their outputs are final and handing back the rest.
func (e *Engine) process(ctx context.Context, msgs []*Message) error {
	start := time.Now()
	b := &batch{e: e, inputs: make([]inputState, len(msgs))}
	for i, m := range msgs {
		b.inputs[i].msg = m
	}
	err := b.run(ctx)
	b.handBack(ctx)
	observeSince(e.m.ProcessingTime, start)
	return err
}

func (b *batch) run(ctx context.Context) error {
	outs, toFallback, err := b.transform(ctx)
	if err != nil {
		return err
	}
	b.ackFinal(ctx)
	toFallback, err = b.writePrimary(ctx, outs, toFallback)
	if err != nil {
		return err
	}
	return b.writeFallback(ctx, toFallback)
}

// final records that one output of input i reached a final state.
func (b *batch) final(i int) {
	b.inputs[i].remaining--
}

// ackFinal acks every input whose outputs are all final and which is not
// acked yet. An ack that keeps failing is given up after a few tries: the
// source redelivers, which makes a duplicate, never a loss.
func (b *batch) ackFinal(ctx context.Context) {
	var ready []*Message
	for i := range b.inputs {
		in := &b.inputs[i]
		if !in.settled && !in.nack && !in.failed && in.remaining == 0 {
			in.settled = true
			ready = append(ready, in.msg)
		}
	}
	if len(ready) == 0 {
		return
	}
	e := b.e
	for attempt := 0; ; attempt++ {
		start := time.Now()
		err := e.src.Ack(ctx, ready)
		observeSince(e.m.AckTime, start)
		if err == nil {
			e.m.AckTotal.Add(float64(len(ready)))
			e.totals.acked.Add(int64(len(ready)))
			e.rate.add(time.Now(), int64(len(ready)))
			return
		}
		e.totals.ackErrors.Add(1)
		e.recordError(fmt.Errorf("source ack: %w", err))
		if attempt >= 4 || ctx.Err() != nil {
			e.log.Errorw("ack failed, the source will redeliver these messages", "count", len(ready), zap.Error(err))
			return
		}
		if !sleep(ctx, e.callDelay(attempt)) {
			return
		}
	}
}

// handBack nacks what could not be finished (a transformer nack, a fallback
// that failed for good, or work cut short by shutdown or a fatal error), so
// the source redelivers it; sources without Nack redeliver after their own
// timeout.
func (b *batch) handBack(ctx context.Context) {
	var back []*Message
	for i := range b.inputs {
		in := &b.inputs[i]
		if !in.settled {
			in.settled = true
			back = append(back, in.msg)
		}
	}
	if len(back) == 0 {
		return
	}
	e := b.e
	e.m.NackTotal.Add(float64(len(back)))
	e.totals.nacked.Add(int64(len(back)))
	n, ok := e.src.(Nacker)
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
	if err := n.Nack(nctx, back, 0); err != nil {
		e.log.Warnw("nack failed, the source will redeliver after its ack timeout", "count", len(back), zap.Error(err))
	}
}

// callBackoff waits before retrying a call that failed as a whole.
func (b *batch) callBackoff(ctx context.Context, round int) error {
	if !sleep(ctx, b.e.callDelay(round)) {
		return ctx.Err()
	}
	return nil
}

// retryBackoff waits before retrying the messages of a round that failed.
func (b *batch) retryBackoff(ctx context.Context, round int) error {
	if !sleep(ctx, b.e.opts.Retry.Delay(round)) {
		return ctx.Err()
	}
	return nil
}

// exhausted reports whether a message that failed in round (counting from
// 0) has no retries left, or failed permanently.
func (b *batch) exhausted(round int, err error) bool {
	return IsPermanent(err) || b.e.opts.Retry.Exhausted(round)
}

// transform runs the transformer over every input, retrying failed ones, and
// returns the outputs for the sink and the messages routed to the fallback sink.
func (b *batch) transform(ctx context.Context) (outs, toFallback []output, err error) {
	e := b.e
	if e.tr == nil {
		outs = make([]output, len(b.inputs))
		for i := range b.inputs {
			b.inputs[i].remaining = 1
			outs[i] = output{msg: b.inputs[i].msg, parent: i}
		}
		return outs, nil, nil
	}
	pending := make([]int, len(b.inputs))
	for i := range pending {
		pending[i] = i
	}
	msgs := make([]*Message, 0, len(pending))
	for round, calls := 0, 0; len(pending) > 0; {
		msgs = msgs[:0]
		for _, i := range pending {
			msgs = append(msgs, b.inputs[i].msg)
		}
		start := time.Now()
		results, err := e.tr.Transform(ctx, msgs)
		observeSince(e.m.TransformerTime, start)
		if err == nil && len(results) != len(msgs) {
			err = fmt.Errorf("transformer returned %d results for %d messages", len(results), len(msgs))
		}
		if err != nil {
			if IsFatal(err) || ctx.Err() != nil {
				return nil, nil, err
			}
			e.m.TransformerErrors.Inc()
			e.totals.transformerErrors.Add(1)
			e.recordError(fmt.Errorf("transformer: %w", err))
			e.log.Warnw("transformer call failed, retrying", "messages", len(msgs), zap.Error(err))
			if err := b.callBackoff(ctx, calls); err != nil {
				return nil, nil, err
			}
			calls++
			continue
		}
		calls = 0
		var again []int
		for j, r := range results {
			i := pending[j]
			in := &b.inputs[i]
			switch {
			case r.Nack:
				in.nack = true
			case r.Err != nil:
				e.m.TransformerErrors.Inc()
				e.totals.transformerErrors.Add(1)
				e.recordError(fmt.Errorf("transformer: message %s: %w", in.msg.ID, r.Err))
				if !b.exhausted(round, r.Err) {
					again = append(again, i)
					continue
				}
				switch e.opts.OnFailure {
				case OnFailureFallback:
					in.remaining = 1
					toFallback = append(toFallback, output{msg: in.msg, parent: i})
				case OnFailureDrop:
					e.m.DroppedTotal.Inc()
					e.totals.dropped.Add(1)
				default:
					again = append(again, i)
				}
			case len(r.Outputs) == 0:
				e.m.TransformerDropped.Inc()
				e.m.DroppedTotal.Inc()
				e.totals.transformerDropped.Add(1)
				e.totals.dropped.Add(1)
			default:
				in.remaining = len(r.Outputs)
				passthrough := false
				for k, o := range r.Outputs {
					passthrough = passthrough || o == in.msg
					o.ID = outputID(in.msg.ID, k, len(r.Outputs))
					if o.EventTime.IsZero() {
						o.EventTime = in.msg.EventTime
					}
					if o.Keys == nil {
						o.Keys = in.msg.Keys
					}
					if o.Headers == nil {
						o.Headers = in.msg.Headers
					}
					outs = append(outs, output{msg: o, parent: i})
				}
				if !passthrough {
					// Only the outputs travel on; the input stays for its ack
					// handle. Releasing its payload keeps a transformer from
					// doubling the memory of a batch of large messages.
					in.msg.Value = nil
				}
			}
		}
		pending = again
		if len(pending) > 0 {
			if err := b.retryBackoff(ctx, round); err != nil {
				return nil, nil, err
			}
			round++
		}
	}
	return outs, toFallback, nil
}

// tier is one sink level: the primary sink or the fallback sink.
type tier struct {
	name    string
	sink    Sink
	time    prometheus.Observer
	written prometheus.Counter
	errors  prometheus.Counter
	nWrit   *atomic.Int64
	nErr    *atomic.Int64
}

func (e *Engine) primaryTier() tier {
	return tier{"sink", e.sink, e.m.SinkTime, e.m.SinkWriteTotal, e.m.SinkWriteErrors, &e.totals.written, &e.totals.sinkErrors}
}

func (e *Engine) fallbackTier() tier {
	return tier{"fallback sink", e.fallback, e.m.FallbackSinkTime, e.m.FallbackSinkWriteTotal, e.m.FallbackSinkErrors, &e.totals.fallbackWritten, &e.totals.fallbackErrors}
}

// write offers outs to the tier's sink until each is written or settled
// by onFailure, acking inputs as they become final. onFailure gets every
// result that is not OK (failures are counted as errors already, fallback
// answers are not) and reports whether to offer that output again.
func (b *batch) write(ctx context.Context, t tier, outs []output, onFailure func(o output, r WriteResult, round int) (again bool)) error {
	e := b.e
	msgs := make([]*Message, 0, len(outs))
	for round, calls := 0, 0; len(outs) > 0; {
		msgs = msgs[:0]
		for _, o := range outs {
			msgs = append(msgs, o.msg)
		}
		start := time.Now()
		results, err := t.sink.Write(ctx, msgs)
		observeSince(t.time, start)
		if err == nil && len(results) != len(msgs) {
			err = fmt.Errorf("%s returned %d results for %d messages", t.name, len(results), len(msgs))
		}
		if err != nil {
			if IsFatal(err) || ctx.Err() != nil {
				return err
			}
			t.errors.Add(float64(len(msgs)))
			t.nErr.Add(int64(len(msgs)))
			e.recordError(fmt.Errorf("%s: %w", t.name, err))
			e.log.Warnw(t.name+" write failed, retrying", "messages", len(msgs), zap.Error(err))
			if err := b.callBackoff(ctx, calls); err != nil {
				return err
			}
			calls++
			continue
		}
		calls = 0
		var again []output
		written := 0
		for j, r := range results {
			o := outs[j]
			if r.Status == WriteOK {
				written++
				b.final(o.parent)
				continue
			}
			if r.Status != WriteFallback {
				t.errors.Inc()
				t.nErr.Add(1)
				if r.Err == nil {
					r.Err = fmt.Errorf("%s reported failure for message %s", t.name, o.msg.ID)
				}
			}
			if onFailure(o, r, round) {
				again = append(again, o)
			}
		}
		t.written.Add(float64(written))
		t.nWrit.Add(int64(written))
		b.ackFinal(ctx)
		outs = again
		if len(outs) > 0 {
			if err := b.retryBackoff(ctx, round); err != nil {
				return err
			}
			round++
		}
	}
	return nil
}

// drop settles an output on purpose after its retries were spent.
func (b *batch) drop(o output) {
	e := b.e
	e.m.SinkDropped.Inc()
	e.m.DroppedTotal.Inc()
	e.totals.sinkDropped.Add(1)
	e.totals.dropped.Add(1)
	b.final(o.parent)
}

// writePrimary writes outputs to the sink until each is written, routed to
// the fallback sink, or dropped.
func (b *batch) writePrimary(ctx context.Context, outs, toFallback []output) ([]output, error) {
	e := b.e
	err := b.write(ctx, e.primaryTier(), outs, func(o output, r WriteResult, round int) bool {
		if r.Status == WriteFallback {
			if e.fallback == nil {
				e.m.SinkWriteErrors.Inc()
				e.totals.sinkErrors.Add(1)
				e.recordError(fmt.Errorf("sink asked to fall back message %s, but no fallback sink is set (MV_FALLBACK_SINK=none); retrying it on the sink", o.msg.ID))
				return true
			}
			toFallback = append(toFallback, o)
			return false
		}
		e.recordError(fmt.Errorf("sink: %w", r.Err))
		if !b.exhausted(round, r.Err) {
			return true
		}
		switch e.opts.OnFailure {
		case OnFailureFallback:
			toFallback = append(toFallback, o)
		case OnFailureDrop:
			b.drop(o)
		default:
			return true
		}
		return false
	})
	return toFallback, err
}

// writeFallback writes messages to the fallback sink. A fallback sink that
// answers "fallback" again is an error: that message is handed back to the
// source instead of looping. There is no tier after it, so failures are
// retried unless MV_ON_FAILURE=drop.
func (b *batch) writeFallback(ctx context.Context, outs []output) error {
	e := b.e
	return b.write(ctx, e.fallbackTier(), outs, func(o output, r WriteResult, round int) bool {
		if r.Status == WriteFallback {
			e.m.FallbackSinkErrors.Inc()
			e.totals.fallbackErrors.Add(1)
			e.recordError(fmt.Errorf("fallback sink answered \"fallback\" for message %s: a fallback sink must write or fail; the message goes back to the source", o.msg.ID))
			b.inputs[o.parent].failed = true
			return false
		}
		e.recordError(fmt.Errorf("fallback sink: %w", r.Err))
		if b.exhausted(round, r.Err) && e.opts.OnFailure == OnFailureDrop {
			b.drop(o)
			return false
		}
		return true
	})
}
