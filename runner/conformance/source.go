package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"testing"
	"time"

	"github.com/monovertex/monovertex/runner"
)

// RunSource runs the source suite against c.
func RunSource(t *testing.T, c SourceCase) {
	t.Helper()
	if c.Features.RedeliveryWait == 0 {
		c.Features.RedeliveryWait = 30 * time.Second
	}
	c.Features.defaults()
	if c.Features.Generates && c.Produce == nil {
		c.Produce = func(*testing.T, int) [][]byte { return nil }
	}
	f := c.Features
	t.Run("reads every produced message once and acks them", func(t *testing.T) { sourceReadAck(t, c) })
	t.Run("read returns at most max", func(t *testing.T) { sourceReadMax(t, c) })
	if !f.Generates {
		t.Run("read on an empty source returns within its timeout", func(t *testing.T) { sourceEmptyTimeout(t, c) })
	}
	t.Run("read returns when the context is cancelled", func(t *testing.T) { sourceCancel(t, c) })
	if f.Nack {
		t.Run("nacked messages are read again", func(t *testing.T) { sourceNack(t, c) })
	}
	if f.RedeliverAfterClose {
		t.Run("unacked messages are redelivered after close", func(t *testing.T) { sourceRedeliverAfterClose(t, c) })
	}
	runLifecycle(t, f.Lifecycle, c.Peer, c)
}

func (c SourceCase) names() kindNames               { return sourceNames }
func (c SourceCase) newAdapter(t *testing.T) closer { return connected(t, c.New(t)) }

// read is one Read under the call deadline, which adds the call timeout to
// the wait the Read itself asks for.
func read(t *testing.T, c SourceCase, src runner.Source, ctx context.Context, max int, timeout time.Duration) ([]*runner.Message, error) {
	t.Helper()
	return callValue(t, fmt.Sprintf("Read(max=%d, timeout=%v)", max, timeout), timeout+c.Features.CallTimeout, func() ([]*runner.Message, error) {
		return src.Read(ctx, max, timeout)
	})
}

func ack(t *testing.T, c SourceCase, src runner.Source, ctx context.Context, msgs []*runner.Message) error {
	t.Helper()
	return callE(t, fmt.Sprintf("Ack of %d messages", len(msgs)), c.Features.CallTimeout, func() error { return src.Ack(ctx, msgs) })
}

// readN reads until n messages arrived or the deadline passes.
func readN(t *testing.T, c SourceCase, ctx context.Context, src runner.Source, n int, batch int) []*runner.Message {
	t.Helper()
	var got []*runner.Message
	for len(got) < n {
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d messages before the deadline", len(got), n)
		}
		msgs, err := read(t, c, src, ctx, min(batch, n-len(got)), 200*time.Millisecond)
		if err != nil && !errors.Is(err, io.EOF) {
			if ctx.Err() != nil {
				t.Fatalf("read %d of %d messages before the deadline: %v", len(got), n, err)
			}
			t.Logf("read error (retrying): %v", err)
			time.Sleep(50 * time.Millisecond)
		}
		got = append(got, msgs...)
	}
	return got
}

func closeSource(t *testing.T, c SourceCase, src runner.Source) {
	t.Helper()
	closeAdapter(t, c.Features.Lifecycle, src)
}

