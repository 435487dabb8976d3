package jetstream_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/monovertex/monovertex/adapters/internal/adaptertest"
	"github.com/monovertex/monovertex/internal/natstest"
	"github.com/monovertex/monovertex/runner"
)

func TestUnusableStreamOrConsumerIsAConfigError(t *testing.T) {
	srv, js, _ := serverWithStream(t, "CE")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateOrUpdateConsumer(ctx, "CE", jetstream.ConsumerConfig{Durable: "ackall", AckPolicy: jetstream.AckAllPolicy}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateOrUpdatePushConsumer(ctx, "CE", jetstream.ConsumerConfig{Durable: "push", AckPolicy: jetstream.AckExplicitPolicy, DeliverSubject: "push.here"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		stream, consumer, variable string
	}{
		{"NOPE", "runner", "MV_JETSTREAM_STREAM"},
		{"CE", "ackall", "MV_JETSTREAM_CONSUMER"},
		{"CE", "push", "MV_JETSTREAM_CONSUMER"},
	} {
		cfg := testConfig(srv.URL(), tc.stream)
		cfg.Consumer = tc.consumer
		_, err := connect(ctx, cfg, t.Name(), nil)
		var ce *runner.ConfigError
		if !errors.As(err, &ce) || ce.Var != tc.variable {
			t.Errorf("stream %s consumer %s: %v, want a ConfigError for %s", tc.stream, tc.consumer, err, tc.variable)
		}
	}
	// A server that is not there is no setting error: it may come up.
	_, err := connect(ctx, testConfig("nats://127.0.0.1:1", "CE"), t.Name(), nil)
	var ce *runner.ConfigError
	if err == nil || errors.As(err, &ce) {
		t.Fatalf("unreachable server: %v, want an error that is not a ConfigError", err)
	}
}

func deleteConsumer(t *testing.T, js jetstream.JetStream, stream, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := js.DeleteConsumer(ctx, stream, name); err != nil {
		t.Fatalf("delete consumer: %v", err)
	}
}

func TestDeletedConsumerIsCreatedAgainAndLosesNothing(t *testing.T) {
	_, js, cfg := serverWithStream(t, "DEL")
	cfg.DeliverPolicy = "new" // the case where a blind re-create would skip messages
	src := newSource(t, cfg)
	const n = 2000
	publish(t, js, "DEL.in", n/2, "a")
	seen := map[string]int{}
	count := func(msgs []*runner.Message) {
		for _, m := range msgs {
			seen[string(m.Value)]++
		}
	}
	readUntil(t, src, func() bool { return len(seen) >= n/4 }, count)
	deleteConsumer(t, js, "DEL", "runner")
	publish(t, js, "DEL.in", n/2, "b") // while the consumer is gone
	readUntil(t, src, func() bool { return len(seen) >= n }, count)
	if err := src.Ready(context.Background()); err != nil {
		t.Fatalf("not ready after the consumer was created again: %v", err)
	}
	got := natstest.ConsumerInfo(t, js, "DEL", "runner").Config
	if got.AckWait != cfg.AckWait || got.MaxAckPending != cfg.MaxAckPending || got.AckPolicy != jetstream.AckExplicitPolicy {
		t.Fatalf("created again with %+v", got)
	}
	dups := 0
	for _, c := range seen {
		dups += c - 1
	}
	t.Logf("%d messages read, %d of them again after the consumer came back", len(seen), dups)
}

func TestDeletedConsumerOfSomeoneElseMakesTheSourceNotReadyThenFatal(t *testing.T) {
	_, js, cfg := serverWithStream(t, "OWN")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	owned := jetstream.ConsumerConfig{Durable: "owned", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 2 * time.Second}
	if _, err := js.CreateOrUpdateConsumer(ctx, "OWN", owned); err != nil {
		t.Fatal(err)
	}
	cfg.Consumer = "owned"
	cfg.MissingWait = 1500 * time.Millisecond
	src := newSource(t, cfg)
	publish(t, js, "OWN.in", 10, "v")

	// Deleted and created again by its owner within the bound: reads resume.
	deleteConsumer(t, js, "OWN", "owned")
	if _, err := src.Read(ctx, 10, 100*time.Millisecond); err == nil || runner.IsFatal(err) {
		t.Fatalf("read with the consumer gone: %v, want a retryable error", err)
	}
	if src.Ready(ctx) == nil {
		t.Fatal("ready with the consumer gone")
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, "OWN", owned); err != nil {
		t.Fatal(err)
	}
	got := 0
	for got < 10 {
		msgs, err := src.Read(ctx, 10, 200*time.Millisecond)
		if err != nil {
			t.Fatalf("read after the owner created the consumer again: %v", err)
		}
		got += len(msgs)
		if err := src.Ack(ctx, msgs); err != nil {
			t.Fatal(err)
		}
	}
	if err := src.Ready(ctx); err != nil {
		t.Fatalf("not ready once the consumer is back: %v", err)
	}

	// Deleted for good: fatal once MV_JETSTREAM_CONSUMER_TIMEOUT has passed.
	deleteConsumer(t, js, "OWN", "owned")
	start := time.Now()
	for {
		_, err := src.Read(ctx, 10, 100*time.Millisecond)
		if runner.IsFatal(err) {
			if d := time.Since(start); d < cfg.MissingWait-200*time.Millisecond {
				t.Fatalf("fatal after %v, before the %v bound", d, cfg.MissingWait)
			}
			t.Logf("fatal after %v: %v", time.Since(start).Round(time.Millisecond), err)
			break
		}
		if err == nil {
			t.Fatal("read succeeded with the consumer gone")
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("not fatal after %v: %v", time.Since(start), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestAckToADeletedConsumerIsNotConfirmed(t *testing.T) {
	_, js, cfg := serverWithStream(t, "ACKDEL")
	src := newSource(t, cfg)
	publish(t, js, "ACKDEL.in", 5, "v")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	msgs := adaptertest.ReadN(t, ctx, src, 5, false)
	deleteConsumer(t, js, "ACKDEL", "runner")
	if err := src.Ack(ctx, msgs); err == nil {
		t.Fatal("acks to a deleted consumer were reported confirmed")
	}
}
