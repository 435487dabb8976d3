package runner

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/monovertex/monovertex/internal/clock"
)

// Calls that fail as a whole (a sidecar away, a connection refused, a
// broker restarting) back off on their own schedule, 10ms doubling up to 1s,
// whatever the per-message policy says: MV_RETRY_INTERVAL's 1ms default
// would otherwise spin through thousands of failed calls a second, and the
// cap keeps a recovered adapter noticed within a second.
const (
	minCallBackoff = 10 * time.Millisecond
	maxCallBackoff = time.Second
)

// callDelay is the wait before retrying a call that failed as a whole for
// the (failures+1)-th time in a row.
func (e *Engine) callDelay(failures int) time.Duration {
	d := maxCallBackoff
	if failures < 7 {
		d = min(minCallBackoff<<failures, maxCallBackoff)
	}
	return min(max(d, e.opts.Retry.Delay(failures)), maxCallBackoff)
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