func sourceReadAck(t *testing.T, c SourceCase) {
	ctx := testContext(t, 60*time.Second)
	src := connected(t, c.New(t))
	defer closeSource(t, c, src)
	const n = 250
	values := c.Produce(t, n)
	got := readN(t, c, ctx, src, n, 100)
	if len(got) != n {
		t.Fatalf("read %d messages, want %d", len(got), n)
	}
	ids := map[string]bool{}
	for _, m := range got {
		if m.ID == "" {
			t.Fatalf("message with an empty ID")
		}
		if ids[m.ID] {
			t.Fatalf("ID %q read twice before any ack or nack", m.ID)
		}
		ids[m.ID] = true
	}
	if c.Features.KeepsValues {
		want := sortedValues(values)
		have := make([][]byte, len(got))
		for i, m := range got {
			have[i] = m.Value
		}
		have = sortedValues(have)
		for i := range want {
			if !bytes.Equal(want[i], have[i]) {
				t.Fatalf("values differ from what was produced: %q vs %q", have[i], want[i])
			}
		}
	}
	if err := ack(t, c, src, ctx, got); err != nil {
		t.Fatalf("ack: %v", err)
	}
	// Nothing more: the acked messages must not come back.
	extra, err := read(t, c, src, ctx, 10, 300*time.Millisecond)
	if err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("read after ack: %v", err)
	}
	for _, m := range extra {
		if ids[m.ID] {
			t.Fatalf("acked message %q was read again", m.ID)
		}
	}
	if c.Features.Pending {
		pr, ok := src.(runner.PendingReader)
		if !ok {
			t.Fatalf("Features.Pending set but the source has no Pending method")
		}
		deadline := time.Now().Add(15 * time.Second)
		for {
			p, err := callValue(t, "Pending", c.Features.CallTimeout, func() (int64, error) { return pr.Pending(ctx) })
			if err == nil && p == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("pending = %d (err %v) after everything was acked, want 0", p, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

func sortedValues(v [][]byte) [][]byte {
	out := append([][]byte(nil), v...)
	sort.Slice(out, func(i, j int) bool { return bytes.Compare(out[i], out[j]) < 0 })
	return out
}

func sourceReadMax(t *testing.T, c SourceCase) {
	ctx := testContext(t, 60*time.Second)
	src := connected(t, c.New(t))
	defer closeSource(t, c, src)
	c.Produce(t, 20)
	var all []*runner.Message
	deadline := time.Now().Add(30 * time.Second)
	for len(all) < 20 && time.Now().Before(deadline) {
		// Never more than 20 in all: a generating source has more to give.
		max := min(3, 20-len(all))
		msgs, err := read(t, c, src, ctx, max, 200*time.Millisecond)
		if err != nil && !errors.Is(err, io.EOF) {
			t.Logf("read error (retrying): %v", err)
		}
		if len(msgs) > max {
			t.Fatalf("Read(max=%d) returned %d messages", max, len(msgs))
		}
		all = append(all, msgs...)
	}
	if len(all) != 20 {
		t.Fatalf("read %d of 20 messages", len(all))
	}
	if err := ack(t, c, src, ctx, all); err != nil {
		t.Fatalf("ack: %v", err)
	}
}

func sourceEmptyTimeout(t *testing.T, c SourceCase) {
	ctx := testContext(t, 30*time.Second)
	src := connected(t, c.New(t))
	defer closeSource(t, c, src)
	start := time.Now()
	msgs, err := read(t, c, src, ctx, 10, 200*time.Millisecond)
	if err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("read on an empty source: %v", err)
	}
	if len(msgs) != 0 {
		t.Fatalf("read %d messages from an empty source", len(msgs))
	}
	// Generous bound: this checks that the timeout is honoured at all, not speed.
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Read with a 200ms timeout took %v", d)
	}
}

func sourceCancel(t *testing.T, c SourceCase) {
	src := connected(t, c.New(t))
	defer closeSource(t, c, src)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = src.Read(ctx, 10, time.Hour)
	}()
	time.Sleep(100 * time.Millisecond)
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("Read with a one-hour timeout did not return after its context was cancelled")
	}
}

func sourceNack(t *testing.T, c SourceCase) {
	ctx := testContext(t, c.Features.RedeliveryWait+60*time.Second)
	src := connected(t, c.New(t))
	defer closeSource(t, c, src)
	c.Produce(t, 10)
	got := readN(t, c, ctx, src, 10, 10)
	nacker, ok := src.(runner.Nacker)
	if !ok {
		t.Fatalf("Features.Nack set but the source has no Nack method")
	}
	back := map[string]bool{}
	for _, m := range got[:5] {
		back[m.ID] = true
	}
	if err := ack(t, c, src, ctx, got[5:]); err != nil {
		t.Fatalf("ack: %v", err)
	}
	if err := callE(t, "Nack of 5 messages", c.Features.CallTimeout, func() error { return nacker.Nack(ctx, got[:5], runner.Nack{}) }); err != nil {
		t.Fatalf("nack: %v", err)
	}
	readBack(t, c, ctx, src, back, "nack", "acked or never nacked", "nacked messages not read again")
}

