package runner

import (
	"sync"
	"testing"
	"time"
)

// TestBatchWorkersAreReused runs 200 batches through three slots, as the
// read loop does, and checks that every batch ran once, that three ran at
// once when three were held, and that no more than three goroutines were
// ever started for them: a goroutine per batch is what the workers
// replace.
func TestBatchWorkersAreReused(t *testing.T) {
	const inflight, total = 3, 200
	slots := make(chan struct{}, inflight)
	var wg sync.WaitGroup
	var mu sync.Mutex
	ran := make([]int, total)
	running, peak := 0, 0
	hold := make(chan struct{})
	w := batchWorkers{slots: slots, wg: &wg, jobs: make(chan batchJob), max: inflight, do: func(j batchJob) {
		i := int(j.start.Unix())
		mu.Lock()
		ran[i]++
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
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		p := peak
		mu.Unlock()
		if p == inflight {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d held batches ran at once", p, inflight)
		}
		time.Sleep(time.Millisecond)
	}
	close(hold)
	for i := inflight; i < total; i++ {
		submit(i)
	}
	wg.Wait()
	close(w.jobs)
	for i, n := range ran {
		if n != 1 {
			t.Errorf("batch %d ran %d times", i, n)
		}
	}
	if peak != inflight {
		t.Errorf("%d batches ran at once, want %d", peak, inflight)
	}
	if w.started != inflight {
		t.Errorf("%d goroutines started for %d batches, want %d", w.started, total, inflight)
	}
}
