package runnercmd

import (
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"testing"
	"time"
)

func TestGCPercentLeavesThePoolOutOfTheHeadroom(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live, held int64
		want       int
	}{
		{0, 0, 100},
		{32 * mib, 0, 100},          // nothing pooled: Go's default
		{10 * mib, 0, 160},          // a small heap grows by minGCHeadroom: 16 of 10
		{48 * mib, 40 * mib, 33},    // 8 MiB of the rest, less than minGCHeadroom: 16 of 48
		{100 * mib, 25 * mib, 75},   // grow by the 75 MiB not pooled
		{6 * mib, 5 * mib, 266},     // minGCHeadroom over a small heap: 16 of 6
		{40 * mib, 41 * mib, 40},    // held counts a buffer not yet found dead: 16 of 40
		{1 << 40, 1 << 40, 1},       // a huge pool: at least 1 %
		{64 * mib, 64*mib - 1, 25},  // 16 MiB of 64 MiB
		{200 * mib, 100 * mib, 50},  // half pooled
		{1024 * mib, 1020 * mib, 1}, // 1.56 % rounds down
	} {
		if got := gcPercentFor(c.live, c.held); got != c.want {
			t.Errorf("gcPercentFor(%d MiB live, %d MiB held) = %d, want %d", c.live/mib, c.held/mib, got, c.want)
		}
	}
}

// TestPacerFollowsThePoolAcrossCollections runs the pacer on the real
// collector: with 64 MiB held it lowers the percent after a collection,
// and once the pool holds nothing it gives the heap at least GOGC=100's
// headroom back (more, as this test binary's heap is under 16 MiB).
func TestPacerFollowsThePoolAcrossCollections(t *testing.T) {
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)

	var held atomic.Int64
	var last atomic.Int64
	last.Store(100)
	p := newGCPacer(held.Load, func(v int) int {
		last.Store(int64(v))
		return debug.SetGCPercent(v)
	})
	// 64 MiB live and counted as held, as pooled payload buffers are.
	pooled := make([][]byte, 64)
	for i := range pooled {
		pooled[i] = make([]byte, 1<<20)
	}
	held.Store(64 << 20)
	p.arm()
	defer p.stop()

	waitFor := func(what string, ok func(int64) bool) {
		t.Helper()
		for i := 0; i < 100; i++ { // at most 100 collections, 5 s
			runtime.GC()
			time.Sleep(50 * time.Millisecond)
			if ok(last.Load()) {
				return
			}
		}
		t.Fatalf("%s: GC percent still %d after 100 collections", what, last.Load())
	}
	waitFor("64 MiB pooled", func(v int64) bool { return v < 100 })
	// The rest of the live heap is this test binary's (a few MiB), so the
	// percent is minGCHeadroom over a heap of about 64 MiB.
	if v := last.Load(); v < 15 || v > 26 {
		t.Fatalf("with 64 MiB of a ~70 MiB heap pooled the GC percent is %d, want 15..26", v)
	}
	if got := debug.SetGCPercent(-1); int64(got) != last.Load() {
		t.Fatalf("the collector runs at %d %%, the pacer set %d", got, last.Load())
	} else {
		debug.SetGCPercent(got)
	}

	runtime.KeepAlive(pooled)
	pooled = nil
	held.Store(0)
	waitFor("pool emptied", func(v int64) bool { return v >= 100 })
}

func TestGOGCFromTheEnvironmentIsLeftAlone(t *testing.T) {
	t.Setenv("GOGC", "150")
	got := startGCPacing()
	if len(got) != 2 || got[1] != "GOGC=150" {
		t.Fatalf("startGCPacing() = %v, want the GOGC it was given", got)
	}
}

// TestPacerHoldsTheGoalAtItsPeak: a goal that would fall with the live
// heap is kept at the peak for goalHold, then follows the heap again.
func TestPacerHoldsTheGoalAtItsPeak(t *testing.T) {
	const mib = 1 << 20
	now := time.Unix(0, 0)
	p := newGCPacer(func() int64 { return 0 }, func(int) int { return 0 })
	p.now = func() time.Time { return now }
	step := func(after time.Duration, live int64, wantGoal int64) {
		t.Helper()
		now = now.Add(after)
		pct := p.hold(live, gcPercentFor(live, 0))
		if goal := live + live*int64(pct)/100; goal/mib != wantGoal/mib {
			t.Fatalf("at %v with %d MiB live: goal %d MiB (GC percent %d), want %d MiB", now.Sub(time.Unix(0, 0)), live/mib, goal/mib, pct, wantGoal/mib)
		}
	}
	step(0, 30*mib, 60*mib)                   // GOGC=100's goal
	step(time.Second, 15*mib, 60*mib)         // the heap fell: the goal is held
	step(time.Second, 40*mib, 80*mib)         // a higher goal is the new peak
	step(goalHold, 20*mib, 80*mib)            // held for goalHold after it was set
	step(time.Millisecond, 20*mib, 40*mib)    // then it follows the heap
	step(time.Second, 10*mib, 40*mib)         // and holds that
	step(time.Second, 4*mib, 40*mib)          // 2 x the 20 MiB goal of 4 MiB live: the cap
	step(time.Second, 2*mib, 36*mib)          // at most twice the goal it would have
	step(goalHold+time.Second, 4*mib, 20*mib) // 16 MiB floor over 4 MiB
}
