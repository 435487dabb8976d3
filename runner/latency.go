package runner

import (
	"math"
	"strings"

	dto "github.com/prometheus/client_model/go"
)

// stageOrder is a message's way through the pipeline, which is the order
// the status page lists the stages' latencies in.
var stageOrder = []string{
	"monovtx_read_time", "monovtx_filter_time", "monovtx_transformer_time", "monovtx_udf_time", "monovtx_sink_time",
	"monovtx_fallback_sink_time", "monovtx_onsuccess_sink_time", "monovtx_ack_time", "monovtx_nack_time",
	"monovtx_processing_time",
}

func sortHistograms(hs []namedHistogram) []namedHistogram {
	var out []namedHistogram
	for _, name := range stageOrder {
		for _, h := range hs {
			if h.name == name {
				out = append(out, h)
			}
		}
	}
	return out
}

// StageLatency is one timing histogram's quantiles since start, computed
// from its buckets the way PromQL's histogram_quantile does.
type StageLatency struct {
	// Stage is the histogram's name without monovtx_ and _time (read, sink, ...).
	Stage  string `json:"stage"`
	Metric string `json:"metric"`
	// Count is the number of observations (calls, or batches for processing).
	Count uint64 `json:"count"`
	// P50 and P99 are in microseconds, as the histograms are; -1 before
	// the first observation.
	P50 float64 `json:"p50_us"`
	P99 float64 `json:"p99_us"`
}

// Latencies returns the quantiles of every timing histogram.
func (e *Engine) Latencies() []StageLatency {
	out := make([]StageLatency, 0, len(e.m.histograms))
	for _, nh := range e.m.histograms {
		var m dto.Metric
		if err := nh.h.Write(&m); err != nil || m.Histogram == nil {
			continue
		}
		stage := strings.TrimSuffix(strings.TrimPrefix(nh.name, "monovtx_"), "_time")
		out = append(out, StageLatency{
			Stage: stage, Metric: nh.name, Count: m.Histogram.GetSampleCount(),
			P50: histogramQuantile(0.5, m.Histogram), P99: histogramQuantile(0.99, m.Histogram),
		})
	}
	return out
}

// histogramQuantile estimates quantile q from cumulative buckets by linear
// interpolation inside the bucket the rank falls in, as PromQL's
// histogram_quantile does; a rank beyond the last finite bound returns that
// bound. It returns -1 for an empty histogram.
func histogramQuantile(q float64, h *dto.Histogram) float64 {
	total := h.GetSampleCount()
	if total == 0 {
		return -1
	}
	rank := q * float64(total)
	lower, below := 0.0, uint64(0)
	for _, b := range h.GetBucket() {
		upper, cum := b.GetUpperBound(), b.GetCumulativeCount()
		if math.IsInf(upper, 1) {
			break
		}
		if float64(cum) >= rank {
			inBucket := cum - below
			if inBucket == 0 {
				return upper
			}
			return lower + (upper-lower)*(rank-float64(below))/float64(inBucket)
		}
		lower, below = upper, cum
	}
	return lower
}
