package cewire

import (
	"context"
	"sync"
	"time"

	"github.com/monovertex/monovertex/runner"
)

// PermanentRetryFloor is the shortest time between two posts of one message
// after a permanent answer (a 3xx, a 4xx other than 404, 408, 409 and 429,
// an oversized or broken reply). Such an answer comes back however often it
// is asked, so with MV_ON_FAILURE=retry and the 1ms default retry interval
// the engine would otherwise post the message about a thousand times a
// second.
const PermanentRetryFloor = time.Second

// Floor remembers when messages were answered permanently and holds back a
// new post of the same message until the floor has passed. Messages never
// answered permanently are not held. It is safe for concurrent use.
type Floor struct {
	d   time.Duration
	now func() time.Time

	mu        sync.Mutex
	last      map[string]time.Time
	nextPrune int
}

// NewFloor returns a Floor of d.
func NewFloor(d time.Duration) *Floor {
	return &Floor{d: d, now: time.Now, last: map[string]time.Time{}}
}

// Mark records that message id was just answered permanently.
func (f *Floor) Mark(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	// Forget what the floor no longer holds back, so the map stays as small
	// as the messages answered permanently within one floor.
	if len(f.last) >= f.nextPrune {
		for k, at := range f.last {
			if now.Sub(at) >= f.d {
				delete(f.last, k)
			}
		}
		f.nextPrune = 2*len(f.last) + 1024
	}
	f.last[id] = now
}

// Delay is how long a post of every message in ids must still wait.
func (f *Floor) Delay(ids []string) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.last) == 0 {
		return 0
	}
	now := f.now()
	var wait time.Duration
	for _, id := range ids {
		at, ok := f.last[id]
		if !ok {
			continue
		}
		if d := f.d - now.Sub(at); d > wait {
			wait = d
		}
	}
	return wait
}

// Wait sleeps until the floor has passed for every message in ids, or ctx
// ends (then it returns ctx's error).
func (f *Floor) Wait(ctx context.Context, ids []string) error {
	if !runner.Sleep(ctx, f.Delay(ids)) {
		return ctx.Err()
	}
	return nil
}
