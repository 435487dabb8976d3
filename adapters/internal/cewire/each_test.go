package cewire

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

func TestEachBoundsConcurrencyAndCallsEveryIndexOnce(t *testing.T) {
	slots := make(chan struct{}, 3)
	var now, peak atomic.Int64
	calls := make([]atomic.Int64, 50)
	started := Each(context.Background(), slots, len(calls), func(i int) {
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
		t.Fatalf("%d calls at once, the slots allow 3", p)
	}
}

func TestEachStopsStartingWhenTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	slots := make(chan struct{}, 1)
	var called atomic.Int64
	started := Each(ctx, slots, 10, func(i int) {
		called.Add(1)
		if i == 2 {
			cancel()
		}
	})
	if started < 3 || started == 10 || called.Load() != int64(started) {
		t.Fatalf("started %d, called %d; want the calls to stop after the cancel at index 2", started, called.Load())
	}
}
