package main

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// sample is one line of the Prometheus text format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// parseProm reads the Prometheus text exposition format (what the runner's
// /metrics serves): comments and blank lines are skipped, timestamps after
// the value are ignored.
func parseProm(text string) ([]sample, error) {
	var out []sample
	for n, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s, err := parsePromLine(line)
		if err != nil {
			return nil, fmt.Errorf("metrics line %d %q: %w", n+1, line, err)
		}
		out = append(out, s)
	}
	return out, nil
}

func parsePromLine(line string) (sample, error) {
	s := sample{labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i <= 0 {
		return s, fmt.Errorf("no metric name")
	}
	s.name = line[:i]
	rest := line[i:]
	if rest[0] == '{' {
		end, err := parseLabels(rest, s.labels)
		if err != nil {
			return s, err
		}
		rest = rest[end:]
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return s, fmt.Errorf("no value")
	}
	v, err := parsePromFloat(fields[0])
	if err != nil {
		return s, err
	}
	s.value = v
	return s, nil
}

// parseLabels reads {a="b",c="d"} at the start of s into into and returns
// the index after the closing brace.
func parseLabels(s string, into map[string]string) (int, error) {
	i := 1
	for {
		for i < len(s) && (s[i] == ' ' || s[i] == ',') {
			i++
		}
		if i >= len(s) {
			return 0, fmt.Errorf("unterminated labels")
		}
		if s[i] == '}' {
			return i + 1, nil
		}
		eq := strings.IndexByte(s[i:], '=')
		if eq < 0 {
			return 0, fmt.Errorf("label without '='")
		}
		name := strings.TrimSpace(s[i : i+eq])
		i += eq + 1
		if i >= len(s) || s[i] != '"' {
			return 0, fmt.Errorf("label %s: value not quoted", name)
		}
		i++
		var b strings.Builder
		for ; ; i++ {
			if i >= len(s) {
				return 0, fmt.Errorf("label %s: unterminated value", name)
			}
			c := s[i]
			if c == '\\' && i+1 < len(s) {
				i++
				switch s[i] {
				case 'n':
					b.WriteByte('\n')
				default:
					b.WriteByte(s[i])
				}
				continue
			}
			if c == '"' {
				i++
				break
			}
			b.WriteByte(c)
		}
		into[name] = b.String()
	}
}

func parsePromFloat(s string) (float64, error) {
	switch s {
	case "+Inf", "Inf":
		return math.Inf(1), nil
	case "-Inf":
		return math.Inf(-1), nil
	}
	return strconv.ParseFloat(s, 64)
}

// bucket is one cumulative histogram bucket.
type bucket struct {
	le    float64
	count float64
}

// histogram returns the cumulative buckets of the histogram name, summed
// over every label set, sorted by upper bound.
func histogram(samples []sample, name string) []bucket {
	byLE := map[float64]float64{}
	for _, s := range samples {
		if s.name != name+"_bucket" {
			continue
		}
		le, err := parsePromFloat(s.labels["le"])
		if err != nil {
			continue
		}
		byLE[le] += s.value
	}
	out := make([]bucket, 0, len(byLE))
	for le, c := range byLE {
		out = append(out, bucket{le, c})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].le < out[j].le })
	return out
}

// counter returns the sum of the samples named name.
func counter(samples []sample, name string) float64 {
	var v float64
	for _, s := range samples {
		if s.name == name {
			v += s.value
		}
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
