package cewire

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/monovertex/monovertex/internal/testutil"
	"github.com/monovertex/monovertex/internal/testutil/goid"
)

func TestEachBoundsConcurrencyAndCallsEveryIndexOnce(t *testing.T) {
	w := NewWorkers(3)
	defer w.Stop()
	var now, peak atomic.Int64
	calls := make([]atomic.Int64, 50)
	started := w.Each(context.Background(), len(calls), func(i int) {
		n := now.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(time.Millisecond)
		calls[i].Add(1)
		now.Add(-1)
	})
	if started != len(calls) {
		t.Fatalf("started %d of %d", started, len(calls))
	}
	for i := range calls {
		if c := calls[i].Load(); c != 1 {
			t.Fatalf("index %d called %d times", i, c)
		}
	}
	if p := peak.Load(); p > 3 {
		t.Fatalf("%d calls at once, the workers allow 3", p)
	}
}

func TestEachStopsStartingWhenTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	w := NewWorkers(1)
	defer w.Stop()
	var called atomic.Int64
	started := w.Each(ctx, 10, func(i int) {
		called.Add(1)
		if i == 2 {
			cancel()
		}
	})
	if started < 3 || started == 10 || called.Load() != int64(started) {
		t.Fatalf("started %d, called %d; want the calls to stop after the cancel at index 2", started, called.Load())
	}
}

// Calls of many batches, from several callers at once, run on at most max
// goroutines, which stay for the next batch and end at Stop.
func TestWorkersAreSharedReusedAndStopped(t *testing.T) {
	w := NewWorkers(4)
	before := runtime.NumGoroutine()
	var now, peak atomic.Int64
	var mu sync.Mutex
	ids := map[uint64]bool{}
	var callers sync.WaitGroup
	for range 3 {
		callers.Add(1)
		go func() {
			defer callers.Done()
			for range 50 {
				if started := w.Each(context.Background(), 8, func(int) {
					n := now.Add(1)
					for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
					}
					mu.Lock()
					ids[goid.ID()] = true
					mu.Unlock()
					time.Sleep(50 * time.Microsecond)
					now.Add(-1)
				}); started != 8 {
					t.Errorf("started %d of 8", started)
				}
			}
		}()
	}
	callers.Wait()
	if p := peak.Load(); p > 4 {
		t.Fatalf("%d calls at once across callers, the workers allow 4", p)
	}
	if len(ids) > 4 {
		t.Fatalf("1,200 calls ran on %d goroutines, want at most 4 reused", len(ids))
	}
	w.Stop()
	testutil.WaitFor(t, 5*time.Second, "the workers to end", func() bool { return runtime.NumGoroutine() <= before })
	if started := w.Each(context.Background(), 3, func(int) { t.Error("called after Stop") }); started != 0 {
		t.Fatalf("started %d after Stop", started)
	}
}
