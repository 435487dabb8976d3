package runner

import (
	"testing"
	"time"
)

func TestRetryDelay(t *testing.T) {
	for _, tc := range []struct {
		name  string
		p     RetryPolicy
		retry int
		want  time.Duration
	}{
		{"constant", RetryPolicy{Interval: time.Millisecond, Factor: 1}, 5, time.Millisecond},
		{"exponential", RetryPolicy{Interval: time.Millisecond, Factor: 2}, 3, 8 * time.Millisecond},
		{"capped", RetryPolicy{Interval: time.Millisecond, Factor: 2, Cap: 5 * time.Millisecond}, 10, 5 * time.Millisecond},
		{"huge exponent stays finite", RetryPolicy{Interval: time.Second, Factor: 10}, 1000, time.Duration(1<<63 - 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.Delay(tc.retry); got != tc.want {
				t.Fatalf("Delay(%d) = %v, want %v", tc.retry, got, tc.want)
			}
		})
	}
	j := RetryPolicy{Interval: 10 * time.Millisecond, Factor: 1, Jitter: 0.5}
	for i := 0; i < 100; i++ {
		if d := j.Delay(0); d < 10*time.Millisecond || d > 15*time.Millisecond {
			t.Fatalf("jittered delay %v outside [10ms, 15ms]", d)
		}
	}
	if (RetryPolicy{Steps: 0}).Exhausted(1 << 20) {
		t.Fatal("unlimited steps exhausted")
	}
	if !(RetryPolicy{Steps: 3}).Exhausted(3) || (RetryPolicy{Steps: 3}).Exhausted(2) {
		t.Fatal("Steps=3: exhausted after the third retry, not before")
	}
}

func TestRateCounter(t *testing.T) {
	start := time.Unix(1_000_000, 0)
	r := newRateCounter(start)
	for s := 0; s < 120; s++ {
		r.add(start.Add(time.Duration(s)*time.Second), 10)
	}
	now := start.Add(120 * time.Second)
	if got := r.perSecond(now, time.Minute); got != 10 {
		t.Fatalf("1m rate %v, want 10", got)
	}
	// Younger than the window: averaged over its age, not the whole window.
	if got := r.perSecond(now, 5*time.Minute); got != 10 {
		t.Fatalf("5m rate of a 2-minute-old counter %v, want 10", got)
	}
	if got := r.perSecond(now.Add(10*time.Minute), time.Minute); got != 0 {
		t.Fatalf("rate after 10 idle minutes %v, want 0", got)
	}
}

func TestCallDelayBacksOffOnItsOwnSchedule(t *testing.T) {
	e := &Engine{opts: Options{Retry: RetryPolicy{Interval: time.Millisecond, Factor: 1}}}
	want := []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond, 80 * time.Millisecond,
		160 * time.Millisecond, 320 * time.Millisecond, 640 * time.Millisecond, time.Second, time.Second}
	for i, w := range want {
		if got := e.callDelay(i); got != w {
			t.Fatalf("callDelay(%d) = %v, want %v", i, got, w)
		}
	}
	slow := &Engine{opts: Options{Retry: RetryPolicy{Interval: 500 * time.Millisecond, Factor: 1}}}
	if got := slow.callDelay(0); got != 500*time.Millisecond {
		t.Fatalf("a slower per-message policy wins: got %v, want 500ms", got)
	}
}

// TestStageStepsTakeStepsUnlessSet: a stage's retries follow Steps unless
// StageSteps says otherwise; negative is unlimited.
func TestStageStepsTakeStepsUnlessSet(t *testing.T) {
	for _, c := range []struct {
		p       RetryPolicy
		retries int
		want    bool
	}{
		{RetryPolicy{Steps: 3}, 2, false},
		{RetryPolicy{Steps: 3}, 3, true},
		{RetryPolicy{Steps: 3, StageSteps: -1}, 1 << 20, false},
		{RetryPolicy{Steps: 3, StageSteps: 5}, 4, false},
		{RetryPolicy{Steps: 3, StageSteps: 5}, 5, true},
		{RetryPolicy{}, 1 << 20, false},
	} {
		if got := c.p.StageExhausted(c.retries); got != c.want {
			t.Errorf("%+v after %d retries: exhausted %v, want %v", c.p, c.retries, got, c.want)
		}
	}
}
