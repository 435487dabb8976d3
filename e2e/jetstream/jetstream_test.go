// Package jetstream_test runs the runner binary with MV_SOURCE=jetstream and
// MV_SINK=jetstream against a real nats-server started in the test process
// (127.0.0.1, random port, file store in a temp dir), and counts that every
// input message reaches the output stream exactly once (the output stream
// de-duplicates on Nats-Msg-Id) across a full run, a SIGTERM and restart of
// the runner, and a restart of the server.
package jetstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/monovertex/monovertex/internal/natstest"
	"github.com/monovertex/monovertex/internal/testutil"
)

// fixture is the JetStream pipeline (natstest.Pipeline) as these tests
// run it: no fallback sink, acks waited for 5s, a longer shutdown budget.
type fixture struct{ *natstest.Pipeline }

func setup(t *testing.T) *fixture { return &fixture{natstest.NewPipeline(t)} }

func (f *fixture) env() map[string]string {
	env := f.Env("e2e-jetstream")
	env["MV_JETSTREAM_ACK_WAIT"] = "5s"
	env["MV_SHUTDOWN_TIMEOUT"] = "20s"
	return env
}

// checkExactlyOnce reads every stream and checks that the output holds
// every input message exactly once, with its value, under Nats-Msg-Id
// IN:<input sequence>, and the fallback stream nothing.
func (f *fixture) checkExactlyOnce(n int) {
	f.T.Helper()
	tl := f.Count(n, true)
	tl.MustBeComplete(f.T)
	if len(tl.Out) != n || len(tl.Fallback) != 0 {
		f.T.Fatalf("output stream holds %d of %d input messages, fallback stream %d; want all in the output", len(tl.Out), n, len(tl.Fallback))
	}
}

// stop sends SIGTERM and expects a clean exit.
func (f *fixture) stop(p *testutil.Process) {
	f.T.Helper()
	p.Stop(40 * time.Second)
}

// startUnderLoad publishes a backlog of n/2 messages, then the rest at about
// 5000 a second, starts the runner and waits until a quarter of the n are
// written. The channel gives the paced publisher's result.
func (f *fixture) startUnderLoad(n int) (*testutil.Process, <-chan error) {
	t := f.T
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := f.Publish(ctx, 0, n/2, 2000, 0, 0); err != nil {
		t.Fatal(err)
	}
	published := make(chan error, 1)
	go func() { published <- f.Publish(ctx, n/2, n, 500, 0, 100*time.Millisecond) }()
	p := testutil.StartRunner(t, f.env())
	p.WaitReady(30 * time.Second)
	testutil.WaitFor(t, 60*time.Second, "a quarter of the messages written", func() bool {
		return f.StreamMsgs(natstest.OutStream) >= uint64(n/4)
	})
	return p, published
}

// drain waits for the publisher, for every message in the output, and for
// the runner p to have settled all it read; then it stops p and checks
// that the output holds each input message exactly once. What a stopped
// runner left unacked comes back after MV_JETSTREAM_ACK_WAIT (5s); acks in
// flight when the server went away either fail (the messages come back
// and are written again) or complete late.
func (f *fixture) drain(p *testutil.Process, published <-chan error, n int) {
	t := f.T
	t.Helper()
	if err := <-published; err != nil {
		t.Fatal(err)
	}
	f.WaitSettled(n, 120*time.Second)
	if p.Exited() {
		t.Fatalf("runner exited (%d) before every message was written", p.ExitCode())
	}
	waitSettled(t, p)
	if st, err := p.Status(); err == nil {
		t.Logf("runner totals: read %d, acked %d, written %d, nacked %d, sink errors %d, ack errors %d (reads beyond %d are redeliveries, de-duplicated by the output stream)",
			st.Totals.Read, st.Totals.Acked, st.Totals.Written, st.Totals.Nacked, st.Totals.SinkErrors, st.Totals.AckErrors, n)
	}
	f.stop(p)
	f.checkExactlyOnce(n)
}

