package runner_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/runnertest"
)

// hash gives every ID a stable pseudo-random number, so a test can compute
// what the fault adapters will do with each message.
func hash(id string, salt string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(salt))
	h.Write([]byte(id))
	return h.Sum32()
}

func run(t *testing.T, opts runner.Options, src runner.Source, tr runner.Transformer, sink, fb runner.Sink) *runner.Engine {
	t.Helper()
	e, err := runner.New(opts, src, tr, sink, fb)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := e.Run(ctx); err != nil {
		t.Fatalf("run: %v", err)
	}
	return e
}

// ackOnlyIfWritten is an OnAck check: it refuses (and the source records
// for Errors) an ack of a message that written does not report yet, saying
// problem after the message's ID.
func ackOnlyIfWritten(written func(id string) bool, problem string) func([]*runner.Message) error {
	return func(msgs []*runner.Message) error {
		for _, m := range msgs {
			if !written(m.ID) {
				return fmt.Errorf("%s %s", m.ID, problem)
			}
		}
		return nil
	}
}

// gauge counts what is in progress and keeps the most there ever was.
type gauge struct{ now, peak atomic.Int64 }

func (g *gauge) add(n int64) {
	v := g.now.Add(n)
	for {
		p := g.peak.Load()
		if v <= p || g.peak.CompareAndSwap(p, v) {
			return
		}
	}
}

// chaos decides, from each ID alone, what the transformer and sinks do.
type chaos struct{}

func (chaos) outputs(id string) int { // 0 drop, 1, or 3 (fan-out)
	switch h := hash(id, "tr") % 10; {
	case h == 0:
		return 0
	case h == 1:
		return 3
	}
	return 1
}

func (chaos) transformFailures(id string) int { return int(hash(id, "trfail") % 20 / 19) } // 5% fail once

func (chaos) sinkFailures(id string) int { // 10% fail 1..3 times
	if hash(id, "sink")%10 == 0 {
		return 1 + int(hash(id, "n")%3)
	}
	return 0
}

func (chaos) fallback(id string) bool { return hash(id, "fb")%20 == 0 }

func (chaos) fallbackFailures(id string) int { return int(hash(id, "fbfail") % 2) }