// readBack reads, within the redelivery wait, every message in want once
// more and acks them. A message not in want read then was redelivered
// wrongly (after what, it was wrong); one of want not read is missing.
func readBack(t *testing.T, c SourceCase, ctx context.Context, src runner.Source, want map[string]bool, after, wrong, missing string) {
	t.Helper()
	rctx, cancel := context.WithTimeout(ctx, c.Features.RedeliveryWait)
	defer cancel()
	again := readN(t, c, rctx, src, len(want), 10)
	for _, m := range again {
		if !want[m.ID] {
			t.Fatalf("after %s, read %q which was %s", after, m.ID, wrong)
		}
		delete(want, m.ID)
	}
	if len(want) != 0 {
		t.Fatalf("%s: %v", missing, want)
	}
	if err := ack(t, c, src, ctx, again); err != nil {
		t.Fatalf("ack redelivered: %v", err)
	}
}

func sourceRedeliverAfterClose(t *testing.T, c SourceCase) {
	ctx := testContext(t, c.Features.RedeliveryWait+60*time.Second)
	src := connected(t, c.New(t))
	c.Produce(t, 10)
	got := readN(t, c, ctx, src, 10, 10)
	if err := ack(t, c, src, ctx, got[:4]); err != nil {
		t.Fatalf("ack: %v", err)
	}
	closeSource(t, c, src)
	unacked := map[string]bool{}
	for _, m := range got[4:] {
		unacked[m.ID] = true
	}
	src2 := connected(t, c.New(t))
	defer closeSource(t, c, src2)
	readBack(t, c, ctx, src2, unacked, "reopen", "acked", "unacked messages not redelivered")
}

// foreignMessages are messages this source never read.
func foreignMessages() []*runner.Message {
	return []*runner.Message{
		{ID: "never-read-1", Value: []byte("x")},
		{ID: ""},
		{ID: "never-read-2", Offset: int64(1) << 40, Value: []byte{0xff}},
	}
}

func (c SourceCase) badInput(t *testing.T) {
	ctx := testContext(t, 60*time.Second)
	src := connected(t, c.New(t))
	defer closeSource(t, c, src)
	// An error is a fine answer; a panic or a hang is not.
	_ = ack(t, c, src, ctx, nil)
	_ = ack(t, c, src, ctx, foreignMessages())
	if nacker, ok := src.(runner.Nacker); ok {
		call(t, "Nack of messages never read", c.Features.CallTimeout, func() { _ = nacker.Nack(ctx, foreignMessages(), runner.Nack{}) })
	}
	c.Produce(t, 5)
	got := readN(t, c, ctx, src, 5, 10)
	for _, m := range got {
		if m.ID == "never-read-1" || m.ID == "never-read-2" || m.ID == "" {
			t.Fatalf("read %q, a message acked or nacked but never read", m.ID)
		}
	}
	if err := ack(t, c, src, ctx, got); err != nil {
		t.Fatalf("ack after acks of messages never read: %v", err)
	}
}

func (c SourceCase) continues(t *testing.T) {
	ctx := testContext(t, 60*time.Second)
	src := connected(t, c.New(t))
	defer closeSource(t, c, src)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	_, _ = read(t, c, src, cancelled, 10, 200*time.Millisecond)
	_ = ack(t, c, src, cancelled, nil)
	if c.Features.BadInput {
		_ = ack(t, c, src, ctx, foreignMessages())
	}
	c.Produce(t, 10)
	got := readN(t, c, ctx, src, 10, 10)
	if err := ack(t, c, src, ctx, got); err != nil {
		t.Fatalf("ack after failed calls: %v", err)
	}
}

func (c SourceCase) inFlight(a closer, ctx context.Context) {
	_, _ = a.(runner.Source).Read(ctx, 10, time.Hour)
}

func (c SourceCase) reconnects(t *testing.T) {
	ctx := testContext(t, c.Features.ReconnectWait+60*time.Second)
	src := connected(t, c.New(t))
	defer closeSource(t, c, src)
	c.Produce(t, 5)
	if err := ack(t, c, src, ctx, readN(t, c, ctx, src, 5, 10)); err != nil {
		t.Fatalf("ack: %v", err)
	}
	awayAndBack(t, c.Peer, func() {
		// While the peer is away a read returns in time; failing is fine.
		for i := 0; i < 2; i++ {
			msgs, _ := read(t, c, src, ctx, 10, 300*time.Millisecond)
			if len(msgs) > 0 {
				_ = ack(t, c, src, ctx, msgs)
			}
		}
	})
	c.Produce(t, 10)
	rctx, cancel := context.WithTimeout(ctx, c.Features.ReconnectWait)
	defer cancel()
	got := readN(t, c, rctx, src, 10, 10)
	if err := ack(t, c, src, ctx, got); err != nil {
		t.Fatalf("ack after the peer came back: %v", err)
	}
}
