package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/monovertex/monovertex/internal/clock"
)

// acquire waits, in streaming mode, until at least one message may be read,
// and takes up to max places; it returns how many it took (max in batch
// mode), or 0 if ctx ended.
func (e *Engine) acquire(ctx context.Context, max int) int {
	if e.tokens == nil {
		return max
	}
	select {
	case e.tokens <- struct{}{}:
	case <-ctx.Done():
		return 0
	}
	n := 1
	for n < max {
		select {
		case e.tokens <- struct{}{}:
			n++
			continue
		default:
		}
		break
	}
	return n
}

// release gives back n places taken by acquire once their messages were
// acked or handed back.
func (e *Engine) release(n int) {
	if e.tokens == nil {
		return
	}
	for range n {
		<-e.tokens
	}
}

func (e *Engine) readLoop(ctx, workCtx context.Context, wg *sync.WaitGroup, onFatal func(error)) error {
	inflight := e.opts.InflightBatches
	if e.tokens != nil {
		// Streaming mode is bounded by messages, not batches.
		inflight = e.opts.Concurrency
	}
	slots := make(chan struct{}, inflight)
	// Batches run on long-lived workers, at most one per slot, not on a
	// goroutine each: a new goroutine's stack starts small and is copied
	// each time the write path grows it, and at a generator's rate of
	// small batches that copying was a quarter of the runner's CPU
	// (generator->blackhole at 1 MiB, hack/bench/RESULTS.md). Workers
	// stay until the loop ends, idle ones too: no more than ran at once,
	// which the slots bound (in streaming mode, MV_CONCURRENCY).
	w := batchWorkers{slots: slots, wg: wg, jobs: make(chan batchJob), max: int32(inflight),
		do: func(j batchJob) {
			if err := e.process(workCtx, j.msgs, j.start, j.readEnd); err != nil && IsFatal(err) {
				onFatal(err)
			}
		}}
	defer close(w.jobs)
	var ordered *lanes
	if e.opts.Ordering != OrderingUnordered {
		ordered = newLanes(e, workCtx, onFatal)
		e.lanes = ordered
	}
	failures := 0
	for {
		if !e.waitResumed(ctx) {
			return nil
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		want := e.acquire(ctx, e.opts.BatchSize)
		if want == 0 {
			<-slots
			return nil
		}
		// Numaflow's limit for a MonoVertex counts read calls: one token
		// per read of up to a batch, taken once a read may start.
		if l := e.opts.RateLimiter; l != nil && !l.Acquire(ctx) {
			e.release(want)
			<-slots
			return nil
		}
		start := time.Now()
		msgs, err := e.src.Read(ctx, want, e.opts.ReadTimeout)
		if err == nil || len(msgs) > 0 {
			// As numaflow-core, only a read that returned (a
			// source's partial answer before its stream broke included)
			// is timed and sets the batch size; a failed one is not.
			observeSince(e.m.ReadTime, start)
			e.m.ReadBatchSize.Set(float64(len(msgs)))
		}
		var readEnd time.Time
		if e.tracer != nil {
			readEnd = time.Now()
		}
		if e.tokens != nil && len(msgs) < want {
			e.release(want - len(msgs))
		}
		if len(msgs) > 0 {
			e.nameRead(msgs)
			e.countRead(msgs)
			if e.inflight != nil {
				n := len(msgs)
				msgs = e.dropRedelivered(msgs)
				e.release(n - len(msgs))
			}
		}
		switch {
		case len(msgs) > 0 && ordered != nil:
			wg.Add(1)
			ordered.add(msgs, start, readEnd, func() { <-slots; wg.Done() })
		case len(msgs) > 0:
			wg.Add(1)
			w.run(batchJob{msgs: msgs, start: start, readEnd: readEnd})
		default:
			<-slots
		}
		// A source that never blocks (the generator, a deep backlog) and the
		// batch goroutines can hand the CPU to each other for seconds with
		// GOMAXPROCS=1 (set on the container, or a one-core node), starving
		// the admin and $PORT servers that probes hit. Yielding once per
		// batch lets them in.
		// With more Ps an idle one polls the network, and the yield only
		// costs (generator->blackhole at 1 KiB, GOMAXPROCS=2, medians of 3
		// runs: 1.69 CPU µs per message with it, 1.60 without).
		if runtime.GOMAXPROCS(0) == 1 {
			runtime.Gosched()
		}
		switch {
		case err == nil:
			failures = 0
		case errors.Is(err, io.EOF):
			return io.EOF
		case ctx.Err() != nil:
			return nil
		case IsFatal(err):
			return err
		default:
			e.recordError(fmt.Errorf("source read: %w", err))
			e.log.Warnw("source read failed, retrying", zap.Error(err))
			if !clock.Sleep(ctx, e.callDelay(failures)) {
				return nil
			}
			failures++
		}
	}
}

// batchJob is a batch read and waiting to be processed.
type batchJob struct {
	msgs           []*Message
	start, readEnd time.Time
}

// batchWorkers runs batches on goroutines that live as long as the read
// loop, started as they are needed, up to max (the loop's slots).
type batchWorkers struct {
	do    func(batchJob)
	slots chan struct{}
	wg    *sync.WaitGroup
	jobs  chan batchJob // closed when the read loop returns
	// live counts the workers: only run adds, and a worker takes itself
	// off as it ends; one ended by runtime.Goexit in a batch does so
	// before it gives its slot up, so that run, which then takes the
	// slot, starts another rather than wait for it.
	live atomic.Int32
	max  int32
}

// run hands a batch, whose slot and wg count the caller holds, to an idle
// worker, or to a new one while fewer than max live. With max live, the
// caller's slot leaves at most max-1 of them in a batch, so one is idle or
// about to be.
func (w *batchWorkers) run(j batchJob) {
	select {
	case w.jobs <- j:
		return
	default:
	}
	if w.live.Load() < w.max {
		w.live.Add(1)
		go w.work(j)
		return
	}
	w.jobs <- j
}

// work processes j, then every batch it is handed, until the read loop
// ends.
func (w *batchWorkers) work(j batchJob) {
	for ok := true; ok; j, ok = <-w.jobs {
		w.process(j)
	}
	w.live.Add(-1)
}

// process runs one batch, then gives its slot and wg count back.
func (w *batchWorkers) process(j batchJob) {
	done := false
	defer w.wg.Done()
	defer func() {
		if !done { // runtime.Goexit: this worker ends here
			w.live.Add(-1)
		}
		<-w.slots
	}()
	w.do(j)
	done = true
}

func (e *Engine) countRead(msgs []*Message) {
	var n int64
	// A read is mostly of one partition: add runs of equal partitions.
	run, part := 0, msgs[0].partition
	for _, m := range msgs {
		n += int64(len(m.Value))
		if m.partition != part {
			e.readCounter(part).Add(float64(run))
			run, part = 0, m.partition
		}
		run++
	}
	e.readCounter(part).Add(float64(run))
	e.totals.read.Add(int64(len(msgs)))
	e.count(&e.totals.readBytes, e.m.ReadBytesTotal, int(n))
}

// readCounter is monovtx_read_total of a message's partition field
// (partition + 1, or 0 for the replica), kept so that a read looks the
// label up once. Only the read loop calls it.
func (e *Engine) readCounter(part int32) prometheus.Counter {
	if c, ok := e.readTotals[part]; ok {
		return c
	}
	label := int(part) - 1
	if part == 0 {
		label = e.opts.Replica
	}
	c := e.m.ReadTotal.WithLabelValues(strconv.Itoa(label))
	if e.readTotals == nil {
		e.readTotals = map[int32]prometheus.Counter{}
	}
	e.readTotals[part] = c
	return c
}