func TestEngineAcksOnlyAfterFinalStateUnderChaos(t *testing.T) {
	const n = 5000
	var c chaos
	tr := runnertest.NewTransformer(func(m *runner.Message, attempt int) runner.TransformResult {
		if attempt <= c.transformFailures(m.ID) {
			return runner.TransformResult{Err: errors.New("transient")}
		}
		var out []*runner.Message
		for k := 0; k < c.outputs(m.ID); k++ {
			out = append(out, runnertest.Copy(m, fmt.Sprintf("%s/%d", m.Value, k)))
		}
		return runner.TransformResult{Outputs: out}
	})
	sink := runnertest.NewSink(func(m *runner.Message, attempt int) runner.WriteResult {
		if attempt <= c.sinkFailures(m.ID) {
			return runner.WriteResult{Status: runner.WriteFailed, Err: errors.New("sink hiccup")}
		}
		if c.fallback(m.ID) {
			return runner.WriteResult{Status: runner.WriteFallback}
		}
		return runner.WriteResult{}
	})
	fb := runnertest.NewSink(func(m *runner.Message, attempt int) runner.WriteResult {
		if attempt <= c.fallbackFailures(m.ID) {
			return runner.WriteResult{Status: runner.WriteFailed, Err: errors.New("fallback hiccup")}
		}
		return runner.WriteResult{}
	})
	outputIDs := func(id string) []string {
		switch k := c.outputs(id); k {
		case 0:
			return nil
		case 1:
			return []string{id}
		default:
			ids := make([]string, k)
			for i := range ids {
				ids[i] = fmt.Sprintf("%s-%d", id, i)
			}
			return ids
		}
	}
	src := runnertest.NewSource(runnertest.Messages(n))
	var acksChecked atomic.Int64
	// Checked at ack time: every output of an acked input is already final.
	src.OnAck = func(msgs []*runner.Message) error {
		for _, m := range msgs {
			for _, id := range outputIDs(m.ID) {
				if !sink.Written(id) && !fb.Written(id) {
					return fmt.Errorf("input %s acked before its output %s was written or fallback-written", m.ID, id)
				}
			}
			acksChecked.Add(1)
		}
		return nil
	}
	e := run(t, runner.Options{BatchSize: 100, InflightBatches: 4, Retry: runner.RetryPolicy{Interval: time.Microsecond}}, src, tr, sink, fb)

	if err := src.Errors(); err != nil {
		t.Fatal(err)
	}
	acked := src.Acked()
	if len(acked) != n || acksChecked.Load() != n {
		t.Fatalf("acked %d distinct inputs (%d ack checks), want %d", len(acked), acksChecked.Load(), n)
	}
	for id, k := range acked {
		if k != 1 {
			t.Fatalf("input %s acked %d times", id, k)
		}
	}
	if len(src.Nacked()) != 0 {
		t.Fatalf("nacked %d inputs, want none", len(src.Nacked()))
	}
	var wantWritten, wantFallback, wantDropped int
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("m-%d", i)
		if len(outputIDs(id)) == 0 {
			wantDropped++
		}
		for _, o := range outputIDs(id) {
			w, f := sink.Written(o), fb.Written(o)
			if w == f {
				t.Fatalf("output %s: written %v, fallback-written %v; want exactly one", o, w, f)
			}
			if c.fallback(o) != f {
				t.Fatalf("output %s: fallback-written %v, but the sink asked for fallback: %v", o, f, c.fallback(o))
			}
			if w {
				wantWritten++
				if got := sink.Attempts(o); got != c.sinkFailures(o)+1 {
					t.Fatalf("output %s written after %d attempts, want %d", o, got, c.sinkFailures(o)+1)
				}
			} else {
				wantFallback++
			}
		}
	}
	st := e.Status().Totals
	if st.Read != n || st.Acked != n || st.Written != int64(wantWritten) || st.FallbackWritten != int64(wantFallback) ||
		st.Dropped != int64(wantDropped) || st.TransformerDropped != int64(wantDropped) {
		t.Fatalf("totals %+v; want read=acked=%d written=%d fallback=%d dropped=%d", st, n, wantWritten, wantFallback, wantDropped)
	}
	if wantWritten == 0 || wantFallback == 0 || wantDropped == 0 {
		t.Fatalf("the chaos did not exercise every path: written %d fallback %d dropped %d", wantWritten, wantFallback, wantDropped)
	}
}

