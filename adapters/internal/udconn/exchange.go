package udconn

import (
	"context"
	"fmt"
	"time"
)

// Exchange is one call's requests and replies on a stream that concurrent
// calls share: the part of a transformer's and a map UDF's TransformEach
// that is the same for both. Each request is sent once the call's Claim
// lets it out, taking the replies that arrive meanwhile; then the call
// waits for the rest, the stream's end, MV_UDF_CALL_TIMEOUT or its
// context. A call that fails part way hands over the replies that came
// first: they stand.
type Exchange[Rep any] struct {
	claim   *Claim
	replies chan Rep
	take    func(Rep)
	st      interface {
		Dead() <-chan struct{}
		Err() error
	}
	broken func(error) error
	// waiting counts the replies sent for and not taken yet.
	waiting int
}

// NewExchange starts an exchange of at most n requests on st. take hands
// one reply over; broken marks the stream failed and returns the call's
// error for err.
func NewExchange[Rep any](n int, claim *Claim, st interface {
	Dead() <-chan struct{}
	Err() error
}, take func(Rep), broken func(error) error) *Exchange[Rep] {
	return &Exchange[Rep]{claim: claim, replies: make(chan Rep, n), take: take, st: st, broken: broken}
}

// Replies is where the stream's receiver puts this call's replies; it
// holds all of them, so the receiver never waits for the call.
func (x *Exchange[Rep]) Replies() chan<- Rep { return x.replies }

// takeOne hands r over and frees its in-flight place.
func (x *Exchange[Rep]) takeOne(r Rep) {
	x.take(r)
	x.waiting--
	x.claim.Answered()
}

// Broken ends the call with broken's error for err, first handing over
// the replies that already came.
func (x *Exchange[Rep]) Broken(err error) error {
	Drain(x.replies, x.takeOne)
	return x.broken(err)
}

// dead ends the call for a stream that ended.
func (x *Exchange[Rep]) dead() error { return x.Broken(x.st.Err()) }

// Send waits for a place in flight (taking replies meanwhile), then sends
// one request with send, which registers its waiter before sending; a
// failed send breaks the call.
func (x *Exchange[Rep]) Send(ctx context.Context, send func() error) error {
	if err := Wait(ctx, x.claim, x.replies, x.takeOne, x.st.Dead(), x.dead); err != nil {
		return err
	}
	if err := x.st.Err(); err != nil {
		return x.Broken(err)
	}
	x.waiting++
	if err := send(); err != nil {
		return x.Broken(err)
	}
	return nil
}

// Await waits for the replies still due, and, when eot is not nil, for it
// to close (a batch map's end of transmission, closed once every reply of
// the batch is in). After timeout it breaks the stream, so the engine
// retries the rest on a new one; total is the call's message count, for
// that error. canceled, when set, runs if ctx ends first.
func (x *Exchange[Rep]) Await(ctx context.Context, eot <-chan struct{}, timeout time.Duration, total int, canceled func()) error {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for x.waiting > 0 || eot != nil {
		select {
		case r := <-x.replies:
			x.takeOne(r)
		case <-eot:
			eot = nil
		case <-x.st.Dead():
			return x.dead()
		case <-timer.C:
			if Drain(x.replies, x.takeOne); x.waiting == 0 && eot == nil {
				continue
			}
			return x.Broken(fmt.Errorf("no response for %d of %d messages within MV_UDF_CALL_TIMEOUT=%v", x.waiting, total, timeout))
		case <-ctx.Done():
			if canceled != nil {
				canceled()
			}
			return ctx.Err()
		}
	}
	return nil
}
