package conformance

import (
	"bytes"
	"context"
	"errors"
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
	t.Run("reads every produced message once and acks them", func(t *testing.T) { sourceReadAck(t, c) })
	t.Run("read returns at most max", func(t *testing.T) { sourceReadMax(t, c) })
	t.Run("read on an empty source returns within its timeout", func(t *testing.T) { sourceEmptyTimeout(t, c) })
	t.Run("read returns when the context is cancelled", func(t *testing.T) { sourceCancel(t, c) })
	if c.Features.Nack {
		t.Run("nacked messages are read again", func(t *testing.T) { sourceNack(t, c) })
	}
	if c.Features.RedeliverAfterClose {
		t.Run("unacked messages are redelivered after close", func(t *testing.T) { sourceRedeliverAfterClose(t, c) })
	}
}

// readN reads until n messages arrived or the deadline passes.
func readN(t *testing.T, ctx context.Context, src runner.Source, n int, batch int) []*runner.Message {
	t.Helper()
	var got []*runner.Message
	for len(got) < n {
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d messages before the deadline", len(got), n)
		}
		msgs, err := src.Read(ctx, min(batch, n-len(got)), 200*time.Millisecond)
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

func closeSource(t *testing.T, src runner.Source) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := src.Close(ctx); err != nil {
		t.Errorf("close: %v", err)
	}
}

func sourceReadAck(t *testing.T, c SourceCase) {
	ctx := testContext(t, 60*time.Second)
	src := c.New(t)
	defer closeSource(t, src)
	const n = 250
	values := c.Produce(t, n)
	got := readN(t, ctx, src, n, 100)
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
	if err := src.Ack(ctx, got); err != nil {
		t.Fatalf("ack: %v", err)
	}
	// Nothing more: the acked messages must not come back.
	extra, err := src.Read(ctx, 10, 300*time.Millisecond)
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
			p, err := pr.Pending(ctx)
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
	src := c.New(t)
	defer closeSource(t, src)
	c.Produce(t, 20)
	var all []*runner.Message
	deadline := time.Now().Add(30 * time.Second)
	for len(all) < 20 && time.Now().Before(deadline) {
		msgs, err := src.Read(ctx, 3, 200*time.Millisecond)
		if err != nil && !errors.Is(err, io.EOF) {
			t.Logf("read error (retrying): %v", err)
		}
		if len(msgs) > 3 {
			t.Fatalf("Read(max=3) returned %d messages", len(msgs))
		}
		all = append(all, msgs...)
	}
	if len(all) != 20 {
		t.Fatalf("read %d of 20 messages", len(all))
	}
	if err := src.Ack(ctx, all); err != nil {
		t.Fatalf("ack: %v", err)
	}
}

func sourceEmptyTimeout(t *testing.T, c SourceCase) {
	ctx := testContext(t, 30*time.Second)
	src := c.New(t)
	defer closeSource(t, src)
	start := time.Now()
	msgs, err := src.Read(ctx, 10, 200*time.Millisecond)
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
	src := c.New(t)
	defer closeSource(t, src)
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
	src := c.New(t)
	defer closeSource(t, src)
	c.Produce(t, 10)
	got := readN(t, ctx, src, 10, 10)
	nacker, ok := src.(runner.Nacker)
	if !ok {
		t.Fatalf("Features.Nack set but the source has no Nack method")
	}
	back := map[string]bool{}
	for _, m := range got[:5] {
		back[m.ID] = true
	}
	if err := src.Ack(ctx, got[5:]); err != nil {
		t.Fatalf("ack: %v", err)
	}
	if err := nacker.Nack(ctx, got[:5], 0); err != nil {
		t.Fatalf("nack: %v", err)
	}
	rctx, cancel := context.WithTimeout(ctx, c.Features.RedeliveryWait)
	defer cancel()
	again := readN(t, rctx, src, 5, 10)
	for _, m := range again {
		if !back[m.ID] {
			t.Fatalf("after nack, read %q which was acked or never nacked", m.ID)
		}
		delete(back, m.ID)
	}
	if len(back) != 0 {
		t.Fatalf("nacked messages not read again: %v", back)
	}
	if err := src.Ack(ctx, again); err != nil {
		t.Fatalf("ack redelivered: %v", err)
	}
}

func sourceRedeliverAfterClose(t *testing.T, c SourceCase) {
	ctx := testContext(t, c.Features.RedeliveryWait+60*time.Second)
	src := c.New(t)
	c.Produce(t, 10)
	got := readN(t, ctx, src, 10, 10)
	if err := src.Ack(ctx, got[:4]); err != nil {
		t.Fatalf("ack: %v", err)
	}
	closeSource(t, src)
	unacked := map[string]bool{}
	for _, m := range got[4:] {
		unacked[m.ID] = true
	}
	src2 := c.New(t)
	defer closeSource(t, src2)
	rctx, cancel := context.WithTimeout(ctx, c.Features.RedeliveryWait)
	defer cancel()
	again := readN(t, rctx, src2, 6, 10)
	for _, m := range again {
		if !unacked[m.ID] {
			t.Fatalf("after reopen, read %q which was acked", m.ID)
		}
		delete(unacked, m.ID)
	}
	if len(unacked) != 0 {
		t.Fatalf("unacked messages not redelivered: %v", unacked)
	}
	if err := src2.Ack(ctx, again); err != nil {
		t.Fatalf("ack redelivered: %v", err)
	}
}
