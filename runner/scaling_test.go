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
