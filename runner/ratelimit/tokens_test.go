package ratelimit

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/monovertex/monovertex/runner/ratelimit/ratelimittest"
)

// ask is one round of a pool test: every pod takes n tokens (all = every
// token of its share), then the clock moves gap seconds.
type ask struct {
	n   int
	gap int64
}

const all = math.MaxInt

// The cases are numaflow-throttling's own (rust/numaflow-throttling/src/lib.rs,
// test_distributed_rate_limiter_*_in_memory and _mode tests without
// deposits): two pods, each holding the whole pool and taking its half, so
// the expected figures are what each pod gets.
func TestPoolMatchesNumaflowCases(t *testing.T) {
	goBackN := func(b Bounds) Bounds {
		b.Mode, b.Cooldown, b.RampDownPercent, b.ThresholdPercent = GoBackN, time.Second, 100, 100
		return b
	}
	onlyIfUsed := func(b Bounds) Bounds { b.Mode, b.ThresholdPercent = OnlyIfUsed, 100; return b }
	scheduled := func(b Bounds) Bounds { b.Mode = Scheduled; return b }
	b2010 := Bounds{Max: 20, Min: 10, RampUp: 10 * time.Second, Mode: Relaxed}
	b6015 := Bounds{Max: 60, Min: 15, RampUp: 10 * time.Second, Mode: Relaxed}
	each := func(n int, gap int64, times int) []ask {
		out := make([]ask, times)
		for i := range out {
			out[i] = ask{n, gap}
		}
		return out
	}
	cases := []struct {
		name   string
		b      Bounds
		asks   []ask
		expect []int
	}{
		{"relaxed fractional slope, asking again in the same second", b6015,
			append([]ask{{all, 1}, {all, 0}}, each(all, 1, 10)...),
			[]int{7, 9, 0, 12, 14, 16, 18, 21, 23, 25, 27, 30}},
		{"relaxed fractional slope, all tokens", b6015, each(all, 1, 11),
			[]int{7, 9, 12, 14, 16, 18, 21, 23, 25, 27, 30}},
		{"relaxed, asking less than the share", b6015, each(20, 1, 11),
			[]int{7, 9, 12, 14, 16, 18, 20, 20, 20, 20, 20}},
		{"scheduled grows with the clock, used or not", scheduled(b2010),
			[]ask{{2, 2}, {2, 2}, {all, 2}, {2, 2}, {all, 2}, {2, 2}, {all, 2}, {all, 2}},
			[]int{2, 2, 7, 2, 9, 2, 10, 10}},
		{"scheduled after long gaps", scheduled(b2010),
			[]ask{{30, 1}, {30, 3}, {30, 2}, {30, 4}, {30, 1}, {30, 1}},
			[]int{5, 5, 7, 8, 10, 10}},
		{"onlyIfUsed grows when everything is used", onlyIfUsed(b2010), each(all, 1, 12),
			[]int{5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10}},
		{"onlyIfUsed stalls while tokens are left over", onlyIfUsed(b2010),
			append([]ask{{all, 1}, {4, 1}, {2, 1}}, each(all, 1, 9)...),
			[]int{5, 4, 2, 5, 6, 6, 7, 7, 8, 8, 9, 9}},
		{"goBackN without gaps ramps like relaxed", goBackN(b2010),
			append([]ask{{2, 1}}, each(all, 1, 11)...),
			[]int{2, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10}},
		{"goBackN does not grow below the threshold", goBackN(b2010),
			[]ask{{all, 1}, {2, 1}, {5, 1}, {all, 1}, {all, 1}},
			[]int{5, 2, 5, 5, 6}},
		{"goBackN delays growth after a gap", goBackN(b2010),
			[]ask{{all, 1}, {all, 2}, {all, 1}, {all, 1}},
			[]int{5, 5, 5, 5}},
		{"goBackN never goes below min", goBackN(b2010),
			[]ask{{all, 1}, {all, 3}, {all, 2}, {all, 1}, {all, 1}, {all, 1}},
			[]int{5, 5, 5, 5, 5, 6}},
		{"goBackN ramps down after a long gap and carries on", goBackN(b2010),
			[]ask{{all, 1}, {all, 1}, {all, 1}, {all, 1}, {all, 1}, {all, 1}, {all, 5}, {all, 1}, {all, 1}, {all, 1}},
			[]int{5, 5, 6, 6, 7, 7, 8, 6, 6, 7}},
		{"goBackN penalises underuse", goBackN(b2010),
			append([]ask{{all, 1}, {4, 1}, {2, 1}}, each(all, 1, 9)...),
			[]int{5, 4, 2, 5, 5, 6, 6, 7, 7, 8, 8, 9}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pods := []*pool{newPool(tc.b, tc.b.Min, 0), newPool(tc.b, tc.b.Min, 0)}
			var epoch int64
			for i, a := range tc.asks {
				for k, p := range pods {
					got, _ := p.take(a.n, epoch, len(pods))
					if got != tc.expect[i] {
						t.Fatalf("round %d (second %d), pod %d: got %d tokens, want %d", i+1, epoch, k, got, tc.expect[i])
					}
				}
				epoch += a.gap
			}
		})
	}
}

