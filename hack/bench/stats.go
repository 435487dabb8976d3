package main

import (
	"math"
	"sort"
)

// percentile returns the q-quantile (0..1) of values by nearest rank; it
// sorts values in place and returns NaN for none.
func percentile(values []float64, q float64) float64 {
	if len(values) == 0 {
		return math.NaN()
	}
	sort.Float64s(values)
	return percentileSorted(values, q)
}

// percentileSorted is percentile for values already in ascending order.
func percentileSorted(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	rank := int(math.Ceil(q*float64(len(sorted)))) - 1
	rank = max(0, min(rank, len(sorted)-1))
	return sorted[rank]
}
