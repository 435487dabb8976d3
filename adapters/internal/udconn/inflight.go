package udconn

import "context"

// InFlight bounds the requests in flight on one container's stream across
// concurrent calls, as numaflow-core bounds a transformer's and a unary or
// stream map's by spec.limits.concurrency. A nil *InFlight is unbounded.
type InFlight struct{ slots chan struct{} }

// NewInFlight returns a bound of n requests, or nil (unbounded) for n <= 0.
func NewInFlight(n int) *InFlight {
	if n <= 0 {
		return nil
	}
	return &InFlight{slots: make(chan struct{}, n)}
}

// Claim is one call's share of the bound: a slot per request sent whose
// answer has not come back yet.
type Claim struct {
	f    *InFlight
	held int
}

// Claim starts a call's share; Close it when the call returns.
func (f *InFlight) Claim() *Claim { return &Claim{f: f} }

// Answered gives back the slot of one request whose answer came.
func (c *Claim) Answered() {
	if c.f != nil && c.held > 0 {
		c.held--
		<-c.f.slots
	}
}

// Close gives back every slot the call still holds (answers it gave up on).
func (c *Claim) Close() {
	for ; c.f != nil && c.held > 0; c.held-- {
		<-c.f.slots
	}
}

// Wait takes a slot for the next request. While the stream is full it
// hands the call's own answers arriving on replies to take (which calls
// Answered), so that its slots come free; it stops at dead (returning
// onDead()) or when ctx ends.
func Wait[R any](ctx context.Context, c *Claim, replies <-chan R, take func(R), dead <-chan struct{}, onDead func() error) error {
	if c.f == nil {
		return nil
	}
	for {
		select {
		case c.f.slots <- struct{}{}:
			c.held++
			return nil
		case r := <-replies:
			take(r)
		case <-dead:
			return onDead()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Drain hands take the replies already waiting on replies, without waiting
// for more: a call failing part way keeps the answers that came.
func Drain[R any](replies <-chan R, take func(R)) {
	for {
		select {
		case r := <-replies:
			take(r)
		default:
			return
		}
	}
}