func TestPoolOneReplicaReachesMaxAfterRampUp(t *testing.T) {
	b := Bounds{Max: 110, Min: 10, RampUp: 10 * time.Second, Mode: Relaxed}
	p := newPool(b, b.Min, 100)
	var got []int
	for s := int64(100); s <= 112; s++ {
		n, _ := p.take(all, s, 1)
		got = append(got, n)
	}
	want := []int{10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 110, 110}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("second %d: got %d tokens, want %d (all: %v)", i, got[i], want[i], got)
		}
	}
}

// Numaflow starts the scheduled mode's clock at epoch 0, so its first
// refill jumps to max; here the ramp starts when the limiter does.
func TestScheduledRampStartsAtCreation(t *testing.T) {
	b := Bounds{Max: 100, Min: 10, RampUp: 9 * time.Second, Mode: Scheduled}
	p := newPool(b, b.Min, 1_700_000_000)
	if n, _ := p.take(all, 1_700_000_001, 1); n != 20 {
		t.Fatalf("one second after start: got %d tokens, want 20", n)
	}
}

func TestPoolSharesTheRemainderNowhere(t *testing.T) {
	// 10 tokens among 3 replicas: 3 each, the tenth is handed to nobody.
	b := Bounds{Max: 10, Min: 10, RampUp: time.Second}
	pods := []*pool{newPool(b, 10, 0), newPool(b, 10, 0), newPool(b, 10, 0)}
	total := 0
	for _, p := range pods {
		for {
			n, _ := p.take(1, 0, 3)
			if n == 0 {
				break
			}
			total += n
		}
	}
	if total != 9 {
		t.Fatalf("3 replicas took %d tokens of a pool of 10, want 9 (3 each)", total)
	}
}

func TestAcquireWaitsForTheNextSecond(t *testing.T) {
	clock := ratelimittest.NewJumpClock(time.Unix(1_700_000_000, 250_000_000))
	l, err := New(Config{Bounds: Bounds{Max: 4, Min: 2, RampUp: 2 * time.Second}, BatchSize: 100, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	perSecond := map[int64]int{}
	for range 2 + 3 + 4 + 4 {
		if !l.Acquire(context.Background()) {
			t.Fatal("Acquire returned false with a live context")
		}
		perSecond[clock.Now().Unix()]++
	}
	want := map[int64]int{1_700_000_000: 2, 1_700_000_001: 3, 1_700_000_002: 4, 1_700_000_003: 4}
	for s, n := range want {
		if perSecond[s] != n {
			t.Fatalf("read calls per second = %v, want %v", perSecond, want)
		}
	}
	if st := l.Status(); st.LimitPerSecond != 400 || st.Replicas != 1 || st.Store != "memory" || !st.Throttled {
		t.Fatalf("status = %+v, want 400 messages/s, 1 replica, memory, throttled", st)
	}
}

// stoppedClock never reaches the next second.
type stoppedClock struct{ now time.Time }

func (c stoppedClock) Now() time.Time                     { return c.now }
func (stoppedClock) After(time.Duration) <-chan time.Time { return nil }

func TestAcquireReturnsWhenTheContextEnds(t *testing.T) {
	l, err := New(Config{Bounds: Bounds{Max: 1, Min: 1, RampUp: time.Second}, Clock: stoppedClock{time.Unix(1_700_000_000, 0)}})
	if err != nil {
		t.Fatal(err)
	}
	if !l.Acquire(context.Background()) {
		t.Fatal("first Acquire refused")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if l.Acquire(ctx) {
		t.Fatal("a second token was handed out within the first second")
	}
}

func TestConsensusShareFollowsActiveReplicas(t *testing.T) {
	l, err := New(Config{Bounds: Bounds{Max: 10, Min: 1, RampUp: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		c             Consensus
		agreed        bool
		known, report int64
	}{
		{Consensus{Agree: true, Size: 3, Active: 3}, true, 3, 3},
		// A replica left: Numaflow's script still agrees on 3; the share
		// stays until the remaining two agree on 2.
		{Consensus{Agree: true, Size: 3, Active: 2}, false, 3, 2},
		{Consensus{Agree: false, Size: 3, Active: 2}, false, 3, 2},
		{Consensus{Agree: true, Size: 2, Active: 2}, true, 2, 2},
		// A replica joined with size 3.
		{Consensus{Agree: false, Size: 3, Active: 3}, false, 2, 3},
		{Consensus{Agree: true, Size: 3, Active: 3}, true, 3, 3},
	}
	for i, s := range steps {
		if got := l.apply(s.c); got != s.agreed || l.known.Load() != s.known || l.desired.Load() != s.report {
			t.Fatalf("step %d %+v: agreed=%v known=%d report=%d, want %v %d %d", i, s.c, got, l.known.Load(), l.desired.Load(), s.agreed, s.known, s.report)
		}
	}
}