func TestOnFailureAfterRetriesAreSpent(t *testing.T) {
	alwaysFailOdd := func(m *runner.Message, _ int) runner.WriteResult {
		if hash(m.ID, "odd")%2 == 1 {
			return runner.WriteResult{Status: runner.WriteFailed, Err: errors.New("no")}
		}
		return runner.WriteResult{}
	}
	for _, tc := range []struct {
		name      string
		policy    runner.OnFailure
		steps     int
		permanent bool
	}{
		{"drop acks after the steps are spent", runner.OnFailureDrop, 2, false},
		{"fallback writes to the fallback sink after the steps are spent", runner.OnFailureFallback, 3, false},
		{"a permanent error skips the remaining steps", runner.OnFailureDrop, 5, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 400
			decide := alwaysFailOdd
			if tc.permanent {
				decide = func(m *runner.Message, a int) runner.WriteResult {
					r := alwaysFailOdd(m, a)
					r.Err = runner.Permanent(r.Err)
					return r
				}
			}
			sink := runnertest.NewSink(decide)
			fb := runnertest.NewSink(nil)
			wantAttempts := tc.steps + 1
			if tc.permanent {
				wantAttempts = 1
			}
			src := runnertest.NewSource(runnertest.Messages(n))
			src.OnAck = func(msgs []*runner.Message) error {
				for _, m := range msgs {
					if hash(m.ID, "odd")%2 == 1 {
						if a := sink.Attempts(m.ID); a != wantAttempts {
							return fmt.Errorf("%s acked after %d attempts, want %d", m.ID, a, wantAttempts)
						}
						if tc.policy == runner.OnFailureFallback && !fb.Written(m.ID) {
							return fmt.Errorf("%s acked before its fallback write", m.ID)
						}
					} else if !sink.Written(m.ID) {
						return fmt.Errorf("%s acked before it was written", m.ID)
					}
				}
				return nil
			}
			var fallback runner.Sink
			if tc.policy == runner.OnFailureFallback {
				fallback = fb
			}
			e := run(t, runner.Options{BatchSize: 50, OnFailure: tc.policy, Retry: runner.RetryPolicy{Interval: time.Microsecond, Steps: tc.steps}}, src, nil, sink, fallback)
			if err := src.Errors(); err != nil {
				t.Fatal(err)
			}
			st := e.Status().Totals
			failing := 0
			for i := 0; i < n; i++ {
				if hash(fmt.Sprintf("m-%d", i), "odd")%2 == 1 {
					failing++
				}
			}
			if st.Acked != n || st.Written != int64(n-failing) {
				t.Fatalf("totals %+v; want acked %d written %d", st, n, n-failing)
			}
			switch tc.policy {
			case runner.OnFailureDrop:
				if st.Dropped != int64(failing) || st.SinkDropped != int64(failing) {
					t.Fatalf("dropped %d (sink %d), want %d", st.Dropped, st.SinkDropped, failing)
				}
			case runner.OnFailureFallback:
				if st.FallbackWritten != int64(failing) || len(fb.WrittenIDs()) != failing {
					t.Fatalf("fallback-written %d (sink has %d), want %d", st.FallbackWritten, len(fb.WrittenIDs()), failing)
				}
			}
		})
	}
}

func TestFallbackSinkAnsweringFallbackHandsTheMessageBack(t *testing.T) {
	sink := runnertest.NewSink(func(*runner.Message, int) runner.WriteResult { return runner.WriteResult{Status: runner.WriteFallback} })
	// The fallback sink misbehaves once per message, then writes it.
	fb := runnertest.NewSink(func(_ *runner.Message, attempt int) runner.WriteResult {
		if attempt == 1 {
			return runner.WriteResult{Status: runner.WriteFallback}
		}
		return runner.WriteResult{}
	})
	src := runnertest.NewSource(runnertest.Messages(100))
	src.OnAck = ackOnlyIfWritten(fb.Written, "acked but not fallback-written")
	e := run(t, runner.Options{BatchSize: 10}, src, nil, sink, fb)
	if err := src.Errors(); err != nil {
		t.Fatal(err)
	}
	if len(src.Nacked()) != 100 || len(src.Acked()) != 100 {
		t.Fatalf("nacked %d, acked %d; want every message nacked once then acked", len(src.Nacked()), len(src.Acked()))
	}
	if st := e.Status(); st.Totals.FallbackErrors != 100 || !strings.Contains(st.LastError.Error, "fallback") {
		t.Fatalf("fallback errors %d, last error %+v", st.Totals.FallbackErrors, st.LastError)
	}
}

