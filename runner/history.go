package runner

import (
	"context"
	"sync"
	"time"
)

// The status page's chart: one sample every historyInterval for the last
// 15 minutes, kept in memory (450 samples of a few numbers each).
const (
	historyInterval = 2 * time.Second
	historySamples  = int(15 * time.Minute / historyInterval)
)

// HistorySample is the engine at one moment of the last 15 minutes.
type HistorySample struct {
	// Time is when the sample was taken, in Unix milliseconds.
	Time int64 `json:"t"`
	// ReadRate and AckRate are messages per second since the sample before.
	ReadRate float64 `json:"read_rate"`
	AckRate  float64 `json:"ack_rate"`
	// Pending is the source's backlog, -1 when unknown.
	Pending int64 `json:"pending"`
	// DesiredReplicas is the recommendation, -1 when there is none.
	DesiredReplicas int `json:"desired_replicas"`
}

// History is what /status/history serves.
type History struct {
	IntervalSeconds float64         `json:"interval_seconds"`
	Samples         []HistorySample `json:"samples"`
}

// history is a ring of samples, oldest overwritten first.
type history struct {
	mu        sync.Mutex
	ring      [historySamples]HistorySample
	next, n   int
	lastAt    time.Time
	lastRead  int64
	lastAcked int64
}

func (h *history) add(now time.Time, read, acked, pending int64, desired int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := HistorySample{Time: now.UnixMilli(), Pending: pending, DesiredReplicas: desired}
	if !h.lastAt.IsZero() {
		if d := now.Sub(h.lastAt).Seconds(); d > 0 {
			s.ReadRate = float64(read-h.lastRead) / d
			s.AckRate = float64(acked-h.lastAcked) / d
		}
	}
	h.lastAt, h.lastRead, h.lastAcked = now, read, acked
	h.ring[h.next] = s
	h.next = (h.next + 1) % historySamples
	if h.n < historySamples {
		h.n++
	}
}

func (h *history) samples() []HistorySample {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]HistorySample, 0, h.n)
	start := (h.next - h.n + historySamples) % historySamples
	for i := range h.n {
		out = append(out, h.ring[(start+i)%historySamples])
	}
	return out
}

// History returns the samples of the last 15 minutes, oldest first.
func (e *Engine) History() History {
	return History{IntervalSeconds: historyInterval.Seconds(), Samples: e.hist.samples()}
}

// sampleHistory adds a sample now and every historyInterval until ctx ends.
func (e *Engine) sampleHistory(ctx context.Context) {
	t := time.NewTicker(historyInterval)
	defer t.Stop()
	for {
		sig := e.ScaleSignals()
		e.hist.add(time.Now(), e.totals.read.load(), e.totals.acked.load(), sig.Pending, sig.DesiredReplicas)
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}
