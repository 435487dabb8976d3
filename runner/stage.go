package runner

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Stage is one step of the chain between the source and the sinks.
type Stage struct {
	// Kind is the adapter kind (udtransformer, cloudevents, udmap), for
	// logs and /status.
	Kind string
	// Role is the stage's place, the same Role its adapter was built for,
	// which picks its metric names: RoleTransformer (the source
	// transformer, first, monovtx_transformer_*), RoleUDF (a map UDF after
	// it, monovtx_udf_*) or RoleFilter (an in-process filter that passes a
	// message on unchanged or drops it, anywhere in the chain,
	// monovtx_filter_*).
	Role Role
	// Transformer does the work.
	Transformer Transformer
	// Retry is the stage's own retry strategy; nil retries it with the
	// sink's (Options.Retry, MV_ON_FAILURE) as before.
	Retry *StageRetry
}

// StageRetry is a transformer's or map UDF's own retry strategy: Numaflow's
// spec.source.transformer.retryStrategy and spec.udf.retryStrategy, which
// numaflow-core applies with shared/retry.rs.
type StageRetry struct {
	// Policy is the backoff between tries; its Steps (0: unlimited) are
	// the retries before OnFailure decides.
	Policy RetryPolicy
	// OnFailure is what happens once the steps are spent, as numaflow-core
	// does it for a stage: OnFailureDrop drops the message, anything else
	// (OnFailureRetry) hands its input back to the source (a nack).
	OnFailure OnFailure
}

// stage is a Stage with its metrics.
type stage struct {
	Stage
	name string
	t    Transformer
	time prometheus.Observer
	// errors and dropped are the stage's counts in the engine's tally.
	errors, dropped *count
	// streams: a map UDF whose container streams its outputs (see
	// OutputStreamer).
	streams bool
}

// exhausted reports whether a message of the stage that failed in round
// (counting from 0) has no retries left: by the stage's own strategy, or
// else by the sink's stage steps.
func (st *stage) exhausted(sink RetryPolicy, round int) bool {
	if st.Retry != nil {
		return st.Retry.Policy.Exhausted(round)
	}
	return sink.StageExhausted(round)
}

// firstWorkStage is the first stage that is not a filter, or nil.
func (e *Engine) firstWorkStage() *stage {
	for _, st := range e.stages {
		if st.Role != RoleFilter {
			return st
		}
	}
	return nil
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
	call := roundCall[TransformResult]{name: st.name, failed: "call failed", call: st.t.Transform, time: st.time, errors: st.errors}
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
			switch {
			case r.Nack:
				b.nack(o.parent, r.NackOptions)
				b.final(o.parent)
			case r.Err != nil:
				retry, peerAway := b.stageFailed(st, o, r.Err, round)
				if peerAway {
					away++
				}
				if retry {
					again = append(again, o)
				}
			case len(r.Outputs) == 0:
				st.dropped.add(1)
				b.e.totals.dropped.add(1)
				b.final(o.parent)
			default:
				next = b.passOn(st, o, r, next)
			}
		}
		return again, away, nil
	})
	if err != nil {
		return nil, attempts, err
	}
	return next, attempts, nil
}

// stageFailed applies the retry strategy to a message the stage failed in
// round (counting from 0): it reports whether to offer the message again,
// and whether only because its peer is away (which spends no retry step).
// With the retries spent, the stage's own strategy hands the input back or
// drops it; without one, MV_ON_FAILURE decides, as for a sink.
func (b *batch) stageFailed(st *stage, o output, err error, round int) (retry, peerAway bool) {
	e := b.e
	b.tainted = true
	st.errors.add(1)
	e.recordError(fmt.Errorf("%s: message %s: %w", st.name, o.msg.ID, err))
	if IsUnavailable(err) {
		e.failures.warn(st.name+" unavailable, retrying", err, o.msg.ID, 1)
		return true, true
	}
	if !IsPermanent(err) && !st.exhausted(e.opts.Retry, round) {
		e.failures.warn(st.name+" failed, retrying", err, o.msg.ID, 1)
		b.waitAsked(err)
		return true, false
	}
	onFailure := e.opts.OnFailure
	if st.Retry != nil && st.Retry.OnFailure != OnFailureDrop {
		// numaflow-core's RetryStep::Nack: the input goes
		// back to the source, to come again.
		e.failures.error(st.name+" failed, its retries spent: the input is handed back to the source", err, o.msg.ID, 1)
		b.nack(o.parent, Nack{Reason: fmt.Sprintf("%s failed after its retries: %v", st.name, err)})
		b.final(o.parent)
		return false, false
	} else if st.Retry != nil {
		onFailure = OnFailureDrop
	}
	switch onFailure {
	case OnFailureFallback:
		e.failures.error(st.name+" failed, message sent to the fallback sink", err, o.msg.ID, 1)
		o.msg.FallbackCause = err
		b.toFallback = append(b.toFallback, o)
	case OnFailureDrop:
		e.failures.error(st.name+" failed, message dropped", err, o.msg.ID, 1)
		// numaflow-core counts a stage's retry-exhausted drops
		// in the stage's dropped counter (transformer.rs,
		// mapper/map.rs), not in monovtx_dropped_total.
		st.dropped.add(1)
		e.totals.dropped.add(1)
		b.final(o.parent)
	default:
		e.failures.warn(st.name+" failed, retrying", err, o.msg.ID, 1)
		b.waitAsked(err)
		return true, false
	}
	return false, false
}

// passOn makes r's outputs of o the stage's outputs, appended to next:
// each counts toward its input's final state, takes an ID of its own, and
// keeps what the stage left unset from its input.
func (b *batch) passOn(st *stage, o output, r TransformResult, next []output) []output {
	e := b.e
	in := &b.inputs[o.parent]
	in.remaining += len(r.Outputs) - 1
	b.freeInput(o, r.Outputs)
	for k, out := range r.Outputs {
		if out.Release != nil && out != o.msg {
			in.releases = append(in.releases, out.Release)
			out.Release = nil
		}
		if out == in.msg && (len(r.Outputs) > 1 || b.tainted) {
			// The input passed on beside other outputs stays the
			// source's ack handle: its ID must not become an
			// output's, and a later stage replacing it must not
			// look like that stage replacing the input (a sibling
			// may still read its payload). Passed on alone, it
			// keeps its ID and has no sibling: no copy, unless a
			// call of this batch was cut short and may still read
			// the input's ID.
			cp := *out
			out = &cp
		}
		place := k
		if len(r.Indexes) == len(r.Outputs) {
			place = r.Indexes[k]
		}
		out.ID = e.outputID(st, o.msg, in.offset, k, place, len(r.Outputs))
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
	return next
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
