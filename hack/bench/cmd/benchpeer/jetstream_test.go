package main

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestJSLoopMovesEveryMessageOnce runs the bare JetStream loop against an
// in-process nats-server: every input message reaches the output once,
// with its payload, and is acked (the work queue is empty afterwards).
func TestJSLoopMovesEveryMessageOnce(t *testing.T) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true, MaxPayload: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(srv.Shutdown)
	nc, js, err := jsConnect(fmt.Sprintf("nats://127.0.0.1:%d", srv.Addr().(*net.TCPAddr).Port))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, cfg := range []jetstream.StreamConfig{
		{Name: "in", Subjects: []string{"in"}, Retention: jetstream.WorkQueuePolicy},
		{Name: "out", Subjects: []string{"out"}},
	} {
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	const n = 53 // not a multiple of the batch: the last fetch is short
	var futures []jetstream.PubAckFuture
	for i := range n {
		f, err := js.PublishAsync("in", []byte(fmt.Sprintf("m-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, f)
	}
	if err := waitPubAcks(ctx, futures); err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, "in", jetstream.ConsumerConfig{Durable: "baseline", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	loopCtx, stop := context.WithCancel(ctx)
	var acked, ackedBytes atomic.Int64
	done := make(chan error, 1)
	go func() { done <- jsLoop(loopCtx, js, cons, "out", 8, true, &acked, &ackedBytes) }()
	for acked.Load() < n && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("jsLoop: %v", err)
	}
	if acked.Load() != n {
		t.Fatalf("acked %d, want %d", acked.Load(), n)
	}
	out, err := js.Stream(ctx, "out")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for i := range n {
		raw, err := out.GetMsg(ctx, uint64(i+1))
		if err != nil {
			t.Fatalf("output message %d: %v", i+1, err)
		}
		seen[string(raw.Data)]++
		// The runner's headers, so the server de-duplicates as for the runner.
		if id := raw.Header.Get(nats.MsgIdHdr); id != fmt.Sprintf("in:%d", i+1) {
			t.Errorf("output message %d has Nats-Msg-Id %q, want in:%d", i+1, id, i+1)
		}
		if _, err := time.Parse(time.RFC3339Nano, raw.Header.Get(natsjsEventTime)); err != nil {
			t.Errorf("output message %d: Mv-Event-Time: %v", i+1, err)
		}
	}
	for i := range n {
		if c := seen[fmt.Sprintf("m-%d", i)]; c != 1 {
			t.Errorf("m-%d reached the output %d times", i, c)
		}
	}
	in, err := js.Stream(ctx, "in")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := in.Info(ctx); err != nil || info.State.Msgs != 0 {
		t.Fatalf("input work queue after the loop: %+v, %v; want every message acked", info.State, err)
	}
	if info, err := out.Info(ctx); err != nil || info.State.Msgs != n {
		t.Fatalf("output holds %+v, %v; want %d", info.State, err, n)
	}
}
