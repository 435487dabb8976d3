package runner

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// gaugeValue returns the value of w's gauge for period and whether it is set.
func gaugeValue(t *testing.T, w *pendingWindow, period string) (float64, bool) {
	t.Helper()
	ch := make(chan prometheus.Metric, 8)
	w.gauge.Collect(ch)
	close(ch)
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		for _, l := range pb.GetLabel() {
			if l.GetName() == "period" && l.GetValue() == period {
				return pb.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

// TestPendingAveragedAsNumaflowsDaemon: monovtx_pending{period} is the
// integer mean of the samples within each window, as Numaflow's MonoVertex
// daemon computes it: nothing from one sample or once the second-to-last
// sample is older than the window, unknown counts (-1) averaged in as the
// daemon reads them, a mean of -1 not published, and samples older than
// 15 minutes forgotten.
func TestPendingAveragedAsNumaflowsDaemon(t *testing.T) {
	w := newPendingWindow(120*time.Second, prometheus.Labels{LabelName: "mv"})
	t0 := time.Unix(1_700_000_000, 0)
	w.add(t0, 100)
	if _, ok := gaugeValue(t, w, "1m"); ok {
		t.Fatal("published from a single sample; Numaflow's daemon waits for two")
	}
	// One sample a minute for 20 minutes: 100, 110, ..., 300, and an
	// unknown count a second after the tenth.
	for i := 1; i <= 20; i++ {
		w.add(t0.Add(time.Duration(i)*time.Minute), int64(100+10*i))
		if i == 10 {
			w.add(t0.Add(time.Duration(i)*time.Minute+time.Second), -1)
		}
	}
	// At t0+20m: 1m holds 290 and 300 (t0+19m is exactly 60 s back), 5m
	// 250..300, default (120 s) 280..300, 15m 150..300 and the -1:
	// (3600 - 1) / 17 = 211.
	for period, want := range map[string]float64{"1m": 295, "5m": 275, "15m": 211, "default": 290} {
		if got, ok := gaugeValue(t, w, period); !ok || got != want {
			t.Errorf("period %s: %v (set %v), want %v", period, got, ok, want)
		}
		// The daemon API and /status read the same values.
		if got, ok := w.averages()[period]; !ok || float64(got) != want {
			t.Errorf("averages()[%s] = %v (set %v), want %v as on the gauge", period, got, ok, want)
		}
	}
	if len(w.samples) != 17 {
		t.Errorf("%d samples kept, want the 17 of the last 15 minutes", len(w.samples))
	}
	// Integer mean, as the daemon's int64 division.
	w2 := newPendingWindow(60*time.Second, nil)
	w2.add(t0, 1)
	w2.add(t0.Add(time.Second), 2)
	if got, _ := gaugeValue(t, w2, "1m"); got != 1 {
		t.Errorf("mean of 1 and 2: %v, want 1 (integer division)", got)
	}
	// A source without a pending count: every sample -1, nothing published.
	w3 := newPendingWindow(60*time.Second, nil)
	for i := 0; i < 5; i++ {
		w3.add(t0.Add(time.Duration(i)*time.Second), -1)
	}
	if v, ok := gaugeValue(t, w3, "1m"); ok {
		t.Errorf("published %v for a source without a pending count", v)
	}
	if a := w3.averages(); len(a) != 0 {
		t.Errorf("averages() = %v for a source without a pending count, want none", a)
	}
	// The second-to-last sample older than the window: not available,
	// even with the last one inside it.
	w4 := newPendingWindow(60*time.Second, nil)
	w4.add(t0, 10)
	w4.add(t0.Add(100*time.Second), 50)
	if v, ok := gaugeValue(t, w4, "1m"); ok {
		t.Errorf("published %v with the second-to-last sample 100 s old; the daemon waits", v)
	}
}