// waitSettled waits until the runner acked or nacked every message it read.
// A redelivery of a message still in flight (its ack wait ran out while the
// sink retried through an outage) is read and dropped, as numaflow-core
// drops it: the delivery in flight settles it, so it counts as settled.
func waitSettled(t *testing.T, p *testutil.Process) {
	t.Helper()
	testutil.WaitFor(t, 60*time.Second, "every read message acked or nacked", func() bool {
		st, err := p.Status()
		return err == nil && st.Totals.Read == st.Totals.Acked+st.Totals.Nacked+st.Totals.DuplicateDropped
	})
}

func TestMovesEveryMessageExactlyOnce(t *testing.T) {
	// Both ack modes: confirmed acks (the default) and flushed acks.
	for _, ackSync := range []string{"true", "false"} {
		t.Run("ack sync "+ackSync, func(t *testing.T) {
			f := setup(t)
			const n = 20000
			if err := f.Publish(context.Background(), 0, n, 2000, 0, 0); err != nil {
				t.Fatal(err)
			}
			env := f.env()
			env["MV_JETSTREAM_ACK_SYNC"] = ackSync
			testutil.BuildRunner(t) // keep the build out of the time below
			start := time.Now()
			p := testutil.StartRunner(t, env)
			p.WaitReady(30 * time.Second)
			f.WaitSettled(n, 120*time.Second)
			t.Logf("runner moved %d messages in %v, startup included", n, time.Since(start).Round(time.Millisecond))

			testutil.WaitFor(t, 10*time.Second, "/status pending 0", func() bool {
				st, err := p.Status()
				return err == nil && st.Pending == 0
			})
			waitSettled(t, p)
			st, err := p.Status()
			if err != nil {
				t.Fatal(err)
			}
			if st.Totals.Read != n || st.Totals.Acked != n || st.Totals.Written != n {
				t.Fatalf("runner totals read %d acked %d written %d, want %d each (nothing had a reason to be redelivered)", st.Totals.Read, st.Totals.Acked, st.Totals.Written, n)
			}
			f.stop(p)
			f.checkExactlyOnce(n)
		})
	}
}

func TestSigtermMidStreamThenRestartLosesNothing(t *testing.T) {
	f := setup(t)
	const n = 20000
	// Batches are in flight when the signal comes, and messages keep
	// coming while the runner stops and starts again.
	p, published := f.startUnderLoad(n)
	f.stop(p)
	stoppedAt := f.StreamMsgs(natstest.OutStream)
	pending, ackPending := natstest.ConsumerState(t, f.JS, natstest.InStream, natstest.Consumer)
	// Unacked here are messages a fetch cut short by the shutdown received
	// and handed back with a nak: they wait for the next fetch, not for
	// the ack wait.
	t.Logf("runner stopped by SIGTERM with %d of %d messages written; natstest.Consumer: %d pending, %d unacked or handed back", stoppedAt, n, pending, ackPending)

	p2 := testutil.StartRunner(t, f.env())
	p2.WaitReady(30 * time.Second)
	f.drain(p2, published, n)
}

func TestServerRestartMidRunLosesNothing(t *testing.T) {
	f := setup(t)
	const n = 20000
	// Batches are in flight when the server goes away, and the publisher
	// keeps going through the outage.
	p, published := f.startUnderLoad(n)
	f.Srv.Shutdown()
	if st, err := p.Status(); err == nil {
		t.Logf("server shut down with %d messages written", st.Totals.Written)
	}
	testutil.WaitFor(t, 10*time.Second, "/readyz to report the outage", func() bool {
		code, _ := testutil.Get(t, p.AdminURL+"/readyz")
		return code != 200
	})
	time.Sleep(time.Second) // the runner keeps retrying against a dead server
	if p.Exited() {
		t.Fatalf("runner exited (%d) during the server outage:\n%s", p.ExitCode(), p.Stderr.String())
	}
	f.Srv.Restart(t)
	t.Logf("server restarted on %s (same port and store) after a 1s+ outage", f.Srv.URL())
	p.WaitReady(30 * time.Second)
	f.drain(p, published, n)
}
