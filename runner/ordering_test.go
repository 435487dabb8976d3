package runner_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/runnertest"
)

// orderProbe watches one place of the pipeline (a stage or the sinks):
// per lane, the offsets in the order they arrive and how many of the lane
// are there at once, and across lanes the most messages there at once.
type orderProbe struct {
	name string
	gauge
	mu sync.Mutex
	// last is each lane's latest offset, busy how many of the lane are in.
	last  map[string]int
	busy  map[string]int
	count int
	// overtaken counts arrivals at a lower offset than the lane's latest,
	// repeated arrivals at the same offset (allowed for retries), and
	// together how many of one lane were in at once.
	overtaken, repeated, together int
	first                         string
}

func newOrderProbe(name string) *orderProbe {
	return &orderProbe{name: name, last: map[string]int{}, busy: map[string]int{}}
}

// offsetOf and laneOf read what orderedMessages put in the headers.
func offsetOf(m *runner.Message) int {
	n, _ := strconv.Atoi(m.Headers["offset"])
	return n
}

func laneOf(m *runner.Message) string { return m.Headers["lane"] }

func (p *orderProbe) enter(m *runner.Message) {
	p.add(1)
	lane, off := laneOf(m), offsetOf(m)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.count++
	if last, ok := p.last[lane]; ok {
		switch {
		case off < last:
			p.overtaken++
			if p.first == "" {
				p.first = fmt.Sprintf("%s: lane %s got offset %d after %d", p.name, lane, off, last)
			}
		case off == last:
			p.repeated++
		}
	}
	p.last[lane] = off
	p.busy[lane]++
	if p.busy[lane] > 1 {
		p.together++
		if p.first == "" {
			p.first = fmt.Sprintf("%s: lane %s had %d messages at once", p.name, lane, p.busy[lane])
		}
	}
}

func (p *orderProbe) leave(m *runner.Message) {
	p.mu.Lock()
	p.busy[laneOf(m)]--
	p.mu.Unlock()
	p.add(-1)
}

// check fails t if the lanes were not kept in order one at a time.
func (p *orderProbe) check(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.overtaken > 0 || p.together > 0 {
		t.Errorf("%s: %d arrivals overtook an earlier offset of their lane, %d found another of their lane there; first: %s",
			p.name, p.overtaken, p.together, p.first)
	}
}

// delayed handles each message of a call on its own goroutine, as the
// CloudEvents transformer and sink send the requests of a batch at once,
// waiting a random 0-2ms per message inside the probe.
func delayed[R any](ctx context.Context, p *orderProbe, msgs []*runner.Message, answer func(m *runner.Message) R) []R {
	out := make([]R, len(msgs))
	var wg sync.WaitGroup
	for i, m := range msgs {
		wg.Go(func() {
			p.enter(m)
			defer p.leave(m)
			select {
			case <-time.After(time.Duration(rand.IntN(2000)) * time.Microsecond):
			case <-ctx.Done():
			}
			out[i] = answer(m)
		})
	}
	wg.Wait()
	return out
}

// passTransformer passes each message on unchanged through its probe.
type passTransformer struct{ p *orderProbe }

func (tr *passTransformer) Transform(ctx context.Context, msgs []*runner.Message) ([]runner.TransformResult, error) {
	return delayed(ctx, tr.p, msgs, func(m *runner.Message) runner.TransformResult {
		return runner.TransformResult{Outputs: []*runner.Message{m}}
	}), nil
}

func (*passTransformer) Close(context.Context) error { return nil }

// probeSink answers as decide says (nil: OK) through its probe, and
// records the offsets it took, per lane, in the order it took them, in
// written, which a fallback sink may share.
type probeSink struct {
	p       *orderProbe
	decide  func(m *runner.Message, attempt int) runner.WriteResult
	mu      *sync.Mutex
	tries   map[string]int
	written map[string][]int
	ids     map[string]int
}

