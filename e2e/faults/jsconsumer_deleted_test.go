package faults_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/monovertex/monovertex/internal/testutil"
)

func (f *jsFixture) deleteConsumer() {
	f.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.JS.DeleteConsumer(ctx, inStream, consumer); err != nil {
		f.T.Fatalf("delete consumer: %v", err)
	}
}

// TestJetStreamConsumerDeletedMidRun deletes the runner's durable consumer
// (nats consumer rm) while it moves messages, twice, and publishes more
// while it is gone. The runner created the consumer, so it creates it
// again with the same settings, starting after the ack floor: the output
// must end with every input message exactly once.
func TestJetStreamConsumerDeletedMidRun(t *testing.T) {
	n := pick(20_000, 100_000)
	f := newJS(t)
	f.PublishAll(n/2, 64)
	p := startRunner(t, f.Env("faults"))
	var recoveries []time.Duration
	for k, at := range []int{n / 8, n / 3} {
		testutil.WaitFor(t, 60*time.Second, fmt.Sprintf("%d written", at), func() bool { return f.StreamMsgs(outStream) >= uint64(at) })
		f.deleteConsumer()
		deleted := time.Now()
		outAt := f.StreamMsgs(outStream)
		if k == 0 {
			if err := f.Publish(context.Background(), n/2, n, 1000, 64, 0); err != nil {
				t.Fatal(err)
			}
		}
		testutil.WaitFor(t, 60*time.Second, "the output to grow after the consumer was deleted", func() bool { return f.StreamMsgs(outStream) > outAt })
		recoveries = append(recoveries, time.Since(deleted))
	}
	f.WaitSettled(n, 180*time.Second)
	if code := p.Readyz(); code != 200 {
		t.Fatalf("/readyz %d after the consumer came back", code)
	}
	tl := f.Count(n, true)
	tl.MustBeComplete(t)
	stopClean(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := f.JS.Consumer(ctx, inStream, consumer)
	if err != nil {
		t.Fatal(err)
	}
	cc := c.CachedInfo().Config
	if cc.AckWait != 3*time.Second || cc.AckPolicy != jetstream.AckExplicitPolicy {
		t.Fatalf("consumer created again with %+v", cc)
	}
	t.Logf("recovery after each delete: %v", recoveries)
	report(t, result{
		Scenario: "JetStream consumer deleted mid-run x2 (runner-created), half the input published while gone", Messages: n, Lost: tl.Lost,
		Duplicated: fmt.Sprintf("0 stored; %d published twice", tl.DuplicatePublish),
		Recovery:   fmt.Sprintf("%s, %s", round(recoveries[0]), round(recoveries[1])),
		Notes:      "created again with the same settings from the ack floor; delete to output growing again",
	})
}

// TestJetStreamForeignConsumerDeletedExitsOne runs on a consumer its owner
// created: when it is deleted the runner may not create it again, so it
// reports not ready and exits 1 after MV_JETSTREAM_CONSUMER_TIMEOUT. Once
// the owner creates the consumer again, a new runner delivers the rest:
// every input message in the output exactly once.
func TestJetStreamForeignConsumerDeletedExitsOne(t *testing.T) {
	n := pick(10_000, 50_000)
	f := newJS(t)
	owned := jetstream.ConsumerConfig{Durable: consumer, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 3 * time.Second, MaxAckPending: 20000}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := f.JS.CreateOrUpdateConsumer(ctx, inStream, owned); err != nil {
		t.Fatal(err)
	}
	f.PublishAll(n, 64)
	env := f.Env("faults")
	env["MV_JETSTREAM_CONSUMER_TIMEOUT"] = "3s"
	p := startRunner(t, env)
	testutil.WaitFor(t, 60*time.Second, "a fifth written", func() bool { return f.StreamMsgs(outStream) >= uint64(n/5) })
	f.deleteConsumer()
	deleted := time.Now()
	testutil.WaitFor(t, 10*time.Second, "/readyz to report the consumer missing", func() bool { return p.Readyz() == 503 || p.Exited() })
	notReady := time.Since(deleted)
	code := p.Wait(30 * time.Second)
	took := time.Since(deleted)
	if code != 1 {
		t.Fatalf("runner exited %d with its consumer gone, want 1", code)
	}
	if took < 3*time.Second || took > 15*time.Second {
		t.Fatalf("runner exited %v after the delete, want about MV_JETSTREAM_CONSUMER_TIMEOUT=3s", took)
	}
	// The owner creates it again, from the start: the output stream
	// de-duplicates what is delivered twice.
	if _, err := f.JS.CreateOrUpdateConsumer(ctx, inStream, owned); err != nil {
		t.Fatal(err)
	}
	tl, _ := f.restartAndCount(t, env, n, p)
	report(t, result{
		Scenario: "JetStream consumer of another owner deleted mid-run", Messages: n, Lost: tl.Lost,
		Duplicated: fmt.Sprintf("0 stored; %d published twice", tl.DuplicatePublish),
		Recovery:   fmt.Sprintf("not ready after %s, exit %d after %s", round(notReady), code, round(took)),
		Notes:      "MV_JETSTREAM_CONSUMER_TIMEOUT=3s; owner re-creates it, a new runner delivers the rest",
	})
}
