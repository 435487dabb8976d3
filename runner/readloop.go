package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// messageBudget bounds the messages in flight in streaming mode
// (MV_CONCURRENCY): a place is taken per message read and given back once
// it is acked or handed back. A nil budget (batch mode) bounds nothing.
type messageBudget struct{ tokens chan struct{} }

func newMessageBudget(n int) *messageBudget {
	return &messageBudget{tokens: make(chan struct{}, n)}
}

// acquire waits until at least one message may be read, and takes up to
// max places; it returns how many it took (max without a budget), or 0 if
// ctx ended.
func (mb *messageBudget) acquire(ctx context.Context, max int) int {
	if mb == nil {
		return max
	}
	select {
	case mb.tokens <- struct{}{}:
	case <-ctx.Done():
		return 0
	}
	n := 1
	for n < max {
		select {
		case mb.tokens <- struct{}{}:
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
func (mb *messageBudget) release(n int) {
	if mb == nil {
		return
	}
	for range n {
		<-mb.tokens
	}
}

// readLoop reads from the source while there is room in flight and hands
// each batch read to a batch worker, or under MV_ORDERING to its lanes.
// Only the goroutine that runs it touches it.
type readLoop struct {
	e *Engine
	// slots bound the batches in flight (in streaming mode, the batches of
	// MV_CONCURRENCY messages at most): one is taken before each read and
	// given back when the batch is done.
	slots   chan struct{}
	workers batchWorkers
	wg      *sync.WaitGroup
	// ordered keeps the read order under MV_ORDERING; nil when unordered.
	ordered *lanes
	// failures counts the reads that failed in a row, for the backoff.
	failures int
}

// readLoop reads until ctx ends, the source ends (io.EOF) or a read fails
// fatally, and returns why; the batches it started run on, counted by wg.
func (e *Engine) readLoop(ctx, workCtx context.Context, wg *sync.WaitGroup, onFatal func(error)) error {
	r := e.newReadLoop(workCtx, wg, onFatal)
	defer close(r.workers.jobs)
	for {
		want := r.reserve(ctx)
		if want == 0 {
			return nil
		}
		start := time.Now()
		msgs, err := e.src.Read(ctx, want, e.opts.ReadTimeout)
		msgs, readEnd := r.took(msgs, err, want, start)
		r.dispatch(msgs, start, readEnd)
		// A source that never blocks (the generator, a deep backlog) and the
		// batch goroutines can hand the CPU to each other for seconds with
		// GOMAXPROCS=1 (set on the container, or a one-core node), starving
		// the admin and $PORT servers that probes hit. Yielding once per
		// batch lets them in; with more Ps an idle one polls the network,
		// and the yield would only cost (hack/bench/RESULTS.md).
		if runtime.GOMAXPROCS(0) == 1 {
			runtime.Gosched()
		}
		if stop, err := r.afterRead(ctx, err); stop {
			return err
		}
	}
}

func (e *Engine) newReadLoop(workCtx context.Context, wg *sync.WaitGroup, onFatal func(error)) *readLoop {
	inflight := e.opts.InflightBatches
	if e.budget != nil {
		// Streaming mode is bounded by messages, not batches.
		inflight = e.opts.Concurrency
	}
	slots := make(chan struct{}, inflight)
	r := &readLoop{e: e, slots: slots, wg: wg}
	// Batches run on long-lived workers, at most one per slot, not on a
	// goroutine each: a new goroutine's stack starts small and is copied
	// each time the write path grows it, which at a generator's rate of
	// small batches cost a quarter of the runner's CPU
	// (hack/bench/RESULTS.md). Workers stay until the loop ends.
	r.workers = batchWorkers{slots: slots, wg: wg, jobs: make(chan batchJob), max: int32(inflight),
		do: func(j batchJob) {
			if err := e.process(workCtx, j.msgs, j.start, j.readEnd); err != nil && IsFatal(err) {
				onFatal(err)
			}
		}}
	if e.opts.Ordering != OrderingUnordered {
		r.ordered = newLanes(e, workCtx, onFatal)
		e.lanes = r.ordered
	}
	return r
}

// reserve waits until a read may start: reading is not paused, a slot is
// free, in streaming mode messages may be taken, and the rate limiter
// lets one more read through. It returns how many messages to read, or 0
// (holding nothing) once ctx ended.
func (r *readLoop) reserve(ctx context.Context) int {
	e := r.e
	if !e.pause.wait(ctx) {
		return 0
	}
	select {
	case r.slots <- struct{}{}:
	case <-ctx.Done():
		return 0
	}
	want := e.budget.acquire(ctx, e.opts.BatchSize)
	if want == 0 {
		<-r.slots
		return 0
	}
	// Numaflow's limit for a MonoVertex counts read calls: one token
	// per read of up to a batch, taken once a read may start.
	if l := e.opts.RateLimiter; l != nil && !l.Acquire(ctx) {
		e.budget.release(want)
		<-r.slots
		return 0
	}
	return want
}

// took times and counts a read of want messages that started at start,
// gives back the places of messages not read, and drops deliveries of
// messages still in flight. readEnd is set only when tracing is on.
func (r *readLoop) took(msgs []*Message, err error, want int, start time.Time) (_ []*Message, readEnd time.Time) {
	e := r.e
	if err == nil || len(msgs) > 0 {
		// As numaflow-core, only a read that returned (a
		// source's partial answer before its stream broke included)
		// is timed and sets the batch size; a failed one is not.
		observeSince(e.m.ReadTime, start)
		e.m.ReadBatchSize.Set(float64(len(msgs)))
	}
	if e.tracer != nil {
		readEnd = time.Now()
	}
	if e.budget != nil && len(msgs) < want {
		e.budget.release(want - len(msgs))
	}
	if len(msgs) > 0 {
		e.totals.countRead(msgs, e.partitions)
		if e.inflight != nil {
			n := len(msgs)
			msgs = e.dropRedelivered(msgs)
			e.budget.release(n - len(msgs))
		}
	}
	return msgs, readEnd
}

// dispatch hands a batch to its lanes or to a worker, which give its
// slot back when it is done; an empty read gives the slot back at once.
func (r *readLoop) dispatch(msgs []*Message, start, readEnd time.Time) {
	switch {
	case len(msgs) > 0 && r.ordered != nil:
		r.wg.Add(1)
		r.ordered.add(msgs, start, readEnd, func() { <-r.slots; r.wg.Done() })
	case len(msgs) > 0:
		r.wg.Add(1)
		r.workers.run(batchJob{msgs: msgs, start: start, readEnd: readEnd})
	default:
		<-r.slots
	}
}

// afterRead decides on a read's error: stop (with the error Run reports)
// at the source's end, a fatal error or the end of ctx; otherwise back off
// after a failed read and go on.
func (r *readLoop) afterRead(ctx context.Context, err error) (stop bool, _ error) {
	e := r.e
	switch {
	case err == nil:
		r.failures = 0
	case errors.Is(err, io.EOF):
		return true, io.EOF
	case ctx.Err() != nil:
		return true, nil
	case IsFatal(err):
		return true, err
	default:
		e.recordError(fmt.Errorf("source read: %w", err))
		e.log.Warnw("source read failed, retrying", zap.Error(err))
		if !Sleep(ctx, e.callDelay(r.failures)) {
			return true, nil
		}
		r.failures++
	}
	return false, nil
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