func TestTransformerNackGoesBackToTheSource(t *testing.T) {
	tr := runnertest.NewTransformer(func(m *runner.Message, attempt int) runner.TransformResult {
		if attempt == 1 && hash(m.ID, "nack")%3 == 0 {
			return runner.TransformResult{Nack: true}
		}
		return runner.TransformResult{Outputs: []*runner.Message{runnertest.Copy(m, string(m.Value))}}
	})
	sink := runnertest.NewSink(nil)
	src := runnertest.NewSource(runnertest.Messages(300))
	e := run(t, runner.Options{BatchSize: 32}, src, tr, sink, nil)
	wantNacks := 0
	for i := 0; i < 300; i++ {
		if hash(fmt.Sprintf("m-%d", i), "nack")%3 == 0 {
			wantNacks++
		}
	}
	if got := len(src.Nacked()); got != wantNacks {
		t.Fatalf("nacked %d, want %d", got, wantNacks)
	}
	if len(src.Acked()) != 300 || len(sink.WrittenIDs()) != 300 || e.Status().Totals.Nacked != int64(wantNacks) {
		t.Fatalf("acked %d, written %d, nacked total %d", len(src.Acked()), len(sink.WrittenIDs()), e.Status().Totals.Nacked)
	}
}

func TestOutputIDsAndFieldsAreDerivedFromTheInput(t *testing.T) {
	tr := runnertest.NewTransformer(func(m *runner.Message, _ int) runner.TransformResult {
		if m.ID == "m-0" {
			return runner.TransformResult{Outputs: []*runner.Message{{Value: []byte("a")}, {Value: []byte("b")}}}
		}
		return runner.TransformResult{Outputs: []*runner.Message{{Value: []byte("c"), Keys: []string{}}}}
	})
	sink := runnertest.NewSink(nil)
	src := runnertest.NewSource(runnertest.Messages(2))
	run(t, runner.Options{}, src, tr, sink, nil)
	in := runnertest.Messages(2)
	for _, tc := range []struct {
		id, value string
		keys      int
	}{{"m-0-0", "a", 1}, {"m-0-1", "b", 1}, {"m-1", "c", 0}} {
		m := sink.Message(tc.id)
		if m == nil {
			t.Fatalf("no output %s; written %v", tc.id, sink.WrittenIDs())
		}
		if string(m.Value) != tc.value || len(m.Keys) != tc.keys {
			t.Fatalf("output %s: value %q keys %v", tc.id, m.Value, m.Keys)
		}
		parent := in[0]
		if tc.id == "m-1" {
			parent = in[1]
		}
		if !m.EventTime.Equal(parent.EventTime) {
			t.Fatalf("output %s: event time %v, want the input's %v", tc.id, m.EventTime, parent.EventTime)
		}
	}
}

func TestWholeCallFailuresAreRetried(t *testing.T) {
	sink := runnertest.NewSink(nil)
	sink.CallError = func(call int) error {
		if call <= 3 {
			return errors.New("connection refused")
		}
		return nil
	}
	tr := runnertest.NewTransformer(func(m *runner.Message, _ int) runner.TransformResult {
		return runner.TransformResult{Outputs: []*runner.Message{runnertest.Copy(m, "x")}}
	})
	tr.CallError = func(call int) error {
		if call <= 2 {
			return errors.New("stream broken")
		}
		return nil
	}
	src := runnertest.NewSource(runnertest.Messages(50))
	src.ReadError = func(read int) error {
		if read == 1 {
			return errors.New("source hiccup")
		}
		return nil
	}
	e := run(t, runner.Options{BatchSize: 10}, src, tr, sink, nil)
	if len(sink.WrittenIDs()) != 50 || len(src.Acked()) != 50 {
		t.Fatalf("written %d acked %d, want 50", len(sink.WrittenIDs()), len(src.Acked()))
	}
	if st := e.Status().Totals; st.TransformerErrors != 2 || st.SinkErrors != 30 {
		t.Fatalf("transformer errors %d, sink errors %d; want 2 and 30 (3 failed calls of 10)", st.TransformerErrors, st.SinkErrors)
	}
}

// concurrencySink tracks how many writes overlap.
type concurrencySink struct {
	*runnertest.Sink
	gauge
}

func (c *concurrencySink) Write(ctx context.Context, msgs []*runner.Message) ([]runner.WriteResult, error) {
	c.add(1)
	defer c.add(-1)
	return c.Sink.Write(ctx, msgs)
}

