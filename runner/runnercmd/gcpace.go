package runnercmd

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/monovertex/monovertex/internal/payloadpool"
)

// minGCHeadroom is the least the heap may grow between collections when
// the pacer sets the GC percent: Go's own 4 MiB floor collected many
// times a second at small payloads (hack/bench/RESULTS.md, "A 16 MiB
// floor under the collector's headroom").
const minGCHeadroom = 16 << 20

// gcPercentFor returns the GC percent that gives the heap the headroom
// GOGC=100 would give it if the payload pool's buffers (held of the live
// bytes) were not on the heap: the heap may grow by the live bytes that are
// not pooled, and at least by minGCHeadroom (so above GOGC=100 while the
// live heap is under minGCHeadroom).
//
// Go's pacer lets the heap grow by GOGC percent of all the live heap. With
// megabyte payloads most of that is the pool's buffers, which are reused
// rather than turned into garbage, so at GOGC=100 the heap would reach
// twice the payloads in flight before a collection (hack/bench/RESULTS.md).
// What the runner does allocate
// per message is the same with or without the pool, so it gets the same
// headroom as it would without the pool on the heap; at small payloads the
// pool holds nothing and this is GOGC=100 over a live heap of 16 MiB or
// more.
func gcPercentFor(live, held int64) int {
	if live <= 0 {
		return 100
	}
	other := max(live-max(held, 0), minGCHeadroom)
	return int(max(other*100/live, 1))
}

// goalHold is how long the pacer keeps the heap's goal at the highest it
// set. Go's scavenger returns the pages above about 1.1 times the goal, so a
// goal that follows the live heap down between bursts has them returned and
// faulted back in by the next burst: with megabyte payloads a fault for each
// page nats.go copies a message into (hack/bench/RESULTS.md, "The heap's
// goal held at its peak"). Holding the goal keeps the peak where it was and
// lets memory go 10 s after the load falls.
const goalHold = 10 * time.Second

// gcPacer sets the GC percent from gcPercentFor after every collection,
// never letting the heap's goal fall below the highest of the last goalHold.
type gcPacer struct {
	held    func() int64
	set     func(int) int
	now     func() time.Time
	mu      sync.Mutex
	percent int
	stopped bool
	sample  []metrics.Sample
	peak    int64     // the highest goal set since peakAt
	peakAt  time.Time // when peak was set
}

// startGCPacing starts pacing the collector with gcPercentFor unless the
// user set GOGC, and returns the log fields that say which holds, for the
// "runner started" line.
func startGCPacing() []any {
	if v, ok := os.LookupEnv("GOGC"); ok {
		return []any{"gc_percent_from", "GOGC=" + v}
	}
	newGCPacer(payloadpool.Held, debug.SetGCPercent).arm()
	return []any{"gc_percent_from", "pacer: GOGC=100's headroom over the heap other than pooled payload buffers, at least 16 MiB, the goal held at its peak for 10 s (set GOGC to choose a fixed percent)"}
}

func newGCPacer(held func() int64, set func(int) int) *gcPacer {
	return &gcPacer{held: held, set: set, now: time.Now, percent: 100,
		sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
}

// gcSentinel is an object whose only use is to become garbage: its cleanup
// runs after the collection that finds it unreachable, which is how the
// pacer hears of each collection without polling. It holds a pointer so
// the allocator does not pack it into a tiny block with other objects that
// may keep the block alive.
type gcSentinel struct{ _ *byte }

// arm asks to be called after the next collection.
func (p *gcPacer) arm() {
	runtime.AddCleanup(new(gcSentinel), func(p *gcPacer) {
		if p.adjust() {
			p.arm()
		}
	}, p)
}

// adjust sets the GC percent for the heap the last collection found live,
// and reports whether the pacer is still running.
func (p *gcPacer) adjust() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return false
	}
	metrics.Read(p.sample)
	live := int64(p.sample[0].Value.Uint64())
	if want := p.hold(live, gcPercentFor(live, p.held())); want != p.percent {
		p.set(want)
		p.percent = want
	}
	return true
}

// hold returns the GC percent that keeps the goal at the peak of the last
// goalHold when want would put it lower, and records a new peak otherwise.
// A held goal is at most twice the one want gives: the percent then stays
// within a few times Go's default, so a heap that jumps before the pacer
// hears of the collection overshoots little more than it did without it.
func (p *gcPacer) hold(live int64, want int) int {
	if live <= 0 {
		return want
	}
	goal := live + live*int64(want)/100
	now := p.now()
	if goal >= p.peak || now.Sub(p.peakAt) > goalHold {
		p.peak, p.peakAt = goal, now
		return want
	}
	return int((min(p.peak, 2*goal) - live) * 100 / live)
}

// stop ends the pacing and puts back GOGC=100; for tests.
func (p *gcPacer) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped = true
	p.set(100)
}
