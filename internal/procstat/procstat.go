// Package procstat reads what the tests, the soak and the fault suite
// measure of a running process: its resident memory and open files from
// /proc, and its metrics from a Prometheus endpoint, parsed with
// prometheus/common's own text parser.
package procstat

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// RSS is the resident set size of process pid in bytes (VmRSS).
func RSS(pid int) (int64, error) { return statusBytes(pid, "VmRSS:") }

// PeakRSS is the largest resident set size process pid has had, in bytes
// (VmHWM).
func PeakRSS(pid int) (int64, error) { return statusBytes(pid, "VmHWM:") }

// statusBytes reads a size in kB from /proc/<pid>/status, such as VmRSS.
func statusBytes(pid int, field string) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == field {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", strings.TrimSuffix(field, ":"), pid)
}

// OpenFiles is the number of file descriptors process pid holds, -1 if
// /proc cannot tell.
func OpenFiles(pid int) int {
	entries, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		return -1
	}
	return len(entries)
}

var client = &http.Client{Timeout: 5 * time.Second}

// Scrape reads the metric families a Prometheus text endpoint serves.
func Scrape(url string) (map[string]*dto.MetricFamily, error) {
	resp, err := client.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// Value is the value of the first sample of family name whose labels
// include every pair of labels, or false if there is none. Counters,
// gauges and untyped samples have a value; histograms give their count.
func Value(families map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	f, ok := families[name]
	if !ok {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		if !hasLabels(m, labels) {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
			n++
		}
	}
	return n == len(want)
}

// Metric scrapes url and returns the value of name with labels, -1 if it
// cannot be read or is not there.
func Metric(url, name string, labels map[string]string) float64 {
	fams, err := Scrape(url)
	if err != nil {
		return -1
	}
	v, ok := Value(fams, name, labels)
	if !ok {
		return -1
	}
	return v
}
