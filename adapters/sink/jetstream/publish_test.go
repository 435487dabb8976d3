package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	jssink "github.com/monovertex/monovertex/adapters/sink/jetstream"
	"github.com/monovertex/monovertex/internal/natstest"
	"github.com/monovertex/monovertex/runner"
)

// hostileStream answers the sink's publishes to subject in place of a
// stream, as answer says for each message (by the number in its body), and
// also sends what forge returns to the sink's inbox. It returns how many
// publishes it has seen.
func hostileStream(t *testing.T, srv *natstest.Server, subject string, answer func(n int, m *nats.Msg)) *atomic.Int64 {
	t.Helper()
	nc, _ := srv.Connect(t)
	var seen atomic.Int64
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		seen.Add(1)
		var n int
		if _, err := fmt.Sscanf(string(m.Data), "v%d", &n); err != nil {
			t.Errorf("body %q", m.Data)
			return
		}
		answer(n, m)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return &seen
}

func respond(t *testing.T, m *nats.Msg, body string) {
	if err := m.Respond([]byte(body)); err != nil {
		t.Errorf("respond: %v", err)
	}
}

// TestHostileStreamAnswers: a peer on the subject answers each publish
// with a plain ack, a duplicate ack, an error, garbage, an ack naming no
// stream, an oversized body, two answers, or nothing, and forges answers
// for publishes that do not exist. Only a real ack counts as written, the
// first answer wins, nothing forged counts, and once the write returns no
// publish is left awaiting its ack.
func TestHostileStreamAnswers(t *testing.T) {
	srv := natstest.Start(t)
	cfg := testConfig(srv.URL(), "hostile.out")
	cfg.PublishTimeout = time.Second
	s := newSink(t, cfg, runner.RoleSink)
	prefix := jssink.ReplyPrefix(s)
	forger, _ := srv.Connect(t)
	big := strings.Repeat(" ", 100<<10) + `{"stream":"S","seq":1}`
	hostileStream(t, srv, "hostile.out", func(n int, m *nats.Msg) {
		// Forged answers first: another write's, an index beyond the
		// write, a subject that does not parse, the prefix alone.
		for _, subj := range []string{prefix + "zzzz.0", m.Reply + "999", prefix + "x", prefix, prefix + "0.-1", prefix + "0.1.2"} {
			if err := forger.Publish(subj, []byte(`{"stream":"S","seq":1}`)); err != nil {
				t.Errorf("forge: %v", err)
			}
		}
		_ = forger.Flush()
		switch n % 8 {
		case 0:
			respond(t, m, `{"stream":"S","seq":7}`)
		case 1:
			respond(t, m, `{"stream":"S","seq":7,"duplicate":true}`)
		case 2:
			respond(t, m, `{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"},"stream":"S","seq":0}`)
		case 3:
			respond(t, m, `not json`)
		case 4:
			respond(t, m, `{"seq":3}`)
		case 5:
			respond(t, m, big)
		case 6:
			respond(t, m, `{"error":{"code":500,"description":"first"}}`)
			respond(t, m, `{"stream":"S","seq":8}`)
		case 7:
			// no answer
		}
	})
	const n = 64
	msgs := batch("h", n)
	start := time.Now()
	res := write(t, s, msgs)
	took := time.Since(start)
	for i, r := range res {
		ok := i%8 == 0 || i%8 == 1
		if (r.Status == runner.WriteOK) != ok {
			t.Errorf("message %d (case %d): %s (%v), want written %v", i, i%8, r.Status, r.Err, ok)
			continue
		}
		if ok {
			continue
		}
		var apiErr *jetstream.APIError
		switch i % 8 {
		case 2:
			if !errors.As(r.Err, &apiErr) || apiErr.ErrorCode != 10077 {
				t.Errorf("message %d: %v, want the stream's error 10077", i, r.Err)
			}
		case 6:
			if !strings.Contains(r.Err.Error(), "first") {
				t.Errorf("message %d: %v, want the first answer's error", i, r.Err)
			}
		case 3, 4, 5:
			if !strings.Contains(r.Err.Error(), "invalid JetStream publish ack") {
				t.Errorf("message %d: %v, want an invalid ack", i, r.Err)
			}
		case 7:
			if !strings.Contains(r.Err.Error(), "MV_JETSTREAM_PUBLISH_TIMEOUT") {
				t.Errorf("message %d: %v, want the ack timeout", i, r.Err)
			}
		}
	}
	if took < time.Second || took > 5*time.Second {
		t.Errorf("write took %v; the unanswered ones should fail after the 1 s timeout", took)
	}
	if p, w := jssink.Awaiting(s); p != 0 || w != 0 {
		t.Fatalf("%d publishes awaiting their ack, %d writes tracked after the write returned", p, w)
	}
	t.Logf("first failures: %v | %v | %v | %v", res[2].Err, res[3].Err, res[5].Err, res[7].Err)
}

