package procstat

import (
	"net/http/httptest"
	"os"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func TestMetricReadsLabelledSamplesAndMisses(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mv_test_total"}, []string{"role"})
	c.WithLabelValues("sink").Add(3)
	c.WithLabelValues("source").Add(7)
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "mv_test_gauge"})
	g.Set(-2.5)
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "mv_test_seconds"})
	h.Observe(1)
	h.Observe(2)
	reg.MustRegister(c, g, h)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"mv_test_total", map[string]string{"role": "source"}, 7},
		{"mv_test_total", map[string]string{"role": "sink"}, 3},
		{"mv_test_total", map[string]string{"role": "udf"}, -1},
		{"mv_test_gauge", nil, -2.5},
		{"mv_test_seconds", nil, 2},
		{"mv_missing", nil, -1},
	} {
		if got := Metric(srv.URL, tc.name, tc.labels); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	srv.Close()
	if got := Metric(srv.URL, "mv_test_gauge", nil); got != -1 {
		t.Errorf("closed server: %v, want -1", got)
	}
}

func TestRSSAndOpenFilesOfThisProcess(t *testing.T) {
	rss, err := RSS(os.Getpid())
	if err != nil || rss < 1<<20 {
		t.Fatalf("RSS = %d, %v; want at least 1 MiB for a Go test binary", rss, err)
	}
	f, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	before := OpenFiles(os.Getpid())
	f.Close()
	if after := OpenFiles(os.Getpid()); before < 1 || after != before-1 {
		t.Fatalf("open files %d then %d after closing one", before, after)
	}
	if _, err := RSS(-1); err == nil {
		t.Fatal("RSS of no process must fail")
	}
	if peak, err := PeakRSS(os.Getpid()); err != nil || peak < rss {
		t.Fatalf("PeakRSS = %d, %v; want at least the RSS %d seen before", peak, err, rss)
	}
}
