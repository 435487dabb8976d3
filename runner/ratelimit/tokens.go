// Package ratelimit is the runner's read rate limiter, Numaflow's
// limits.rateLimit as numaflow-core implements it (rust/numaflow-throttling):
// a token pool refilled once per wall-clock second, ramped from min to max
// over rampUpDuration by one of four modes, and, with a Redis store, shared
// by every replica that registered and keeps its heartbeat.
//
// For a MonoVertex a token is one read call: numaflow-core divides max and
// min by the read batch size (rounding up) and takes one token per read, so
// the messages read per second are the read calls per second times
// readBatchSize. This package does the same.
package ratelimit

import (
	"math"
	"sync"
	"time"
)

// Mode is how the pool grows from min to max (Numaflow's rateLimit.modes).
type Mode string

// The modes; Relaxed is Numaflow's default when no mode is given.
const (
	// Scheduled grows the pool by the slope every second, used or not.
	Scheduled Mode = "scheduled"
	// Relaxed grows the pool by the slope at every second someone asks.
	Relaxed Mode = "relaxed"
	// OnlyIfUsed grows the pool only when at least ThresholdPercent of the
	// last second's pool was taken.
	OnlyIfUsed Mode = "onlyIfUsed"
	// GoBackN is OnlyIfUsed that also shrinks the pool: by the slope after
	// a second used below the threshold, and by RampDownPercent of the slope
	// per second missed after a gap longer than Cooldown.
	GoBackN Mode = "goBackN"
)

// Bounds are the token math's parameters, in tokens (read calls) per second.
type Bounds struct {
	// Max and Min are the pool's size at the end and the start of the
	// ramp-up; with a shared store they are the totals of all replicas.
	Max, Min int
	// RampUp is how long the pool takes to grow from Min to Max.
	RampUp time.Duration
	Mode   Mode
	// ThresholdPercent is OnlyIfUsed's and GoBackN's usage threshold.
	ThresholdPercent int
	// Cooldown and RampDownPercent are GoBackN's gap penalty.
	Cooldown        time.Duration
	RampDownPercent int
}

// slope is how many tokens the pool grows by per second.
func (b Bounds) slope() float64 {
	secs := b.RampUp.Seconds()
	if secs <= 0 {
		secs = 1
	}
	return float64(b.Max-b.Min) / secs
}

// pool is the token pool of one replica: the whole pool's size (every
// replica's share together) and what is left of it in the current second.
// Each replica keeps the whole pool and takes its share by dividing by the
// number of replicas, as numaflow-throttling does, so the math needs no
// coordination beyond agreeing on that number.
type pool struct {
	mu     sync.Mutex
	b      Bounds
	slopeV float64
	// tokens is what is left of the current second's pool, counted for
	// every replica (a replica taking k tokens removes k x replicas).
	tokens int
	// maxEverFilled is the pool's size, fractional because the slope may be.
	maxEverFilled float64
	// lastEpoch is the unix second of the last refill.
	lastEpoch int64
}

// newPool starts a pool at burst tokens (Min, or the resumed size) in the
// second start. Numaflow starts its last epoch at 0, which makes the first
// refill of the scheduled mode jump to Max at once; starting at the
// creation second keeps the ramp-up the spec describes.
func newPool(b Bounds, burst int, start int64) *pool {
	return &pool{b: b, slopeV: b.slope(), tokens: burst, maxEverFilled: float64(burst), lastEpoch: start}
}

// take gives this replica up to n tokens of the second epoch, with
// replicas sharing the pool; 0 means the share of this second is spent.
// filled is the whole pool when this call refilled it for a new second,
// and -1 otherwise.
func (p *pool) take(n int, epoch int64, replicas int) (got, filled int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if replicas < 1 {
		replicas = 1
	}
	filled = -1
	if p.lastEpoch < epoch {
		p.tokens = p.refill(epoch)
		p.lastEpoch = epoch
		filled = p.tokens
	}
	per := p.tokens / replicas
	if per == 0 {
		return 0, filled
	}
	got = min(n, per)
	p.tokens -= got * replicas
	return got, filled
}

// size is the pool's current size, which a deregistering replica leaves
// behind for a resumed ramp-up.
func (p *pool) size() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.maxEverFilled
}

// refill computes the pool of the second epoch; p.mu is held. It is
// numaflow-throttling's compute_refill.
func (p *pool) refill(epoch int64) int {
	usedPercent := 100
	if p.maxEverFilled > 0 {
		used := int(math.Round((1 - float64(p.tokens)/p.maxEverFilled) * 100))
		// Tokens indivisible between the replicas cannot be handed out; a
		// slope's worth of them counts as used, as Numaflow's
		// floor_normalization does.
		norm := int(math.Round(p.slopeV / p.maxEverFilled * 100))
		usedPercent = min(max(used+norm, 0), 100)
	}
	gap := float64(epoch - p.lastEpoch)
	switch p.b.Mode {
	case Scheduled:
		return p.grow(p.slopeV * gap)
	case OnlyIfUsed:
		if usedPercent >= min(max(p.b.ThresholdPercent, 0), 100) {
			return p.grow(p.slopeV)
		}
		return int(p.maxEverFilled)
	case GoBackN:
		switch {
		case gap > p.b.Cooldown.Seconds():
			// Penalty for a gap: one slope step per missed second, scaled
			// by the ramp-down strength; (gap-1) spares back-to-back seconds.
			reduced := p.maxEverFilled - float64(p.b.RampDownPercent)/100*p.slopeV*(gap-1)
			p.maxEverFilled = min(max(reduced, float64(p.b.Min)), float64(p.b.Max))
			return int(p.maxEverFilled)
		case usedPercent >= p.b.ThresholdPercent:
			return p.grow(p.slopeV)
		default:
			// Penalty for underuse.
			p.maxEverFilled = max(p.maxEverFilled-p.slopeV, float64(p.b.Min))
			return int(p.maxEverFilled)
		}
	default: // Relaxed
		return p.grow(p.slopeV)
	}
}

// grow adds by to the pool's size, up to Max, and returns the new pool.
func (p *pool) grow(by float64) int {
	if p.maxEverFilled >= float64(p.b.Max) {
		return p.b.Max
	}
	p.maxEverFilled = min(p.maxEverFilled+by, float64(p.b.Max))
	return int(p.maxEverFilled)
}
