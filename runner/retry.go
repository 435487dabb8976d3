package runner

import (
	"math"
	"math/rand/v2"
	"time"
)

// RetryPolicy is the backoff between attempts of a failed sink or
// transformer call (MV_RETRY_INTERVAL, _STEPS, _FACTOR, _CAP, _JITTER).
type RetryPolicy struct {
	// Interval is the wait before the first retry.
	Interval time.Duration
	// Steps is how many retries a message gets before MV_ON_FAILURE decides;
	// zero means unlimited.
	Steps int
	// StageSteps is the same for a failing transformer or map UDF: zero
	// takes Steps, a negative value means unlimited (Numaflow retries a
	// stage without its own retry strategy for ever, whatever the sink's).
	StageSteps int
	// Factor multiplies the wait after each retry (1 keeps it constant).
	Factor float64
	// Cap bounds the wait; zero means no bound.
	Cap time.Duration
	// Jitter adds a random fraction (0..Jitter) of the wait, so replicas
	// that failed together do not retry together.
	Jitter float64
}

// Exhausted reports whether a message that has been retried retries times
// has used up its steps.
func (p RetryPolicy) Exhausted(retries int) bool {
	return p.Steps > 0 && retries >= p.Steps
}

// StageExhausted is Exhausted for a transformer or map UDF.
func (p RetryPolicy) StageExhausted(retries int) bool {
	switch {
	case p.StageSteps < 0:
		return false
	case p.StageSteps == 0:
		return p.Exhausted(retries)
	}
	return retries >= p.StageSteps
}

// Delay is the wait before retry number retry (counting from 0).
func (p RetryPolicy) Delay(retry int) time.Duration {
	d := float64(p.Interval)
	if p.Factor > 1 {
		d *= math.Pow(p.Factor, float64(retry))
	}
	if p.Cap > 0 && d > float64(p.Cap) {
		d = float64(p.Cap)
	}
	if p.Jitter > 0 {
		d += d * p.Jitter * rand.Float64()
	}
	if d > float64(math.MaxInt64) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(d)
}
