package cewire

import (
	"context"
	"fmt"
	"sync"

	"github.com/monovertex/monovertex/runner"
)

// Workers runs calls on long-lived goroutines, at most max at once across
// every caller sharing them (so one MV_*_CONCURRENCY limit holds for all
// batches in flight). A goroutine that posts keeps the stack net/http's
// client grew for it; a new goroutine per post grew one from the smallest
// size on every call (runtime.newstack in the hack/bench profiles of the
// CloudEvents transformer at 1 KiB).
type Workers struct {
	jobs chan job
	stop chan struct{}
	once sync.Once

	mu  sync.Mutex
	n   int // workers started
	max int
}

type job struct {
	fn func(i int)
	i  int
	wg *sync.WaitGroup
}

// NewWorkers returns Workers that run at most max calls at once; the
// goroutines start as calls need them and stay until Stop.
func NewWorkers(max int) *Workers {
	return &Workers{jobs: make(chan job), stop: make(chan struct{}), max: max}
}

// Each calls fn(i) for i in 0..n-1 on the workers. It stops starting
// calls when ctx ends (or the workers are stopped), waits for the started
// ones, and returns how many started: indices from started on were never
// called.
func (w *Workers) Each(ctx context.Context, n int, fn func(i int)) (started int) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := 0; i < n; i++ {
		if ctx.Err() != nil {
			return started
		}
		wg.Add(1)
		if !w.hand(ctx, job{fn: fn, i: i, wg: &wg}) {
			wg.Done()
			return started
		}
		started++
	}
	return started
}

// hand gives j to an idle worker, or to a new one while there are fewer
// than max, or waits for one to be idle.
func (w *Workers) hand(ctx context.Context, j job) bool {
	select {
	case w.jobs <- j:
		return true
	default:
	}
	w.mu.Lock()
	if w.n < w.max {
		w.n++
		w.mu.Unlock()
		go w.work(j)
		return true
	}
	w.mu.Unlock()
	select {
	case w.jobs <- j:
		return true
	case <-ctx.Done():
		return false
	case <-w.stop:
		return false
	}
}

func (w *Workers) work(j job) {
	for {
		j.fn(j.i)
		j.wg.Done()
		select {
		case j = <-w.jobs:
		case <-w.stop:
			return
		}
	}
}

// Stop ends the workers once their calls return; Each starts no call after it.
func (w *Workers) Stop() { w.once.Do(func() { close(w.stop) }) }

// Calls runs the posts of a batch, one per message, for the CloudEvents
// sink and transformer: at most concurrency at once across every batch in
// flight, and a message answered permanently is held back by
// PermanentRetryFloor before it is posted again.
type Calls struct {
	workers *Workers
	floor   *Floor
}

// NewCalls returns Calls with room for concurrency posts at once.
func NewCalls(concurrency int) *Calls {
	return &Calls{workers: NewWorkers(concurrency), floor: NewFloor(PermanentRetryFloor)}
}

// Stop ends the goroutines that post, once the adapter is closed.
func (c *Calls) Stop() { c.workers.Stop() }

// Run waits out the retry floor of msgs, then calls post(i) for every
// message as Workers.Each does; a message whose post returned a runner.Permanent
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
	return c.workers.Each(ctx, len(msgs), func(i int) {
		if runner.IsPermanent(post(i)) {
			c.floor.Mark(msgs[i].ID)
		}
	}), nil
}
