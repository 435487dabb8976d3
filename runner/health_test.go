package runner

import (
	"strings"
	"testing"
)

// TestHealthAsNumaflowsDaemon: the data-flow health GetMonoVertexStatus
// reports: unknown (D4) without a pending count, critical (D3) when the
// recommendation is at MV_MAX_SCALE and the backlog asks for more,
// healthy (D1) otherwise, including an idle runner and one with no bound.
func TestHealthAsNumaflowsDaemon(t *testing.T) {
	for _, tc := range []struct {
		name string
		max  int
		s    ScaleSignals
		want Health
		says string
	}{
		{"no pending count", 3, ScaleSignals{Pending: -1, Rate: 100, DesiredReplicas: -1}, Health{Status: HealthUnknown, Code: "D4"}, "no pending information"},
		{"idle", 3, ScaleSignals{Pending: 0, Rate: 0, DesiredReplicas: 1}, Health{Status: HealthHealthy, Code: "D1"}, "healthy"},
		{"keeping up", 3, ScaleSignals{Pending: 100, Rate: 100, DesiredReplicas: 1}, Health{Status: HealthHealthy, Code: "D1"}, "healthy"},
		// 10,000 pending at 100/s with a 20 s target: 5 replicas wanted.
		{"at the bound, wanting more", 3, ScaleSignals{Pending: 10_000, Rate: 100, DesiredReplicas: 3}, Health{Status: HealthCritical, Code: "D3"}, "want 5 replicas"},
		{"below the bound, still rising", 3, ScaleSignals{Pending: 10_000, Rate: 100, DesiredReplicas: 2}, Health{Status: HealthHealthy, Code: "D1"}, "healthy"},
		{"no bound", 0, ScaleSignals{Pending: 10_000, Rate: 100, DesiredReplicas: 5}, Health{Status: HealthHealthy, Code: "D1"}, "healthy"},
		{"pending but no rate yet", 1, ScaleSignals{Pending: 10_000, Rate: 0, DesiredReplicas: 1}, Health{Status: HealthHealthy, Code: "D1"}, "healthy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &Engine{opts: Options{Name: "mv", Scaling: Scaling{TargetSeconds: 20, Min: 1, Max: tc.max}}}
			got := e.health(tc.s)
			if got.Status != tc.want.Status || got.Code != tc.want.Code {
				t.Fatalf("health = %+v, want status %s code %s", got, tc.want.Status, tc.want.Code)
			}
			if !strings.Contains(got.Message, tc.says) {
				t.Errorf("message %q does not say %q", got.Message, tc.says)
			}
		})
	}
}
