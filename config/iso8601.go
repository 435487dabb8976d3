package config

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"time"
)

// parseDuration reads a duration as Go writes it (500ms, 1m30s) or as
// ISO 8601 writes it (PT0.5S, PT1M30S, P1D), the form Knative's delivery
// fields take (backoffDelay, timeout, retryAfterMax), so a value pasted
// from a Trigger or Subscription works unchanged.
func parseDuration(s string) (time.Duration, error) {
	v := strings.TrimSpace(s)
	if len(v) > 0 && (v[0] == 'P' || v[0] == 'p' || (len(v) > 1 && (v[0] == '-' || v[0] == '+') && (v[1] == 'P' || v[1] == 'p'))) {
		return parseISO8601(v)
	}
	return time.ParseDuration(s)
}

// errISO8601 says what parseISO8601 takes.
var errISO8601 = errors.New("an ISO 8601 duration takes weeks (W), days (D), hours (H), minutes (M) and seconds (S), such as PT0.5S or P1DT2H; years and months have no fixed length")

// parseISO8601 reads an ISO 8601 duration, P[nW][nD][T[nH][nM][nS]], with
// a fraction on its last number, as github.com/rickb777/date/period
// (which Knative parses them with) reads the ones of fixed length: a day
// is 24 hours.
func parseISO8601(s string) (time.Duration, error) {
	neg := false
	switch s[0] {
	case '-':
		neg, s = true, s[1:]
	case '+':
		s = s[1:]
	}
	s = strings.ToUpper(s)
	if len(s) < 2 || s[0] != 'P' {
		return 0, errISO8601
	}
	s = s[1:]
	var total float64
	inTime, any, last := false, false, false
	rank := 0 // of the last unit read: each must come after the one before
	for s != "" {
		if s[0] == 'T' {
			if inTime {
				return 0, errISO8601
			}
			inTime, s = true, s[1:]
			if s == "" {
				return 0, errISO8601
			}
			continue
		}
		if last {
			// Only the last number may have a fraction.
			return 0, errISO8601
		}
		i := strings.IndexAny(s, "WDHMSY")
		if i <= 0 {
			return 0, errISO8601
		}
		num := strings.Replace(s[:i], ",", ".", 1)
		n, err := strconv.ParseFloat(num, 64)
		if err != nil || n < 0 || strings.ContainsAny(num, "eE+-") {
			return 0, errISO8601
		}
		last = strings.Contains(num, ".")
		var unit time.Duration
		var r int
		switch c := s[i]; {
		case !inTime && c == 'W':
			unit, r = 7*24*time.Hour, 1
		case !inTime && c == 'D':
			unit, r = 24*time.Hour, 2
		case inTime && c == 'H':
			unit, r = time.Hour, 3
		case inTime && c == 'M':
			unit, r = time.Minute, 4
		case inTime && c == 'S':
			unit, r = time.Second, 5
		default:
			return 0, errISO8601
		}
		if r <= rank {
			return 0, errISO8601
		}
		rank = r
		total += n * float64(unit)
		any = true
		s = s[i+1:]
	}
	if !any || total > math.MaxInt64 {
		return 0, errISO8601
	}
	d := time.Duration(math.Round(total))
	if neg {
		d = -d
	}
	return d, nil
}