// TestPublishesAwaitingAcksAreBounded: with MV_JETSTREAM_PUBLISH_MAX_PENDING
// 4 and a stream that answers late, no more than 4 publishes are ever out
// unanswered, and all 40 are written.
func TestPublishesAwaitingAcksAreBounded(t *testing.T) {
	srv := natstest.Start(t)
	cfg := testConfig(srv.URL(), "slow.out")
	cfg.MaxPending = 4
	s := newSink(t, cfg, runner.RoleSink)
	var (
		mu          sync.Mutex
		out, peak   int
		answerLater = make(chan *nats.Msg, 100)
	)
	hostileStream(t, srv, "slow.out", func(_ int, m *nats.Msg) {
		mu.Lock()
		out++
		peak = max(peak, out)
		mu.Unlock()
		answerLater <- m
	})
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case m := <-answerLater:
				time.Sleep(5 * time.Millisecond)
				mu.Lock()
				out--
				mu.Unlock()
				respond(t, m, `{"stream":"S","seq":1}`)
			case <-done:
				return
			}
		}
	}()
	// Two writes at once share the bound.
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() { allOK(t, write(t, s, batch(fmt.Sprint("b", w), 20))) })
	}
	wg.Wait()
	if peak > 4 {
		t.Fatalf("%d publishes unanswered at once, above the bound of 4", peak)
	}
	t.Logf("at most %d publishes unanswered at once", peak)
}

// TestStalledPublishesFail: with the bound full and a stream that never
// answers, the write fails every message within about the timeout (those
// published for want of an ack, the rest for want of room).
func TestStalledPublishesFail(t *testing.T) {
	srv := natstest.Start(t)
	cfg := testConfig(srv.URL(), "mute.out")
	cfg.MaxPending = 4
	cfg.PublishTimeout = 500 * time.Millisecond
	s := newSink(t, cfg, runner.RoleSink)
	seen := hostileStream(t, srv, "mute.out", func(int, *nats.Msg) {})
	start := time.Now()
	res := write(t, s, batch("m", 10))
	took := time.Since(start)
	var timedOut, stalled int
	for i, r := range res {
		switch {
		case r.Status != runner.WriteFailed:
			t.Fatalf("message %d: %s, want failed", i, r.Status)
		case strings.Contains(r.Err.Error(), "awaited their ack"):
			stalled++
		case strings.Contains(r.Err.Error(), "no ack from the stream"):
			timedOut++
		default:
			t.Fatalf("message %d: %v", i, r.Err)
		}
	}
	if timedOut != 4 || stalled != 6 || seen.Load() != 4 {
		t.Fatalf("%d timed out, %d stalled, %d published; want 4, 6, 4", timedOut, stalled, seen.Load())
	}
	if took > 3*time.Second {
		t.Fatalf("write took %v with a 500 ms timeout", took)
	}
	if p, w := jssink.Awaiting(s); p != 0 || w != 0 {
		t.Fatalf("%d publishes awaiting their ack, %d writes tracked", p, w)
	}
}

// TestCancelledWriteLeavesNothingAwaiting: a write whose context ends
// fails its unanswered messages with the context's error and frees their
// room; an answer that comes later is dropped.
func TestCancelledWriteLeavesNothingAwaiting(t *testing.T) {
	srv := natstest.Start(t)
	s := newSink(t, testConfig(srv.URL(), "late.out"), runner.RoleSink)
	held := make(chan *nats.Msg, 10)
	hostileStream(t, srv, "late.out", func(_ int, m *nats.Msg) { held <- m })
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	res, err := s.Write(ctx, batch("c", 5))
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Status != runner.WriteFailed || !errors.Is(r.Err, context.DeadlineExceeded) {
			t.Fatalf("message %d: %s (%v), want failed with the deadline", i, r.Status, r.Err)
		}
	}
	for range 5 {
		respond(t, <-held, `{"stream":"S","seq":1}`)
	}
	time.Sleep(100 * time.Millisecond)
	if p, w := jssink.Awaiting(s); p != 0 || w != 0 {
		t.Fatalf("%d publishes awaiting their ack, %d writes tracked", p, w)
	}
}

// TestNoRespondersIsPublishedAgain: a subject no stream captures yet is
// answered "no responders"; as nats.go does, the sink publishes again
// after 250 ms, twice at most, so a stream that appears meanwhile (or a
// leader that is elected) stores the messages.
func TestNoRespondersIsPublishedAgain(t *testing.T) {
	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	s := newSink(t, testConfig(srv.URL(), "LATE.out"), runner.RoleSink)
	go func() {
		time.Sleep(100 * time.Millisecond)
		createStream(t, js, "LATE")
	}()
	start := time.Now()
	allOK(t, write(t, s, batch("late", 20)))
	if took := time.Since(start); took < 200*time.Millisecond {
		t.Fatalf("written after %v: the stream did not exist for the first publish", took)
	}
	wantStored(t, js, "LATE", 20)
}

// TestLongWriteUnderTheBoundIsNotStalled: a write that lasts longer than
// the publish timeout because the bound keeps it waiting for room (200
// messages, 4 at a time, each answered after 5 ms, a 300 ms timeout) is
// written whole: the timeout bounds each wait for room, not the write.
func TestLongWriteUnderTheBoundIsNotStalled(t *testing.T) {
	srv := natstest.Start(t)
	cfg := testConfig(srv.URL(), "long.out")
	cfg.MaxPending = 4
	cfg.PublishTimeout = 300 * time.Millisecond
	s := newSink(t, cfg, runner.RoleSink)
	hostileStream(t, srv, "long.out", func(_ int, m *nats.Msg) {
		time.Sleep(5 * time.Millisecond)
		respond(t, m, `{"stream":"S","seq":1}`)
	})
	start := time.Now()
	allOK(t, write(t, s, batch("l", 200)))
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Fatalf("written in %v: the write did not outlast the timeout, the test proves nothing", took)
	}
}