func TestBatchesOverlapWithinTheInflightBound(t *testing.T) {
	inner := runnertest.NewSink(nil)
	inner.Latency = 20 * time.Millisecond
	sink := &concurrencySink{Sink: inner}
	src := &peakSource{Source: runnertest.NewSource(runnertest.Messages(2000))}
	run(t, runner.Options{BatchSize: 50, InflightBatches: 3}, src, nil, sink, nil)
	if p := sink.peak.Load(); p < 2 || p > 3 {
		t.Fatalf("peak concurrent sink writes %d, want 2..3 (overlap, bounded by 3 batches)", p)
	}
	if p := src.peak.Load(); p > 150 {
		t.Fatalf("peak unacked messages %d, want at most 3 batches x 50", p)
	}
	if len(inner.WrittenIDs()) != 2000 {
		t.Fatalf("written %d, want 2000", len(inner.WrittenIDs()))
	}
}

// TestRunLeavesNoGoroutines runs batches on every in-flight slot to the
// source's end and checks that the goroutines the run started, its batch
// workers among them, are gone once Run returns.
func TestRunLeavesNoGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	inner := runnertest.NewSink(nil)
	inner.Latency = 5 * time.Millisecond
	sink := &concurrencySink{Sink: inner}
	run(t, runner.Options{BatchSize: 10, InflightBatches: 4}, runnertest.NewSource(runnertest.Messages(400)), nil, sink, nil)
	if p := sink.peak.Load(); p < 2 {
		t.Fatalf("peak concurrent sink writes %d: the batches did not overlap, so not every worker was started", p)
	}
	if n := len(inner.WrittenIDs()); n != 400 {
		t.Fatalf("written %d, want 400", n)
	}
	waitGoroutines(t, before)
}

// waitGoroutines waits, up to 10s, until no more goroutines run than
// before, and fails t otherwise.
func waitGoroutines(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines 10 s after Run returned, %d before it", runtime.NumGoroutine(), before)
		}
		time.Sleep(time.Millisecond)
	}
}

// peakSource tracks how many messages are read but not yet acked.
type peakSource struct {
	*runnertest.Source
	gauge
}

func (p *peakSource) Read(ctx context.Context, max int, timeout time.Duration) ([]*runner.Message, error) {
	msgs, err := p.Source.Read(ctx, max, timeout)
	p.add(int64(len(msgs)))
	return msgs, err
}

func (p *peakSource) Ack(ctx context.Context, msgs []*runner.Message) error {
	p.add(-int64(len(msgs)))
	return p.Source.Ack(ctx, msgs)
}

