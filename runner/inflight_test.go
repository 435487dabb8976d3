package runner_test

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/runnertest"
)

// scriptedSource hands out, on its k-th read, the IDs script[k] as fresh
// Messages (a delivery of an ID in flight is a new Message with the same
// ID, as from a Numaflow source that reads whatever is not acked), then
// nothing, and io.EOF once everything was acked.
type scriptedSource struct {
	mu         sync.Mutex
	script     [][]string
	reads      int
	ids        map[string]bool
	acked      map[string]int
	deliveries int
	released   atomic.Int64
}

func (s *scriptedSource) RedeliversInFlight() bool { return true }

func (s *scriptedSource) Read(ctx context.Context, max int, timeout time.Duration) ([]*runner.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reads < len(s.script) {
		var out []*runner.Message
		for _, id := range s.script[s.reads] {
			s.ids[id] = true
			out = append(out, &runner.Message{ID: id, Value: []byte(id), Release: func() { s.released.Add(1) }})
		}
		s.reads++
		s.deliveries += len(out)
		return out, nil
	}
	if len(s.acked) == len(s.ids) {
		return nil, io.EOF
	}
	s.mu.Unlock()
	time.Sleep(time.Millisecond)
	s.mu.Lock()
	return nil, nil
}

func (s *scriptedSource) Ack(_ context.Context, msgs []*runner.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		s.acked[m.ID]++
	}
	return nil
}

func (s *scriptedSource) Close(context.Context) error { return nil }

func ids(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("m-%d", i))
	}
	return out
}

// TestADeliveryInFlightIsDropped: the second read delivers the first
// read's ten messages again while the sink still holds them, and ten new
// ones. The ten are dropped (as numaflow-core's tracker drops them),
// counted, and their payloads given back; each of the twenty messages is
// written once and acked once, and the run ends with nothing in flight.
func TestADeliveryInFlightIsDropped(t *testing.T) {
	for _, streaming := range []bool{false, true} {
		t.Run(fmt.Sprintf("streaming=%v", streaming), func(t *testing.T) {
			src := &scriptedSource{script: [][]string{ids(0, 10), append(ids(0, 10), ids(10, 20)...)}, ids: map[string]bool{}, acked: map[string]int{}}
			gate := make(chan struct{})
			sink := runnertest.NewSink(nil)
			held := writeGate{sink, gate}
			opts := runner.Options{Name: "mv", BatchSize: 20, InflightBatches: 4, MessageIDs: runner.NumaflowIDs}
			if streaming {
				opts.Streaming, opts.Concurrency = true, 40
			}
			e, err := runner.NewPipeline(opts, runner.Pipeline{Source: src, Sink: held})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- e.Run(ctx) }()
			deadline := time.Now().Add(30 * time.Second)
			for e.Status().Totals.DuplicateDropped < 10 {
				if time.Now().After(deadline) {
					t.Fatalf("the in-flight deliveries were not dropped: totals %+v", e.Status().Totals)
				}
				time.Sleep(time.Millisecond)
			}
			close(gate)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			st := e.Status().Totals
			for _, id := range ids(0, 20) {
				if a := sink.Attempts("mv-" + id + "-0"); a != 1 {
					t.Fatalf("%s offered to the sink %d times, want 1", id, a)
				}
				if src.acked[id] != 1 {
					t.Fatalf("%s acked %d times, want 1", id, src.acked[id])
				}
			}
			if st.Read != 30 || st.DuplicateDropped != 10 || st.Dropped != 10 || st.Acked != 20 || st.Written != 20 {
				t.Fatalf("totals %+v, want read 30, duplicate_dropped = dropped = 10, acked = written = 20", st)
			}
			if got := src.released.Load(); got != 30 {
				t.Fatalf("%d payloads given back of 30 deliveries", got)
			}
			if n := runner.InflightCount(e); n != 0 {
				t.Fatalf("%d source IDs left in flight after the run", n)
			}
		})
	}
}

