package main

import (
	"math"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// metrics are the metric families of one scrape of a Prometheus text
// endpoint (the runner's /metrics), by name.
type metrics map[string]*dto.MetricFamily

// parseProm reads the Prometheus text exposition format with
// prometheus/common's own parser, the one Prometheus scrapes with.
func parseProm(text string) (metrics, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return nil, err
	}
	return fams, nil
}

// bucket is one cumulative histogram bucket.
type bucket struct {
	le    float64
	count float64
}

// histogram returns the cumulative buckets of the histogram name, summed
// over every label set, sorted by upper bound, with the +Inf bucket (the
// sample count, where the text had no +Inf line) last.
func histogram(m metrics, name string) []bucket {
	f := m[name]
	if f == nil || f.GetType() != dto.MetricType_HISTOGRAM {
		return nil
	}
	byLE := map[float64]float64{}
	for _, mt := range f.GetMetric() {
		h := mt.GetHistogram()
		inf := false
		for _, b := range h.GetBucket() {
			byLE[b.GetUpperBound()] += float64(b.GetCumulativeCount())
			inf = inf || math.IsInf(b.GetUpperBound(), 1)
		}
		if !inf {
			byLE[math.Inf(1)] += float64(h.GetSampleCount())
		}
	}
	out := make([]bucket, 0, len(byLE))
	for le, c := range byLE {
		out = append(out, bucket{le, c})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].le < out[j].le })
	return out
}

// counter returns the sum of the counter, gauge or untyped samples named
// name over every label set.
func counter(m metrics, name string) float64 {
	var v float64
	for _, mt := range m[name].GetMetric() {
		v += mt.GetCounter().GetValue() + mt.GetGauge().GetValue() + mt.GetUntyped().GetValue()
	}
	return v
}

// summaryCount returns the sample count of the summary name (how many
// observations it has had), 0 when there is none.
func summaryCount(m metrics, name string) float64 {
	var v float64
	for _, mt := range m[name].GetMetric() {
		v += float64(mt.GetSummary().GetSampleCount())
	}
	return v
}

// bucketDelta is after minus before, bucket by bucket: the observations
// made between two scrapes.
func bucketDelta(before, after []bucket) []bucket {
	prev := map[float64]float64{}
	for _, b := range before {
		prev[b.le] = b.count
	}
	out := make([]bucket, len(after))
	for i, b := range after {
		out[i] = bucket{b.le, b.count - prev[b.le]}
	}
	return out
}

// bucketQuantile estimates quantile q (0..1) from cumulative buckets the
// way Prometheus' histogram_quantile does: linear inside the bucket that
// holds the rank, 0 as the lower bound of the first bucket, and the last
// finite bound when the rank falls in +Inf. It returns NaN without
// observations.
func bucketQuantile(q float64, buckets []bucket) float64 {
	if len(buckets) == 0 {
		return math.NaN()
	}
	total := buckets[len(buckets)-1].count
	if total <= 0 {
		return math.NaN()
	}
	rank := q * total
	lower, prevCount := 0.0, 0.0
	for i, b := range buckets {
		if b.count >= rank {
			if math.IsInf(b.le, 1) {
				if i == 0 {
					return math.NaN()
				}
				return buckets[i-1].le
			}
			inBucket := b.count - prevCount
			if inBucket <= 0 {
				return b.le
			}
			return lower + (b.le-lower)*(rank-prevCount)/inBucket
		}
		lower, prevCount = b.le, b.count
	}
	return buckets[len(buckets)-1].le
}
