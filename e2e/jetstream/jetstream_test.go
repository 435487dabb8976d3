// Package jetstream_test runs the runner binary with MV_SOURCE=jetstream and
// MV_SINK=jetstream against a real nats-server started in the test process
// (127.0.0.1, random port, file store in a temp dir), and counts that every
// input message reaches the output stream exactly once (the output stream
// de-duplicates on Nats-Msg-Id) across a full run, a SIGTERM and restart of
// the runner, and a restart of the server.
package jetstream_test

import (
	"context"
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/monovertex/monovertex/internal/natstest"
	"github.com/monovertex/monovertex/internal/testutil"
)

const (
	inStream  = "IN"
	outStream = "OUT"
	consumer  = "runner"
)

type fixture struct {
	t   *testing.T
	srv *natstest.Server
	js  jetstream.JetStream
}

func setup(t *testing.T) *fixture {
	t.Helper()
	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	natstest.CreateStream(t, js, jetstream.StreamConfig{
		Name: inStream, Subjects: []string{"in.>"}, Storage: jetstream.FileStorage, Duplicates: 5 * time.Minute,
	})
	natstest.CreateStream(t, js, jetstream.StreamConfig{
		Name: outStream, Subjects: []string{"out.>"}, Storage: jetstream.FileStorage, Duplicates: 5 * time.Minute,
	})
	return &fixture{t: t, srv: srv, js: js}
}

func (f *fixture) env() map[string]string {
	return map[string]string{
		"MV_NAME":                     "e2e-jetstream",
		"MV_SOURCE":                   "jetstream",
		"MV_SINK":                     "jetstream",
		"MV_JETSTREAM_URL":            f.srv.URL(),
		"MV_JETSTREAM_STREAM":         inStream,
		"MV_JETSTREAM_CONSUMER":       consumer,
		"MV_JETSTREAM_SUBJECT":        "out.events",
		"MV_JETSTREAM_ACK_WAIT":       "5s",
		"MV_JETSTREAM_RECONNECT_WAIT": "100ms",
		"MV_READ_BATCH_SIZE":          "500",
		"MV_READ_TIMEOUT":             "200ms",
		"MV_PENDING_INTERVAL":         "200ms",
		"MV_SHUTDOWN_TIMEOUT":         "20s",
	}
}

