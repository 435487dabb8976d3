package cewire

import (
	"context"
	"fmt"
	"sync"

	"github.com/monovertex/monovertex/runner"
)

// Each calls fn(i) for i in 0..n-1, each in its own goroutine, with at most
// cap(slots) running at once across every caller sharing slots (so one
// MV_*_CONCURRENCY limit holds for all batches in flight). It stops starting
// calls when ctx ends, waits for the started ones, and returns how many
// started: indices from started on were never called.
func Each(ctx context.Context, slots chan struct{}, n int, fn func(i int)) (started int) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := 0; i < n; i++ {
		if ctx.Err() != nil {
			return started
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return started
		}
		started++
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			fn(i)
		}()
	}
	return started
}

// Calls runs the posts of a batch, one per message, for the CloudEvents
// sink and transformer: at most concurrency at once across every batch in
// flight, and a message answered permanently is held back by
// PermanentRetryFloor before it is posted again.
type Calls struct {
	slots chan struct{}
	floor *Floor
}

// NewCalls returns Calls with room for concurrency posts at once.
func NewCalls(concurrency int) *Calls {
	return &Calls{slots: make(chan struct{}, concurrency), floor: NewFloor(PermanentRetryFloor)}
}

// Run waits out the retry floor of msgs, then calls post(i) for every
// message as Each does; a message whose post returned a runner.Permanent
// error is marked for the floor. It returns how many posts started, or an
// error when ctx ended while waiting out the floor.
func (c *Calls) Run(ctx context.Context, msgs []*runner.Message, post func(i int) error) (int, error) {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	if err := c.floor.Wait(ctx, ids); err != nil {
		return 0, fmt.Errorf("waiting out the retry floor of messages answered permanently: %w", err)
	}
	return Each(ctx, c.slots, len(msgs), func(i int) {
		if runner.IsPermanent(post(i)) {
			c.floor.Mark(msgs[i].ID)
		}
	}), nil
}