// writeGate holds every write until gate is closed.
type writeGate struct {
	*runnertest.Sink
	gate chan struct{}
}

func (w writeGate) Write(ctx context.Context, msgs []*runner.Message) ([]runner.WriteResult, error) {
	<-w.gate
	return w.Sink.Write(ctx, msgs)
}

// TestNackedMessagesAreReadAgain: a message handed back leaves the set of
// messages in flight before the nack, so its redelivery is processed, not
// taken for a duplicate.
func TestNackedMessagesAreReadAgain(t *testing.T) {
	const n = 300
	src := runnertest.NewSource(runnertest.Messages(n))
	sink := runnertest.NewSink(func(m *runner.Message, attempt int) runner.WriteResult {
		if num(m.ID)%3 == 0 && attempt == 1 {
			return runner.WriteResult{Status: runner.WriteNack}
		}
		return runner.WriteResult{}
	})
	e, err := runPipeline(t, runner.Options{BatchSize: 32}, runner.Pipeline{Source: redelivering{src}, Sink: sink})
	if err != nil {
		t.Fatal(err)
	}
	if st := e.Status().Totals; st.DuplicateDropped != 0 || st.Written != n || st.Acked != n || st.Nacked != n/3 || len(src.Acked()) != n {
		t.Fatalf("totals %+v, %d acked by the source", st, len(src.Acked()))
	}
	if n := runner.InflightCount(e); n != 0 {
		t.Fatalf("%d source IDs left in flight after the run", n)
	}
}

// ackFailingSource delivers m-0, refuses the first acks, and after each
// refused ack delivers m-0 again, as a source redelivers what it did not
// take the ack of.
type ackFailingSource struct {
	mu                sync.Mutex
	due, failAcks     int
	deliveries, acked int
}

func (s *ackFailingSource) RedeliversInFlight() bool { return true }

func (s *ackFailingSource) Read(ctx context.Context, max int, timeout time.Duration) ([]*runner.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.acked > 0:
		return nil, io.EOF
	case s.due > 0:
		s.due--
		s.deliveries++
		return []*runner.Message{{ID: "m-0", Value: []byte("v")}}, nil
	}
	s.mu.Unlock()
	time.Sleep(time.Millisecond)
	s.mu.Lock()
	return nil, nil
}

func (s *ackFailingSource) Ack(_ context.Context, msgs []*runner.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failAcks > 0 {
		s.failAcks--
		if s.failAcks%5 == 0 {
			s.due++ // the engine gives up after five tries
		}
		return fmt.Errorf("ack refused")
	}
	s.acked++
	return nil
}

func (s *ackFailingSource) Close(context.Context) error { return nil }

// TestAnAckGivenUpLeavesTheSet: an ack the engine gives up on (five
// refusals) takes the message out of the set all the same, so the
// source's redelivery is processed, not dropped as in flight.
func TestAnAckGivenUpLeavesTheSet(t *testing.T) {
	src := &ackFailingSource{due: 1, failAcks: 5}
	sink := runnertest.NewSink(nil)
	e, err := runPipeline(t, runner.Options{BatchSize: 8}, runner.Pipeline{Source: src, Sink: sink})
	if err != nil {
		t.Fatal(err)
	}
	st := e.Status().Totals
	if src.deliveries != 2 || src.acked != 1 || sink.Attempts("m-0") != 2 || st.DuplicateDropped != 0 || st.AckErrors != 5 {
		t.Fatalf("%d deliveries, %d acks taken, %d writes, totals %+v: want 2, 1, 2, no drops, 5 ack errors", src.deliveries, src.acked, sink.Attempts("m-0"), st)
	}
	if n := runner.InflightCount(e); n != 0 {
		t.Fatalf("%d source IDs left in flight after the run", n)
	}
}

// redelivering is a runnertest.Source that says it may redeliver in
// flight, which turns the engine's check on.
type redelivering struct{ *runnertest.Source }

func (redelivering) RedeliversInFlight() bool { return true }