// publish puts messages [from, to) on the input stream, each with its own
// Nats-Msg-Id so a publish retried across a server outage is stored once.
// It pauses for tick after every batch when tick > 0.
func (f *fixture) publish(ctx context.Context, from, to, batch int, tick time.Duration) error {
	for i := from; i < to; {
		end := min(i+batch, to)
		for j := i; j < end; {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if _, err := f.js.PublishAsync("in.events", []byte("m-"+strconv.Itoa(j)), jetstream.WithMsgID("p-"+strconv.Itoa(j))); err != nil {
				time.Sleep(50 * time.Millisecond) // the server may be restarting
				continue
			}
			j++
		}
		select {
		case <-f.js.PublishAsyncComplete():
		case <-time.After(10 * time.Second):
		}
		// Every message of the chunk must be stored before the next; what is
		// not (its ack lost to an outage) is published again, and its ID
		// keeps it from being stored twice.
		if f.streamMsgs(ctx, inStream) < uint64(end) {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		i = end
		if tick > 0 {
			time.Sleep(tick)
		}
	}
	return nil
}

func (f *fixture) streamMsgs(ctx context.Context, name string) uint64 {
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := f.js.Stream(ictx, name)
	if err != nil {
		return 0
	}
	info, err := st.Info(ictx)
	if err != nil {
		return 0
	}
	return info.State.Msgs
}

// consumerIdle reports whether the runner's consumer has nothing left to
// deliver and nothing unacked.
func (f *fixture) consumerIdle(ctx context.Context) bool {
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := f.js.Consumer(ictx, inStream, consumer)
	if err != nil {
		return false
	}
	info, err := c.Info(ictx)
	return err == nil && info.NumPending == 0 && info.NumAckPending == 0
}

// waitAllMoved waits until the output stream holds n messages and the
// consumer is idle.
func (f *fixture) waitAllMoved(n int, timeout time.Duration) {
	f.t.Helper()
	ctx := context.Background()
	testutil.WaitFor(f.t, timeout, fmt.Sprintf("%d messages in %s and the consumer idle", n, outStream), func() bool {
		return f.streamMsgs(ctx, outStream) >= uint64(n) && f.consumerIdle(ctx)
	})
}

// checkExactlyOnce reads both streams and checks that the output holds
// every input message exactly once, with its value, under Nats-Msg-Id
// IN:<input sequence>.
func (f *fixture) checkExactlyOnce(n int) {
	f.t.Helper()
	in := natstest.ReadAll(f.t, f.js, inStream)
	if len(in) != n {
		f.t.Fatalf("input stream holds %d messages, want %d", len(in), n)
	}
	want := make(map[string]string, n)
	for _, m := range in {
		meta, err := m.Metadata()
		if err != nil {
			f.t.Fatal(err)
		}
		want[fmt.Sprintf("%s:%d", inStream, meta.Sequence.Stream)] = string(m.Data())
	}
	out := natstest.ReadAll(f.t, f.js, outStream)
	seen := make(map[string]int, len(out))
	for _, m := range out {
		id := m.Headers().Get("Nats-Msg-Id")
		seen[id]++
		if v, ok := want[id]; !ok {
			f.t.Fatalf("output message %q matches no input message", id)
		} else if v != string(m.Data()) {
			f.t.Fatalf("output message %s has value %q, want %q", id, m.Data(), v)
		}
	}
	missing := 0
	for id := range want {
		if seen[id] == 0 {
			missing++
		}
	}
	dups := len(out) - len(seen)
	if missing > 0 || dups > 0 || len(out) != n {
		f.t.Fatalf("output stream: %d messages, %d distinct, %d of %d input messages missing, %d stored twice", len(out), len(seen), missing, n, dups)
	}
	f.t.Logf("output stream holds all %d input messages exactly once", n)
}

// stop sends SIGTERM and expects a clean exit.
func (f *fixture) stop(p *testutil.Process) {
	f.t.Helper()
	p.Signal(syscall.SIGTERM)
	if code := p.Wait(40 * time.Second); code != 0 {
		f.t.Fatalf("runner exited with %d after SIGTERM, want 0:\n%s", code, p.Stderr.String())
	}
}

// waitSettled waits until the runner acked or nacked every message it read.
func waitSettled(t *testing.T, p *testutil.Process) {
	t.Helper()
	testutil.WaitFor(t, 60*time.Second, "every read message acked or nacked", func() bool {
		st, err := p.Status()
		return err == nil && st.Totals.Read == st.Totals.Acked+st.Totals.Nacked
	})
}

func TestMovesEveryMessageExactlyOnce(t *testing.T) {
	// Both ack modes: confirmed acks (the default) and flushed acks.
	for _, ackSync := range []string{"true", "false"} {
		t.Run("ack sync "+ackSync, func(t *testing.T) {
			f := setup(t)
			const n = 20000
			if err := f.publish(context.Background(), 0, n, 2000, 0); err != nil {
				t.Fatal(err)
			}
			env := f.env()
			env["MV_JETSTREAM_ACK_SYNC"] = ackSync
			testutil.BuildRunner(t) // keep the build out of the time below
			start := time.Now()
			p := testutil.StartRunner(t, env)
			p.WaitReady(30 * time.Second)
			f.waitAllMoved(n, 120*time.Second)
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
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A backlog, so batches are in flight when the signal comes, then about
	// 5000 messages a second while the runner stops and starts again.
	if err := f.publish(ctx, 0, n/2, 2000, 0); err != nil {
		t.Fatal(err)
	}
	published := make(chan error, 1)
	go func() { published <- f.publish(ctx, n/2, n, 500, 100*time.Millisecond) }()

	p := testutil.StartRunner(t, f.env())
	p.WaitReady(30 * time.Second)
	testutil.WaitFor(t, 60*time.Second, "a quarter of the messages written", func() bool {
		return f.streamMsgs(ctx, outStream) >= n/4
	})
	f.stop(p)
	stoppedAt := f.streamMsgs(ctx, outStream)
	pending, ackPending := natstest.ConsumerState(t, f.js, inStream, consumer)
	// Unacked here are messages a fetch cut short by the shutdown received
	// and handed back with a nak: they wait for the next fetch, not for
	// the ack wait.
	t.Logf("runner stopped by SIGTERM with %d of %d messages written; consumer: %d pending, %d unacked or handed back", stoppedAt, n, pending, ackPending)

	p2 := testutil.StartRunner(t, f.env())
	p2.WaitReady(30 * time.Second)
	if err := <-published; err != nil {
		t.Fatal(err)
	}
	// Anything the stopped runner left unacked comes back after
	// MV_JETSTREAM_ACK_WAIT (5s).
	f.waitAllMoved(n, 120*time.Second)
	waitSettled(t, p2)
	f.stop(p2)
	f.checkExactlyOnce(n)
}

func TestServerRestartMidRunLosesNothing(t *testing.T) {
	f := setup(t)
	const n = 20000
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A backlog, so batches are in flight when the server goes away, and a
	// publisher that keeps going through the outage.
	if err := f.publish(ctx, 0, n/2, 2000, 0); err != nil {
		t.Fatal(err)
	}
	published := make(chan error, 1)
	go func() { published <- f.publish(ctx, n/2, n, 500, 100*time.Millisecond) }()

	p := testutil.StartRunner(t, f.env())
	p.WaitReady(30 * time.Second)
	testutil.WaitFor(t, 60*time.Second, "a quarter of the messages written", func() bool {
		return f.streamMsgs(ctx, outStream) >= n/4
	})
	f.srv.Shutdown()
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
	f.srv.Restart(t)
	t.Logf("server restarted on %s (same port and store) after a 1s+ outage", f.srv.URL())
	p.WaitReady(30 * time.Second)
	if err := <-published; err != nil {
		t.Fatal(err)
	}
	f.waitAllMoved(n, 120*time.Second)
	if p.Exited() {
		t.Fatalf("runner exited (%d) after the server restart", p.ExitCode())
	}
	// Acks in flight when the server went away either fail (the messages
	// come back and are written again) or complete late.
	waitSettled(t, p)
	if st, err := p.Status(); err == nil {
		t.Logf("runner totals: read %d, acked %d, written %d, nacked %d, sink errors %d, ack errors %d (reads beyond %d are redeliveries, de-duplicated by the output stream)",
			st.Totals.Read, st.Totals.Acked, st.Totals.Written, st.Totals.Nacked, st.Totals.SinkErrors, st.Totals.AckErrors, n)
	}
	f.stop(p)
	f.checkExactlyOnce(n)
}
