package runner

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/monovertex/monovertex/internal/testutil/goid"
)

// TestBatchWorkersAreReused runs 200 batches through three slots, as the
// read loop does, and checks that every batch ran once, that three ran at
// once when three were held, that all of them ran on no more than three
// goroutines (a goroutine per batch is what the workers replace), and
// that the workers end once the read loop closes their channel.
func TestBatchWorkersAreReused(t *testing.T) {
	const inflight, total = 3, 200
	before := runtime.NumGoroutine()
	slots := make(chan struct{}, inflight)
	var wg sync.WaitGroup
	var mu sync.Mutex
	ran := make([]int, total)
	goroutines := map[uint64]bool{}
	running, peak := 0, 0
	hold := make(chan struct{})
	w := batchWorkers{slots: slots, wg: &wg, jobs: make(chan batchJob), max: inflight, do: func(j batchJob) {
		i := int(j.start.Unix())
		mu.Lock()
		ran[i]++
		goroutines[goid.ID()] = true
		running++
		peak = max(peak, running)
		mu.Unlock()
		if i < inflight {
			<-hold // the first inflight batches are all in flight together
		}
		mu.Lock()
		running--
		mu.Unlock()
	}}
	submit := func(i int) {
		slots <- struct{}{}
		wg.Add(1)
		w.run(batchJob{start: time.Unix(int64(i), 0)})
	}
	for i := range inflight {
		submit(i)
	}
	select {
	case slots <- struct{}{}:
		t.Fatalf("a slot was free with %d batches held", inflight)
	default:
	}
	waitFor(t, "the held batches to run at once", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return peak == inflight
	})
	close(hold)
	for i := inflight; i < total; i++ {
		submit(i)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the batches did not all finish in 10 s")
	}
	for i, n := range ran {
		if n != 1 {
			t.Errorf("batch %d ran %d times", i, n)
		}
	}
	if peak != inflight {
		t.Errorf("%d batches ran at once, want %d", peak, inflight)
	}
	if len(goroutines) != inflight {
		t.Errorf("%d batches ran on %d goroutines, want %d", total, len(goroutines), inflight)
	}
	close(w.jobs)
	waitFor(t, "the workers to end", func() bool { return w.live.Load() == 0 && runtime.NumGoroutine() <= before })
}

// TestAWorkerThatEndsIsReplaced ends a worker from inside its batch
// (runtime.Goexit, as a test's FailNow in a sink would) and checks that
// the next batch still runs, on a new worker.
func TestAWorkerThatEndsIsReplaced(t *testing.T) {
	slots := make(chan struct{}, 1)
	var wg sync.WaitGroup
	ran := make(chan int, 2)
	w := batchWorkers{slots: slots, wg: &wg, jobs: make(chan batchJob), max: 1, do: func(j batchJob) {
		ran <- int(j.start.Unix())
		if j.start.Unix() == 0 {
			runtime.Goexit()
		}
	}}
	submitted := make(chan struct{})
	go func() { // as the read loop; a run that waits for the ended worker hangs here, not the test
		defer close(submitted)
		for i := range 2 {
			slots <- struct{}{}
			wg.Add(1)
			w.run(batchJob{start: time.Unix(int64(i), 0)})
		}
	}()
	for want := range 2 {
		select {
		case got := <-ran:
			if got != want {
				t.Fatalf("batch %d ran, want %d", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("batch %d did not run in 10 s after its worker ended", want)
		}
	}
	<-submitted
	wg.Wait()
	close(w.jobs)
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 10 s waiting for %s", what)
		}
	}
}
