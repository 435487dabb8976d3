package runner

import (
	"testing"
	"time"
)

func TestDesiredReplicas(t *testing.T) {
	sc := Scaling{TargetSeconds: 10, Min: 1, Max: 8}
	for _, tc := range []struct {
		name    string
		pending int64
		rate    float64
		sc      Scaling
		want    int
	}{
		{"unknown pending gives no recommendation", -1, 100, sc, -1},
		{"no rate yet with a backlog gives no recommendation", 500, 0, sc, -1},
		{"idle stays at the minimum", 0, 0, sc, 1},
		{"idle with min 0 may reach zero", 0, 0, Scaling{TargetSeconds: 10}, 0},
		{"never zero while processing, even with min 0", 0, 50, Scaling{TargetSeconds: 10}, 1},
		{"never zero while pending, even with min 0", 1, 1000, Scaling{TargetSeconds: 10}, 1},
		{"backlog of 40s at target 10s wants 4", 4000, 100, sc, 4},
		{"rounds up", 4001, 100, sc, 5},
		{"clamped to max", 1_000_000, 100, sc, 8},
		{"no max", 1_000_000, 100, Scaling{TargetSeconds: 10, Min: 1}, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := desiredReplicas(tc.pending, tc.rate, tc.sc); got != tc.want {
				t.Fatalf("desiredReplicas(%d, %v) = %d, want %d", tc.pending, tc.rate, got, tc.want)
			}
		})
	}
}

func TestGroupProgressRateSpansTheLookback(t *testing.T) {
	var p progressSamples
	if p.rate() != -1 {
		t.Fatal("rate without samples must be unknown")
	}
	start := time.Unix(1000, 0)
	for s := 0; s <= 300; s += 5 {
		p.add(start.Add(time.Duration(s)*time.Second), int64(s*40), 120*time.Second)
	}
	if got := p.rate(); got != 40 {
		t.Fatalf("rate %v, want 40", got)
	}
	if first := p.samples[0].at; start.Add(300*time.Second).Sub(first) != 120*time.Second {
		t.Fatalf("oldest sample %v before the newest, want exactly the 120s lookback", start.Add(300*time.Second).Sub(first))
	}
}

// The recommendation moves as Numaflow's autoscaler moves a MonoVertex
// (pkg/reconciler/monovertex/scaling: scaleUp, scaleDown): at most
// PerUp/PerDown replicas per step, none within the cooldown of the last.
func TestScaleGovernorStepsAndCooldowns(t *testing.T) {
	sc := Scaling{UpCooldown: 60 * time.Second, DownCooldown: 30 * time.Second, PerUp: 2, PerDown: 1}
	t0 := time.Unix(1_700_000_000, 0)
	var g scaleGovernor
	for i, step := range []struct {
		at           time.Duration
		holdUp       bool
		formula, got int
	}{
		{at: 0, formula: 3, got: 3},                  // first recommendation: the formula
		{at: 10 * time.Second, formula: 10, got: 3},  // up within the cooldown: held
		{at: 60 * time.Second, formula: 10, got: 5},  // up by at most 2
		{at: 100 * time.Second, formula: 10, got: 5}, // 40s later: still cooling down
		{at: 120 * time.Second, formula: 10, got: 7},
		{at: 140 * time.Second, formula: 2, got: 7}, // down cooldown is 30s
		{at: 150 * time.Second, formula: 2, got: 6}, // down by at most 1
		{at: 170 * time.Second, formula: 2, got: 6},
		{at: 180 * time.Second, formula: 2, got: 5},
		{at: 180 * time.Second, formula: -1, got: -1},             // unknown: no recommendation
		{at: 400 * time.Second, formula: 9, got: 5, holdUp: true}, // at a shared rate limit: no rise
		{at: 401 * time.Second, formula: 9, got: 7},
		{at: 402 * time.Second, formula: 7, got: 7},
	} {
		if got := g.next(step.formula, t0.Add(step.at), sc, step.holdUp); got != step.got {
			t.Fatalf("step %d at %s: formula %d -> %d, want %d", i, step.at, step.formula, got, step.got)
		}
	}
}
