package cewire

import (
	"context"
	"sync"
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
