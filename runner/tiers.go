package runner

import (
	"context"
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// tier is one sink level: the primary sink, the fallback sink or the
// onSuccess sink.
type tier struct {
	name string
	// spanName is name with the sink's kind, for its trace span.
	spanName string
	sink     Sink
	time     prometheus.Observer
	// written and errors are the tier's counts in the engine's tally.
	written, errors *count
	// stamp writes the retry count into Numaflow metadata (MetadataSink).
	stamp bool
	// keeps: what this tier writes is a result (ResultTaker): the sink's
	// and the fallback sink's writes, not the onSuccess sink's copies.
	keeps bool
}

func newTier(name, kind string, s Sink, time prometheus.Observer, written, errors *count) tier {
	_, stamp := s.(MetadataSink)
	return tier{name, adapterName(name, kind), s, time, written, errors, stamp, false}
}

func (e *Engine) primaryTier() tier {
	t := newTier("sink", e.kinds.Sink, e.sink, e.m.SinkTime, &e.totals.written, &e.totals.sinkErrors)
	t.keeps = true
	return t
}

func (e *Engine) fallbackTier() tier {
	t := newTier("fallback sink", e.kinds.Fallback, e.fallback, e.m.FallbackSinkTime, &e.totals.fallbackWritten, &e.totals.fallbackErrors)
	t.keeps = true
	return t
}

func (e *Engine) onSuccessTier() tier {
	return newTier("onSuccess sink", e.kinds.OnSuccess, e.onSuccess, e.m.OnSuccessSinkTime, &e.totals.onSuccessWritten, &e.totals.onSuccessErrors)
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
	call := roundCall[WriteResult]{name: t.name, failed: "write failed", call: t.sink.Write, time: t.time, errors: t.errors, errorsPerMessage: true, stamp: t.stamp}
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
				t.errors.add(1)
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
				e.totals.sinkNacked.add(1)
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
		t.written.add(written)
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
	e.totals.sinkDropped.add(1)
	e.totals.dropped.add(1)
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
			e.totals.written.add(1)
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
			t.errors.add(1)
			e.recordError(fmt.Errorf("%s answered \"fallback\" for message %s: it must write or fail; the message goes back to the source", t.name, o.msg.ID))
			e.failures.error(t.name+" answered \"fallback\", which it may not: message handed back to the source", nil, "", 1)
			b.inputs[o.parent].failed = true
			return false, nil
		case WriteOnSuccess:
			t.written.add(1)
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
