package jetstream_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	jssource "github.com/monovertex/monovertex/adapters/source/jetstream"
	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/runnertest"
)

// slowFirstWrite holds the first write for longer than the ack wait, so
// the server hands the batch out again while the runner still has it.
type slowFirstWrite struct {
	*runnertest.Sink
	calls atomic.Int32
	hold  time.Duration
}

func (s *slowFirstWrite) Write(ctx context.Context, msgs []*runner.Message) ([]runner.WriteResult, error) {
	if s.calls.Add(1) == 1 {
		time.Sleep(s.hold)
	}
	return s.Sink.Write(ctx, msgs)
}

// TestARedeliveryInFlightIsDropped: without in-progress acks, a batch held
// past the ack wait is delivered again by the server while the runner
// still writes it; the engine drops those deliveries, as numaflow-core's
// tracker does, each message is written once, and the first delivery's
// ack settles it on the server (an explicit ack of an earlier delivery
// counts: nats-server deletes the pending sequence whichever delivery
// acks it).
func TestARedeliveryInFlightIsDropped(t *testing.T) {
	const n = 20
	_, js, cfg := serverWithStream(t, "RIF")
	cfg.InProgress = false
	cfg.AckWait = time.Second
	src := newSource(t, cfg)
	publish(t, js, "RIF.in", n, "r")
	sink := &slowFirstWrite{Sink: runnertest.NewSink(nil), hold: 2500 * time.Millisecond}
	e, err := runner.NewPipeline(runner.Options{BatchSize: n, ReadTimeout: 100 * time.Millisecond}, runner.Pipeline{Source: src, Sink: sink})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	deadline := time.Now().Add(30 * time.Second)
	for e.Status().Totals.Acked < n {
		if time.Now().After(deadline) {
			t.Fatalf("not all acked: totals %+v", e.Status().Totals)
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitPending(t, src, 0)
	time.Sleep(1500 * time.Millisecond) // past another ack wait: nothing comes back
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	st := e.Status().Totals
	t.Logf("totals %+v", st)
	for seq := 1; seq <= n; seq++ {
		if a := sink.Attempts(fmt.Sprintf("RIF:%d", seq)); a != 1 {
			t.Fatalf("RIF:%d written %d times, want 1", seq, a)
		}
	}
	if st.DuplicateDropped < n || st.Written != n || st.Acked != n || st.Read != st.Written+st.DuplicateDropped {
		t.Fatalf("totals %+v: want at least %d deliveries dropped as in flight, %d written and acked, read = written + dropped", st, n, n)
	}
}

// TestDroppedDeliveriesGetNoInProgress: a delivery the engine drops as in
// flight is never acked or nacked, so the source must stop sending
// in-progress acks for it when told; the ones it keeps stay held.
func TestDroppedDeliveriesGetNoInProgress(t *testing.T) {
	_, js, cfg := serverWithStream(t, "DIP")
	src := newSource(t, cfg) // in-progress acks on
	publish(t, js, "DIP.in", 4, "d")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var got []*runner.Message
	for len(got) < 4 {
		msgs, err := src.Read(ctx, 4-len(got), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, msgs...)
	}
	if n := jssource.HeldCount(src); n != 4 {
		t.Fatalf("%d deliveries held after the read, want 4", n)
	}
	src.Dropped(got[:3])
	if n := jssource.HeldCount(src); n != 1 {
		t.Fatalf("%d deliveries held after three were dropped, want 1", n)
	}
	if err := src.Ack(ctx, got); err != nil {
		t.Fatal(err)
	}
	if n := jssource.HeldCount(src); n != 0 {
		t.Fatalf("%d deliveries held after the ack, want 0", n)
	}
}