func newProbeSink(p *orderProbe, decide func(m *runner.Message, attempt int) runner.WriteResult) *probeSink {
	return &probeSink{p: p, decide: decide, mu: &sync.Mutex{}, tries: map[string]int{}, written: map[string][]int{}, ids: map[string]int{}}
}

// sharing returns a sink that records into s's written.
func (s *probeSink) sharing(p *orderProbe) *probeSink {
	return &probeSink{p: p, mu: s.mu, tries: map[string]int{}, written: s.written, ids: s.ids}
}

func (s *probeSink) Write(ctx context.Context, msgs []*runner.Message) ([]runner.WriteResult, error) {
	return delayed(ctx, s.p, msgs, func(m *runner.Message) runner.WriteResult {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.tries[m.ID]++
		var r runner.WriteResult
		if s.decide != nil {
			r = s.decide(m, s.tries[m.ID])
		}
		if r.Status == runner.WriteOK {
			s.written[laneOf(m)] = append(s.written[laneOf(m)], offsetOf(m))
			s.ids[m.ID]++
		}
		return r
	}), nil
}

func (*probeSink) Close(context.Context) error { return nil }

// checkWritten fails t unless every one of n messages was written exactly
// once and, per lane, in strictly increasing offsets.
func (s *probeSink) checkWritten(t *testing.T, n int) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.ids) != n {
		t.Errorf("%d distinct messages written, want %d", len(s.ids), n)
	}
	for id, c := range s.ids {
		if c != 1 {
			t.Errorf("message %s written %d times, want once", id, c)
		}
	}
	bad := 0
	for lane, offs := range s.written {
		for i := 1; i < len(offs); i++ {
			if offs[i] <= offs[i-1] {
				if bad == 0 {
					t.Errorf("lane %s written in the order %v", lane, offs)
				}
				bad++
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d writes came after a later offset of their lane", bad)
	}
}

// orderedMessages returns n messages over keys keys and parts partitions
// in a random interleaving, each with its offset (its place in the read
// order) and lane (partition/key) in its headers.
func orderedMessages(n, keys, parts int, seed uint64) []*runner.Message {
	r := rand.New(rand.NewPCG(seed, 0))
	msgs := make([]*runner.Message, n)
	for i := range msgs {
		k := r.IntN(keys)
		p := k % parts
		m := &runner.Message{
			ID: "m-" + strconv.Itoa(i), Value: []byte("v"), Keys: []string{"key-" + strconv.Itoa(k)},
			Headers: map[string]string{"offset": strconv.Itoa(i), "lane": fmt.Sprintf("%d/key-%d", p, k)},
		}
		m.Offset = runnertest.Partition(p)
		msgs[i] = m
	}
	return msgs
}

// relane sets each message's lane header to its partition alone, for
// partition ordering.
func relane(msgs []*runner.Message) {
	for _, m := range msgs {
		p, _ := m.Offset.(runnertest.Partition)
		m.Headers["lane"] = strconv.Itoa(int(p))
	}
}

// runOrdered runs msgs through a passing transformer and a probe sink
// (with decide, and a fallback sink sharing its record when fallback) and
// checks what every run must end with: each message acked once, none
// nacked, every one written exactly once.
func runOrdered(t *testing.T, ordering runner.Ordering, msgs []*runner.Message, decide func(*runner.Message, int) runner.WriteResult, fallback bool) (tr, sk *orderProbe, sink *probeSink) {
	t.Helper()
	tr, sk = newOrderProbe("transformer"), newOrderProbe("sink")
	sink = newProbeSink(sk, decide)
	var fb runner.Sink
	opts := runner.Options{BatchSize: 100, InflightBatches: 4, Ordering: ordering, Retry: runner.RetryPolicy{Interval: 5 * time.Millisecond}}
	if fallback {
		// The fallback sink shares the sink's probe and record: a lane's
		// order spans both.
		fb = sink.sharing(sk)
		opts.OnFailure = runner.OnFailureFallback
		opts.Retry.Steps = 1
	}
	src := runnertest.NewSource(msgs)
	run(t, opts, src, &passTransformer{p: tr}, sink, fb)
	if err := src.Errors(); err != nil {
		t.Fatal(err)
	}
	acked := src.Acked()
	for _, m := range msgs {
		if acked[m.ID] != 1 {
			t.Fatalf("message %s acked %d times, want once", m.ID, acked[m.ID])
		}
	}
	if n := len(src.Nacked()); n != 0 {
		t.Fatalf("%d messages nacked, want none", n)
	}
	sink.checkWritten(t, len(msgs))
	return tr, sk, sink
}

// TestKeyOrderingKeepsEachKeyInOrderWhileKeysOverlap: 2000 messages over
// 100 keys and 4 partitions, random delays at the transformer and the
// sink. Under MV_ORDERING=key each key reaches both one message at a time
// in offset order, and keys still overlap.
func TestKeyOrderingKeepsEachKeyInOrderWhileKeysOverlap(t *testing.T) {
	msgs := orderedMessages(2000, 100, 4, 1)
	tr, sk, _ := runOrdered(t, runner.OrderingKey, msgs, nil, false)
	tr.check(t)
	sk.check(t)
	peakTr, peakSk := tr.peak.Load(), sk.peak.Load()
	t.Logf("most messages in flight at once across keys: %d at the transformer, %d at the sink (100 keys)", peakTr, peakSk)
	if peakTr < 2 || peakSk < 2 || peakTr > 100 || peakSk > 100 {
		t.Fatalf("peak in flight %d at the transformer, %d at the sink; want 2..100 (keys overlap, one per key)", peakTr, peakSk)
	}
}

// TestPartitionOrderingKeepsEachPartitionInOrder: with partition
// ordering, the keys of a partition share its lane.
func TestPartitionOrderingKeepsEachPartitionInOrder(t *testing.T) {
	msgs := orderedMessages(1000, 100, 4, 2)
	relane(msgs)
	tr, sk, _ := runOrdered(t, runner.OrderingPartition, msgs, nil, false)
	tr.check(t)
	sk.check(t)
	t.Logf("most messages in flight at once: %d at the transformer, %d at the sink (4 partitions)", tr.peak.Load(), sk.peak.Load())
	if p := sk.peak.Load(); p < 2 || p > 4 {
		t.Fatalf("peak in flight at the sink %d, want 2..4 (partitions overlap, one each)", p)
	}
}

// TestKeyOrderingRetryAndFallbackAreNotOvertaken: the sink fails one
// message in seven once, and sends one in eleven to the fallback sink
// (after failing it: MV_RETRY_STEPS=1, MV_ON_FAILURE=fallback); no later
// message of a key is written, by either sink, before an earlier one.
func TestKeyOrderingRetryAndFallbackAreNotOvertaken(t *testing.T) {
	msgs := orderedMessages(1000, 100, 4, 3)
	decide := func(m *runner.Message, attempt int) runner.WriteResult {
		off := offsetOf(m)
		switch {
		case off%11 == 0:
			return runner.WriteResult{Status: runner.WriteFailed, Err: fmt.Errorf("refused %s", m.ID)}
		case off%7 == 0 && attempt == 1:
			return runner.WriteResult{Status: runner.WriteFailed, Err: fmt.Errorf("once %s", m.ID)}
		}
		return runner.WriteResult{}
	}
	_, sk, _ := runOrdered(t, runner.OrderingKey, msgs, decide, true)
	sk.mu.Lock()
	overtaken, repeated := sk.overtaken, sk.repeated
	sk.mu.Unlock()
	if overtaken > 0 {
		t.Fatalf("%d offers to the sinks overtook an earlier offset of their key: %s", overtaken, sk.first)
	}
	// 1000/7 retried once, 1000/11 tried twice then written to the
	// fallback sink: the retries are there.
	if want := 1000/7 + 1 + 2*(1000/11+1) - (1000/77 + 1); repeated < want {
		t.Fatalf("%d repeated offers, want at least %d", repeated, want)
	}
}

// TestOrderingRejectsUnknownValue: an invalid ordering names MV_ORDERING.
func TestOrderingRejectsUnknownValue(t *testing.T) {
	_, err := runner.New(runner.Options{Ordering: "by-key"}, runnertest.NewSource(nil), nil, runnertest.NewSink(nil), nil)
	if err == nil || !strings.Contains(err.Error(), "MV_ORDERING") || !strings.Contains(err.Error(), "by-key") {
		t.Fatalf("err = %v, want one naming MV_ORDERING and the value", err)
	}
}

// TestKeyOrderingInStreamingMode: the same in streaming mode, where
// MV_CONCURRENCY bounds the messages in flight.
func TestKeyOrderingInStreamingMode(t *testing.T) {
	msgs := orderedMessages(2000, 100, 4, 4)
	tr, sk := newOrderProbe("transformer"), newOrderProbe("sink")
	sink := newProbeSink(sk, nil)
	src := &peakSource{Source: runnertest.NewSource(msgs)}
	run(t, runner.Options{BatchSize: 50, Streaming: true, Concurrency: 300, Ordering: runner.OrderingKey}, src, &passTransformer{p: tr}, sink, nil)
	if err := src.Errors(); err != nil {
		t.Fatal(err)
	}
	tr.check(t)
	sk.check(t)
	sink.checkWritten(t, len(msgs))
	if p := src.peak.Load(); p > 300 {
		t.Fatalf("peak unacked messages %d, want at most MV_CONCURRENCY 300", p)
	}
	if p := sk.peak.Load(); p < 2 {
		t.Fatalf("peak in flight at the sink %d, want keys to overlap", p)
	}
}

// TestRetriedMessageHoldsOnlyItsOwnLane: key a's first message fails 20
// times; key b's ten messages, read in the same batches, are all written
// meanwhile, and a's later ones wait for it.
func TestRetriedMessageHoldsOnlyItsOwnLane(t *testing.T) {
	var msgs []*runner.Message
	for i := range 10 {
		for _, k := range []string{"a", "b"} {
			msgs = append(msgs, &runner.Message{ID: fmt.Sprintf("%s-%d", k, i), Keys: []string{k}, Value: []byte("v")})
		}
	}
	sink := runnertest.NewSink(func(m *runner.Message, attempt int) runner.WriteResult {
		if m.ID == "a-0" && attempt <= 20 {
			return runner.WriteResult{Status: runner.WriteFailed, Err: fmt.Errorf("not yet")}
		}
		return runner.WriteResult{}
	})
	src := runnertest.NewSource(msgs)
	run(t, runner.Options{BatchSize: 20, Ordering: runner.OrderingKey, Retry: runner.RetryPolicy{Interval: 5 * time.Millisecond}}, src, nil, sink, nil)
	order := sink.WrittenIDs()
	if len(order) != 20 {
		t.Fatalf("written %v, want all 20", order)
	}
	want := []string{"b-0", "b-1", "b-2", "b-3", "b-4", "b-5", "b-6", "b-7", "b-8", "b-9", "a-0", "a-1", "a-2", "a-3", "a-4", "a-5", "a-6", "a-7", "a-8", "a-9"}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("written in the order %v, want %v: b goes on while a-0 is retried, a waits for it", order, want)
	}
}

// TestOrderedRunLeavesNoGoroutines: the lane batches' goroutines are gone
// once Run returns.
func TestOrderedRunLeavesNoGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	sink := runnertest.NewSink(nil)
	sink.Latency = time.Millisecond
	run(t, runner.Options{BatchSize: 10, InflightBatches: 4, Ordering: runner.OrderingKey}, runnertest.NewSource(orderedMessages(400, 20, 2, 5)), nil, sink, nil)
	if n := len(sink.WrittenIDs()); n != 400 {
		t.Fatalf("written %d, want 400", n)
	}
	waitGoroutines(t, before)
}
