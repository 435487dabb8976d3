package runner

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
	if !Sleep(ctx, b.e.callDelay(round)) {
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
	if !Sleep(ctx, d) {
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
	errors *count
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

// settleFunc takes the results of a call over pending, in round
// (counting from 0), and returns the outputs to offer again, how many of
// those only found their peer away (Unavailable), and an error that stops
// the rounds.
type settleFunc[R any] func(ctx context.Context, pending []output, results []R, round int) (again []output, away int, err error)

// retryRounds is the retry loop a stage and a tier share: it calls c with
// the messages of pending, retries a failed call after the call backoff,
// hands the results of a call to settle, and offers what settle returns
// again after the round backoff (or the wait for an unavailable peer when
// every one of them was unavailable).
type retryRounds[R any] struct {
	b      *batch
	c      roundCall[R]
	settle settleFunc[R]
	// pending are offered in the next call. spent holds the messages that
	// failed in this round in the part of a call that was answered before
	// the call failed: they have had this round's try, so they wait for
	// the next round with its backoff instead of riding along when the
	// rest of the call is offered again.
	pending, spent []output
	// round counts the rounds (retry steps), calls the calls that failed
	// as a whole in a row, attempts every call made.
	round, calls, attempts int
	msgs                   []*Message
}

// runRounds runs the retry rounds of c over pending until each output is
// settled, and returns how many calls it made.
func runRounds[R any](ctx context.Context, b *batch, c roundCall[R], pending []output, settle settleFunc[R]) (attempts int, err error) {
	r := &retryRounds[R]{b: b, c: c, settle: settle, pending: pending, msgs: make([]*Message, 0, len(pending))}
	err = r.run(ctx)
	return r.attempts, err
}

func (r *retryRounds[R]) run(ctx context.Context) error {
	for len(r.pending) > 0 || len(r.spent) > 0 {
		if len(r.pending) == 0 {
			// Only spent messages are left: the round is over.
			r.pending, r.spent = r.spent, nil
			if err := r.b.backoff(ctx, r.c.retry, false, &r.round, &r.calls); err != nil {
				return err
			}
			continue
		}
		results, got, err := r.call(ctx)
		if err != nil {
			if err := r.callFailed(ctx, err, results, got); err != nil {
				return err
			}
			continue
		}
		if err := r.settleRound(ctx, results); err != nil {
			return err
		}
	}
	return nil
}

// call offers the pending messages once, and times the call.
func (r *retryRounds[R]) call(ctx context.Context) (results []R, got []bool, err error) {
	r.msgs = r.msgs[:0]
	for _, o := range r.pending {
		if r.c.stamp {
			stampRetryCount(o.msg, r.round)
		}
		r.msgs = append(r.msgs, o.msg)
	}
	start := time.Now()
	r.attempts++
	results, got, err = r.c.invoke(ctx, r.msgs, r.pending)
	observeSince(r.c.time, start)
	if err == nil && len(results) != len(r.msgs) {
		err = fmt.Errorf("%s returned %d results for %d messages", r.c.name, len(results), len(r.msgs))
	}
	return results, got, err
}

// callFailed counts and logs a call that failed as a whole, settles what
// it answered before it failed, and waits before the next call; it
// returns an error when the rounds must stop (a fatal error, ctx ended).
func (r *retryRounds[R]) callFailed(ctx context.Context, err error, results []R, got []bool) error {
	b, e, c := r.b, r.b.e, r.c
	b.tainted = true
	if IsFatal(err) || ctx.Err() != nil {
		return err
	}
	n := 1
	if c.errorsPerMessage {
		n = len(r.msgs)
	}
	c.errors.add(n)
	e.recordError(fmt.Errorf("%s: %w", c.name, err))
	e.failures.warn(c.name+" "+c.failed+", retrying", err, "", len(r.msgs)-countTrue(got))
	if got != nil {
		if err := r.settleAnswered(ctx, results, got); err != nil {
			return err
		}
		if len(r.pending) == 0 {
			return nil
		}
	}
	if err := b.callBackoff(ctx, r.calls); err != nil {
		return err
	}
	r.calls++
	return nil
}

// settleAnswered settles the results a failed call handed over before it
// failed: they stand (their inputs' payloads may be gone already); only
// the messages without one are offered again in this round. Those that
// failed wait for the next round, unless all of them only found their peer
// away, which spends no step.
func (r *retryRounds[R]) settleAnswered(ctx context.Context, results []R, got []bool) error {
	var done, rest []output
	var doneRes []R
	for k, o := range r.pending {
		if got[k] {
			done, doneRes = append(done, o), append(doneRes, results[k])
		} else {
			rest = append(rest, o)
		}
	}
	again, away, err := r.settle(ctx, done, doneRes, r.round)
	if err != nil {
		return err
	}
	if len(again) == away {
		r.pending = append(rest, again...)
	} else {
		r.pending, r.spent = rest, append(r.spent, again...)
	}
	return nil
}

// settleRound settles the results of a call that answered for every
// message, and backs off before offering what failed again.
func (r *retryRounds[R]) settleRound(ctx context.Context, results []R) error {
	again, away, err := r.settle(ctx, r.pending, results, r.round)
	if err != nil {
		return err
	}
	peerAway := len(again) == away && len(r.spent) == 0
	r.pending, r.spent = append(again, r.spent...), nil
	if len(r.pending) > 0 {
		return r.b.backoff(ctx, r.c.retry, peerAway, &r.round, &r.calls)
	}
	return nil
}
