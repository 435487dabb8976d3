package runner

import (
	"sync"
	"time"
)

// rateWindowSeconds is the longest window a rate can be asked for (15m).
const rateWindowSeconds = 900

// rateCounter counts events per second over the last 15 minutes, so the
// processing rate over any window up to that can be read without keeping
// every event.
type rateCounter struct {
	mu      sync.Mutex
	started time.Time
	secs    [rateWindowSeconds]int64 // unix second each slot holds
	counts  [rateWindowSeconds]int64
}

func newRateCounter(now time.Time) *rateCounter {
	return &rateCounter{started: now}
}

func (r *rateCounter) add(now time.Time, n int64) {
	sec := now.Unix()
	slot := sec % rateWindowSeconds
	r.mu.Lock()
	if r.secs[slot] != sec {
		r.secs[slot] = sec
		r.counts[slot] = 0
	}
	r.counts[slot] += n
	r.mu.Unlock()
}

// perSecond is the average rate over the window ending now. Before the
// window has passed since start, it averages over the time since start, so a
// young runner does not under-report its rate.
func (r *rateCounter) perSecond(now time.Time, window time.Duration) float64 {
	w := int64(window / time.Second)
	if w <= 0 {
		w = 1
	}
	if w > rateWindowSeconds {
		w = rateWindowSeconds
	}
	nowSec := now.Unix()
	r.mu.Lock()
	defer r.mu.Unlock()
	if age := nowSec - r.started.Unix(); age < w {
		w = max(age, 1)
	}
	var sum int64
	// Whole seconds only: the current second is still filling.
	for s := nowSec - w; s < nowSec; s++ {
		slot := s % rateWindowSeconds
		if r.secs[slot] == s {
			sum += r.counts[slot]
		}
	}
	return float64(sum) / float64(w)
}