// The shutdown and fatal-error tests run unordered and under key
// ordering (MV_ORDERING=key), where what waits in the lanes must follow
// the same rules.
func TestShutdownFinishesInflightWork(t *testing.T) {
	for _, tc := range []struct {
		ordering runner.Ordering
		latency  time.Duration
	}{
		{runner.OrderingUnordered, 50 * time.Millisecond},
		// Four keys drain four messages per call: a shorter call.
		{runner.OrderingKey, 5 * time.Millisecond},
	} {
		t.Run(string(tc.ordering), func(t *testing.T) {
			sink := runnertest.NewSink(nil)
			sink.Latency = tc.latency
			src := runnertest.NewSource(runnertest.Messages(100000))
			src.OnAck = ackOnlyIfWritten(sink.Written, "acked unwritten")
			e, err := runner.New(runner.Options{BatchSize: 100, ShutdownTimeout: 10 * time.Second, Ordering: tc.ordering}, src, nil, sink, nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			go func() { time.Sleep(300 * time.Millisecond); cancel() }()
			if err := e.Run(ctx); err != nil {
				t.Fatalf("run: %v", err)
			}
			if err := src.Errors(); err != nil {
				t.Fatal(err)
			}
			written := sink.WrittenIDs()
			acked := src.Acked()
			if len(written) == 0 || len(written) != len(acked) {
				t.Fatalf("written %d, acked %d: after a graceful stop they must match", len(written), len(acked))
			}
			if st := e.Status(); st.Totals.Read != int64(len(acked)) || st.State != "stopped" {
				t.Fatalf("read %d, acked %d, state %s", st.Totals.Read, len(acked), st.State)
			}
		})
	}
}

func TestShutdownTimeoutLeavesUnfinishedMessagesUnacked(t *testing.T) {
	for _, ordering := range []runner.Ordering{runner.OrderingUnordered, runner.OrderingKey} {
		t.Run(string(ordering), func(t *testing.T) {
			sink := runnertest.NewSink(func(*runner.Message, int) runner.WriteResult {
				return runner.WriteResult{Status: runner.WriteFailed, Err: errors.New("down")}
			})
			src := runnertest.NewSource(runnertest.Messages(30))
			e, err := runner.New(runner.Options{BatchSize: 10, ShutdownTimeout: 300 * time.Millisecond, Retry: runner.RetryPolicy{Interval: 10 * time.Millisecond}, Ordering: ordering}, src, nil, sink, nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			go func() { time.Sleep(100 * time.Millisecond); cancel() }()
			start := time.Now()
			if err := e.Run(ctx); !errors.Is(err, runner.ErrShutdownTimeout) {
				t.Fatalf("run returned %v, want ErrShutdownTimeout", err)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Fatalf("run took %v with a 300ms budget", d)
			}
			if len(src.Acked()) != 0 {
				t.Fatalf("acked %d messages that were never written", len(src.Acked()))
			}
			// Under ordering, those still waiting in their lanes too.
			if st := e.Status().Totals; st.Nacked != st.Read || st.Read == 0 {
				t.Fatalf("read %d, nacked %d: unfinished messages must be handed back", st.Read, st.Nacked)
			}
		})
	}
}

func TestFatalErrorStopsTheRunWithoutAckingUnwritten(t *testing.T) {
	for _, tc := range []struct {
		ordering runner.Ordering
		written  int
	}{
		{runner.OrderingUnordered, 300},
		// Four keys: each call that passed carried one message of each.
		{runner.OrderingKey, 12},
	} {
		t.Run(string(tc.ordering), func(t *testing.T) {
			var calls atomic.Int64
			sink := runnertest.NewSink(nil)
			sink.CallError = func(call int) error {
				if calls.Add(1) > 3 {
					return runner.Fatal(errors.New("udsink: sidecar gone for 60s"))
				}
				return nil
			}
			src := runnertest.NewSource(runnertest.Messages(10000))
			src.OnAck = ackOnlyIfWritten(sink.Written, "acked unwritten")
			e, _ := runner.New(runner.Options{BatchSize: 100, Ordering: tc.ordering}, src, nil, sink, nil)
			err := e.Run(context.Background())
			if !runner.IsFatal(err) {
				t.Fatalf("run returned %v, want the fatal error", err)
			}
			if err := src.Errors(); err != nil {
				t.Fatal(err)
			}
			if got, want := len(src.Acked()), len(sink.WrittenIDs()); got != want || got != tc.written {
				t.Fatalf("acked %d, written %d; want %d each", got, want, tc.written)
			}
		})
	}
}

func TestPauseStopsReadingAndResumeContinues(t *testing.T) {
	sink := runnertest.NewSink(nil)
	src := runnertest.NewSource(runnertest.Messages(1000))
	e, _ := runner.New(runner.Options{BatchSize: 10}, src, nil, sink, nil)
	e.SetPaused(true)
	done := make(chan error)
	go func() { done <- e.Run(context.Background()) }()
	time.Sleep(200 * time.Millisecond)
	if n := len(sink.WrittenIDs()); n != 0 {
		t.Fatalf("wrote %d messages while paused", n)
	}
	if st := e.Status(); st.State != "paused" || !st.Paused {
		t.Fatalf("status %s paused=%v, want paused", st.State, st.Paused)
	}
	e.SetPaused(false)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not finish after resume")
	}
	if len(sink.WrittenIDs()) != 1000 {
		t.Fatalf("written %d, want 1000", len(sink.WrittenIDs()))
	}
}

func TestNoNackSourceLeavesUnfinishedForRedelivery(t *testing.T) {
	tr := runnertest.NewTransformer(func(m *runner.Message, _ int) runner.TransformResult {
		return runner.TransformResult{Nack: true}
	})
	inner := runnertest.NewSource(runnertest.Messages(5))
	e, _ := runner.New(runner.Options{}, runnertest.WithoutNack(inner), tr, runnertest.NewSink(nil), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := e.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if len(inner.Acked()) != 0 || len(inner.Nacked()) != 0 || inner.Unfinished() != 5 {
		t.Fatalf("acked %d nacked %d unfinished %d; want 0, 0, 5", len(inner.Acked()), len(inner.Nacked()), inner.Unfinished())
	}
}

func TestConcurrentRunsShareNothing(t *testing.T) {
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sink := runnertest.NewSink(nil)
			src := runnertest.NewSource(runnertest.Messages(500))
			e, _ := runner.New(runner.Options{BatchSize: 20}, src, nil, sink, nil)
			if err := e.Run(context.Background()); err != nil {
				t.Error(err)
			}
			if len(sink.WrittenIDs()) != 500 {
				t.Errorf("written %d", len(sink.WrittenIDs()))
			}
		}()
	}
	wg.Wait()
}

