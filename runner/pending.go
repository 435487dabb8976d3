package runner

import (
	"context"
	"maps"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// pendingPeriods are the windows Numaflow's MonoVertex daemon averages the
// pending count over for monovtx_pending{period}: its fixed 1m, 5m and 15m,
// and "default", the lookback.
var pendingPeriods = []struct {
	label string
	secs  int64
}{{"1m", 60}, {"5m", 300}, {"15m", 900}}

// pendingSample is one pending count and when it was taken.
type pendingSample struct {
	at int64 // Unix seconds, as the daemon stamps its samples
	n  int64
}

// pendingWindow keeps the pending counts of the last 15 minutes (or the
// lookback, if longer) and publishes their averages as Numaflow's daemon
// does (rater.CalculatePending with findStartIndex): nothing while fewer
// than two samples are kept or the second-to-last is older than the
// window; else the integer mean of the samples from the first one within
// the window (at most the second-to-last) to the last, unknown counts (-1)
// included as the daemon reads them from monovtx_pending_raw, and nothing
// when that mean is -1, the daemon's "not available".
type pendingWindow struct {
	samples  []pendingSample
	lookback int64
	gauge    *prometheus.GaugeVec

	// mu guards means: the values last set on the gauge, by period, for
	// the daemon API and /status to read without scraping the registry.
	mu    sync.Mutex
	means map[string]int64
}

func newPendingWindow(lookback time.Duration, labels prometheus.Labels) *pendingWindow {
	return &pendingWindow{
		lookback: max(int64(lookback/time.Second), 1),
		means:    map[string]int64{},
		gauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name:        "monovtx_pending",
			Help:        "Messages pending at the source, averaged over the period (1m, 5m, 15m, default = MV_LOOKBACK_SECONDS), as Numaflow's MonoVertex daemon exports it.",
			ConstLabels: labels,
		}, []string{"period"}),
	}
}

// add records a pending count taken at now and updates the gauges.
func (w *pendingWindow) add(now time.Time, n int64) {
	w.samples = append(w.samples, pendingSample{now.Unix(), n})
	keep := now.Unix() - max(900, w.lookback)
	i := 0
	for i < len(w.samples) && w.samples[i].at < keep {
		i++
	}
	w.samples = append(w.samples[:0], w.samples[i:]...)
	for _, p := range pendingPeriods {
		w.publish(p.label, p.secs, now)
	}
	w.publish("default", w.lookback, now)
}

func (w *pendingWindow) publish(label string, secs int64, now time.Time) {
	n := len(w.samples)
	from := now.Unix() - secs
	if n < 2 || w.samples[n-2].at < from {
		return
	}
	start := n - 2
	for i := 0; i < n-2; i++ {
		if w.samples[i].at >= from {
			start = i
			break
		}
	}
	sum := int64(0)
	for _, s := range w.samples[start:] {
		sum += s.n
	}
	if mean := sum / int64(n-start); mean != -1 {
		w.gauge.WithLabelValues(label).Set(float64(mean))
		w.mu.Lock()
		w.means[label] = mean
		w.mu.Unlock()
	}
}

// averages returns what monovtx_pending{period} holds now, by period; a
// period never published is absent, as it is from /metrics.
func (w *pendingWindow) averages() map[string]int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.means)
}

// lookbackGauge is Numaflow's monovtx_lookback_window_seconds: the window
// the rate and the "default" pending are taken over.
func lookbackGauge(lookback time.Duration, labels prometheus.Labels) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "monovtx_lookback_window_seconds",
		Help:        "The lookback window of the processing rate and the default pending, in seconds (MV_LOOKBACK_SECONDS).",
		ConstLabels: labels,
	})
	g.Set(float64(int64(lookback / time.Second)))
	return g
}

func (e *Engine) pollPending(ctx context.Context) {
	pr, ok := e.src.(PendingReader)
	if !ok {
		return
	}
	gp, _ := e.src.(GroupProgressReader)
	t := time.NewTicker(e.opts.PendingInterval)
	defer t.Stop()
	for {
		if gp != nil {
			if c, err := gp.GroupProcessed(ctx); err == nil {
				e.load.groupProgress.add(time.Now(), c, e.opts.Lookback)
			}
		}
		n, err := pr.Pending(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			e.log.Debugw("pending unknown", zap.Error(err))
			n = -1
		}
		if n < 0 {
			n = -1
		}
		e.load.pending.Store(n)
		e.m.PendingRaw.Set(float64(n))
		e.load.pendingAvg.add(time.Now(), n)
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}
