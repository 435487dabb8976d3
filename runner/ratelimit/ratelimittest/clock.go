// Package ratelimittest holds test doubles for the rate limiter, shared by
// its own tests and the engine's.
package ratelimittest

import (
	"sync"
	"time"
)

// JumpClock is a ratelimit.Clock that jumps to the end of every wait at
// once, so a rate-limited run of many seconds takes none.
type JumpClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewJumpClock returns a clock that starts at start.
func NewJumpClock(start time.Time) *JumpClock { return &JumpClock{now: start} }

// Now is the clock's time: the start plus every wait so far.
func (c *JumpClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After moves the clock on by d and returns a channel that already holds
// the new time.
func (c *JumpClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	c.now = c.now.Add(d)
	now := c.now
	c.mu.Unlock()
	ch := make(chan time.Time, 1)
	ch <- now
	return ch
}