func TestPassthroughTransformerKeepsThePayload(t *testing.T) {
	tr := runnertest.NewTransformer(func(m *runner.Message, _ int) runner.TransformResult {
		return runner.TransformResult{Outputs: []*runner.Message{m}}
	})
	sink := runnertest.NewSink(nil)
	run(t, runner.Options{}, runnertest.NewSource(runnertest.Messages(20)), tr, sink, nil)
	for i := 0; i < 20; i++ {
		if m := sink.Message(fmt.Sprintf("m-%d", i)); m == nil || string(m.Value) != fmt.Sprintf("v-%d", i) {
			t.Fatalf("m-%d written as %+v", i, m)
		}
	}
}

func TestReadyOnlyWhileRunning(t *testing.T) {
	src := runnertest.NewSource(runnertest.Messages(1))
	e, _ := runner.New(runner.Options{}, src, nil, runnertest.NewSink(nil), nil)
	if err := e.Ready(context.Background()); err == nil {
		t.Fatal("ready before Run")
	}
	e.SetPaused(true) // keeps Run going until resumed
	done := make(chan error)
	go func() { done <- e.Run(context.Background()) }()
	deadline := time.Now().Add(10 * time.Second)
	for e.Ready(context.Background()) != nil {
		if time.Now().After(deadline) {
			t.Fatal("not ready while running (paused)")
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.SetPaused(false)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := e.Ready(context.Background()); err == nil || !strings.Contains(err.Error(), "stopped") {
		t.Fatalf("after Run: %v, want not ready (stopped)", err)
	}
}

// An Unavailable per-message failure (the peer away) must neither spend the
// retry steps nor reach MV_ON_FAILURE: with 1 step and fallback on failure,
// a sink away for 6 rounds still gets every message, and the fallback sink
// gets none. A plain failure in the same setting goes to the fallback.
func TestUnavailableSpendsNoRetrySteps(t *testing.T) {
	sink := runnertest.NewSink(func(m *runner.Message, attempt int) runner.WriteResult {
		switch {
		case m.ID == "m-7" && attempt < 3:
			return runner.WriteResult{Status: runner.WriteFailed, Err: errors.New("rejected")}
		case attempt < 6:
			return runner.WriteResult{Status: runner.WriteFailed, Err: runner.Unavailable(errors.New("connection refused"))}
		}
		return runner.WriteResult{Status: runner.WriteOK}
	})
	tr := runnertest.NewTransformer(func(m *runner.Message, attempt int) runner.TransformResult {
		if attempt < 4 {
			return runner.TransformResult{Err: runner.Unavailable(errors.New("function away"))}
		}
		return runner.TransformResult{Outputs: []*runner.Message{m}}
	})
	fb := runnertest.NewSink(nil)
	src := runnertest.NewSource(runnertest.Messages(20))
	e := run(t, runner.Options{BatchSize: 10, Retry: runner.RetryPolicy{Interval: time.Millisecond, Steps: 1, Factor: 1},
		OnFailure: runner.OnFailureFallback}, src, tr, sink, fb)
	if w, f, a := len(sink.WrittenIDs()), fb.WrittenIDs(), len(src.Acked()); w != 19 || len(f) != 1 || f[0] != "m-7" || a != 20 {
		t.Fatalf("written %d, fallback %v, acked %d; want 19, [m-7] (a plain failure past its step), 20", w, f, a)
	}
	if got := tr.Attempts("m-3"); got != 4 {
		t.Fatalf("transformer attempts of m-3 = %d, want 4 (3 unavailable, then the answer)", got)
	}
	if st := e.Status().Totals; st.FallbackWritten != 1 || st.Dropped != 0 {
		t.Fatalf("fallback written %d, dropped %d; want 1 and 0", st.FallbackWritten, st.Dropped)
	}
}

// Every message's first write fails, and with one retry step half of them
// fail again and are dropped: the log has warn lines for the retried and
// error lines for the dropped, whose counts add up to the failures, in a
// handful of lines rather than one per message.
func TestPerMessageFailuresAreLoggedWithCounts(t *testing.T) {
	const n = 10_000
	sink := runnertest.NewSink(func(m *runner.Message, attempt int) runner.WriteResult {
		if attempt == 1 || (attempt == 2 && hash(m.ID, "odd")%2 == 1) {
			return runner.WriteResult{Status: runner.WriteFailed, Err: errors.New("broker said no")}
		}
		return runner.WriteResult{}
	})
	core, logs := observer.New(zapcore.InfoLevel)
	src := runnertest.NewSource(runnertest.Messages(n))
	start := time.Now()
	e := run(t, runner.Options{BatchSize: 500, OnFailure: runner.OnFailureDrop, Logger: zap.New(core).Sugar(),
		Retry: runner.RetryPolicy{Interval: time.Microsecond, Steps: 1}}, src, nil, sink, nil)
	took := time.Since(start)
	st := e.Status().Totals
	sum := func(msg string, level zapcore.Level) (lines int, count int64) {
		for _, l := range logs.FilterMessage(msg).All() {
			if l.Level != level || l.ContextMap()["error"] != "broker said no" {
				t.Fatalf("%q at %v with %v", msg, l.Level, l.ContextMap())
			}
			lines++
			count += l.ContextMap()["count"].(int64)
		}
		return lines, count
	}
	retriedLines, retried := sum("sink write failed, retrying", zapcore.WarnLevel)
	droppedLines, dropped := sum("sink write failed, message dropped", zapcore.ErrorLevel)
	if st.Acked != n || dropped != st.SinkDropped || retried != n || dropped == 0 {
		t.Fatalf("logged %d retried and %d dropped; totals %+v", retried, dropped, st)
	}
	// One line at once, then one per period at most, and one at the end.
	maxLines := 2 + int(took/(5*time.Second))
	if retriedLines > maxLines || droppedLines > maxLines {
		t.Fatalf("%d and %d lines in %v, want at most %d each", retriedLines, droppedLines, took, maxLines)
	}
	t.Logf("%d failures retried in %d lines, %d dropped in %d lines", retried, retriedLines, dropped, droppedLines)
}
