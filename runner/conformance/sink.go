package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/monovertex/monovertex/runner"
)

// RunSink runs the sink suite against c.
func RunSink(t *testing.T, c SinkCase) {
	t.Helper()
	if c.Features.MaxPayload == 0 {
		c.Features.MaxPayload = 1 << 20
	}
	c.Features.defaults()
	f := c.Features
	t.Run("writes every message with its contents", func(t *testing.T) { sinkWriteAll(t, c) })
	t.Run("an empty batch is fine", func(t *testing.T) { sinkEmpty(t, c) })
	t.Run("large payloads arrive whole", func(t *testing.T) { sinkLarge(t, c) })
	t.Run("concurrent batches all arrive", func(t *testing.T) { sinkConcurrent(t, c) })
	t.Run("a cancelled write never reports unwritten messages as written", func(t *testing.T) { sinkCancelled(t, c) })
	if f.AnswersFailure {
		t.Run("messages the peer refuses are reported failed, the rest written", func(t *testing.T) { sinkAnswersFailure(t, c) })
	}
	runLifecycle(t, f.Lifecycle, c.Peer, c)
}

func (c SinkCase) names() kindNames               { return sinkNames }
func (c SinkCase) newAdapter(t *testing.T) closer { return connected(t, c.New(t)) }

func testMessages(prefix string, n, size int) []*runner.Message {
	msgs := make([]*runner.Message, n)
	base := time.UnixMilli(1_700_000_000_000)
	for i := range msgs {
		v := payload(i, size)
		copy(v, fmt.Sprintf("%s-%d:", prefix, i))
		msgs[i] = &runner.Message{
			ID:        fmt.Sprintf("%s-%d", prefix, i),
			Keys:      []string{fmt.Sprintf("key%d", i%3)},
			Value:     v,
			EventTime: base.Add(time.Duration(i) * time.Millisecond),
			Headers:   map[string]string{"origin": "conformance"},
		}
	}
	return msgs
}

// write is one Write under the call deadline.
func write(t *testing.T, c SinkCase, s runner.Sink, ctx context.Context, msgs []*runner.Message) ([]runner.WriteResult, error) {
	t.Helper()
	return callValue(t, fmt.Sprintf("Write of %d messages", len(msgs)), c.Features.CallTimeout, func() ([]runner.WriteResult, error) {
		return s.Write(ctx, msgs)
	})
}

// waitReceived waits until every wanted ID has arrived and returns what did.
// For a sink that keeps nothing it returns nil at once.
func waitReceived(t *testing.T, c SinkCase, want []*runner.Message) map[string]*runner.Message {
	t.Helper()
	if c.Received == nil {
		return nil
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := map[string]*runner.Message{}
		for _, m := range c.Received(t) {
			got[m.ID] = m
		}
		missing := 0
		for _, m := range want {
			if got[m.ID] == nil {
				missing++
			}
		}
		if missing == 0 {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d written messages never arrived", missing, len(want))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func checkWrite(t *testing.T, c SinkCase, s runner.Sink, msgs []*runner.Message) {
	t.Helper()
	ctx := testContext(t, 60*time.Second)
	res, err := write(t, c, s, ctx, msgs)
	if err != nil {
		t.Fatalf("write %d messages: %v", len(msgs), err)
	}
	if len(res) != len(msgs) {
		t.Fatalf("write returned %d results for %d messages", len(res), len(msgs))
	}
	for i, r := range res {
		if r.Status != runner.WriteOK {
			t.Fatalf("message %s: status %s (%v), want ok", msgs[i].ID, r.Status, r.Err)
		}
	}
}

func sinkWriteAll(t *testing.T, c SinkCase) {
	s := connected(t, c.New(t))
	defer closeAdapter(t, c.Features.Lifecycle, s)
	msgs := testMessages("all", 200, 64)
	checkWrite(t, c, s, msgs)
	got := waitReceived(t, c, msgs)
	if got == nil {
		return
	}
	for _, m := range msgs {
		r := got[m.ID]
		if !bytes.Equal(r.Value, m.Value) {
			t.Fatalf("message %s: value %q, want %q", m.ID, r.Value, m.Value)
		}
		if c.Features.KeepsKeys && fmt.Sprint(r.Keys) != fmt.Sprint(m.Keys) {
			t.Fatalf("message %s: keys %v, want %v", m.ID, r.Keys, m.Keys)
		}
		if c.Features.KeepsEventTime && r.EventTime.UnixMilli() != m.EventTime.UnixMilli() {
			t.Fatalf("message %s: event time %v, want %v", m.ID, r.EventTime, m.EventTime)
		}
		if c.Features.KeepsHeaders && r.Headers["origin"] != "conformance" {
			t.Fatalf("message %s: headers %v, want origin=conformance", m.ID, r.Headers)
		}
	}
}

func sinkEmpty(t *testing.T, c SinkCase) {
	s := connected(t, c.New(t))
	defer closeAdapter(t, c.Features.Lifecycle, s)
	res, err := write(t, c, s, testContext(t, 30*time.Second), nil)
	if err != nil || len(res) != 0 {
		t.Fatalf("write of an empty batch: %d results, %v", len(res), err)
	}
}

func sinkLarge(t *testing.T, c SinkCase) {
	s := connected(t, c.New(t))
	defer closeAdapter(t, c.Features.Lifecycle, s)
	msgs := testMessages("large", 3, c.Features.MaxPayload)
	checkWrite(t, c, s, msgs)
	got := waitReceived(t, c, msgs)
	if got == nil {
		return
	}
	for _, m := range msgs {
		if !bytes.Equal(got[m.ID].Value, m.Value) {
			t.Fatalf("message %s: %d bytes arrived, want %d identical bytes", m.ID, len(got[m.ID].Value), len(m.Value))
		}
	}
}

func sinkConcurrent(t *testing.T, c SinkCase) {
	s := connected(t, c.New(t))
	defer closeAdapter(t, c.Features.Lifecycle, s)
	batches := make([][]*runner.Message, 4)
	var all []*runner.Message
	for g := range batches {
		batches[g] = testMessages(fmt.Sprintf("conc%d", g), 100, 32)
		all = append(all, batches[g]...)
	}
	concurrently(t, len(batches), func(g int) error {
		msgs := batches[g]
		res, err := tryValue("concurrent Write", c.Features.CallTimeout, func() ([]runner.WriteResult, error) {
			return s.Write(context.Background(), msgs)
		})
		if err != nil {
			return err
		}
		for i, r := range res {
			if r.Status != runner.WriteOK {
				return fmt.Errorf("message %s: %s %v", msgs[i].ID, r.Status, r.Err)
			}
		}
		return nil
	})
	waitReceived(t, c, all)
}

// okOnes returns the messages res reports written, failing on a result
// count that does not match.
func okOnes(t *testing.T, msgs []*runner.Message, res []runner.WriteResult) []*runner.Message {
	t.Helper()
	if len(res) != len(msgs) {
		t.Fatalf("write returned %d results for %d messages", len(res), len(msgs))
	}
	var ok []*runner.Message
	for i, r := range res {
		if r.Status == runner.WriteOK {
			ok = append(ok, msgs[i])
		}
	}
	return ok
}

func sinkCancelled(t *testing.T, c SinkCase) {
	s := connected(t, c.New(t))
	defer closeAdapter(t, c.Features.Lifecycle, s)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	msgs := testMessages("cancelled", 20, 16)
	res, err := write(t, c, s, ctx, msgs)
	if err != nil {
		return // refusing the whole call is correct
	}
	// Whatever it reported written must really be there.
	waitReceived(t, c, okOnes(t, msgs, res))
}

func sinkAnswersFailure(t *testing.T, c SinkCase) {
	s := connected(t, c.New(t))
	defer closeAdapter(t, c.Features.Lifecycle, s)
	msgs := testMessages("answer", 20, 32)
	for i := 0; i < len(msgs); i += 3 {
		msgs[i].Value = []byte(fmt.Sprintf("fail-%d", i))
	}
	res, err := write(t, c, s, testContext(t, 60*time.Second), msgs)
	if err != nil {
		t.Fatalf("write of a batch some of whose messages the peer refuses: %v; want a result per message", err)
	}
	ok := okOnes(t, msgs, res)
	for i, r := range res {
		refused := strings.HasPrefix(string(msgs[i].Value), "fail")
		switch {
		case refused && r.Status == runner.WriteFailed && r.Err == nil:
			t.Fatalf("message %s: failed without an error to say why", msgs[i].ID)
		case refused && r.Status != runner.WriteFailed && r.Status != runner.WriteFallback:
			t.Fatalf("message %s, refused by the peer: status %s, want failed or fallback", msgs[i].ID, r.Status)
		case !refused && r.Status != runner.WriteOK:
			t.Fatalf("message %s, accepted by the peer: status %s (%v), want ok", msgs[i].ID, r.Status, r.Err)
		}
	}
	waitReceived(t, c, ok)
}

// oddMessages are messages at the edges of what a Message may hold; a sink
// must write each or fail it, one by one.
func oddMessages(prefix string) []*runner.Message {
	return []*runner.Message{
		{ID: prefix + "-empty", Value: []byte{}, EventTime: time.UnixMilli(1_700_000_000_000)},
		{ID: prefix + "-nil", EventTime: time.UnixMilli(1_700_000_000_000)},
		{ID: prefix + "-binary", Value: []byte{0xff, 0xfe, 0x00, 0x80}, Keys: []string{""}, EventTime: time.UnixMilli(1_700_000_000_000)},
		{ID: prefix + "-zero-time", Value: []byte("zero event time")},
		{ID: prefix + "-odd-header", Value: []byte("odd header"), Headers: map[string]string{"": "empty name", "x-\n": "newline"}, EventTime: time.UnixMilli(1_700_000_000_000)},
		{ID: "", Value: []byte("no id"), EventTime: time.UnixMilli(1_700_000_000_000)},
	}
}

// badMessages are oddMessages and the case's own malformed ones, if any.
func badMessages(own func() []*runner.Message) []*runner.Message {
	msgs := oddMessages("odd")
	if own != nil {
		msgs = append(msgs, own()...)
	}
	return msgs
}

// checkPerMessage fails unless a call (what) with n malformed messages
// answered each of them rather than failing as a whole.
func checkPerMessage(t *testing.T, what string, n, results int, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s of malformed messages failed as a whole (%v): the engine would retry the batch for ever; answer per message", what, err)
	}
	if results != n {
		t.Fatalf("%s returned %d results for %d messages", what, results, n)
	}
}

func (c SinkCase) badInput(t *testing.T) {
	s := connected(t, c.New(t))
	defer closeAdapter(t, c.Features.Lifecycle, s)
	msgs := badMessages(c.BadInput)
	res, err := write(t, c, s, testContext(t, 60*time.Second), msgs)
	checkPerMessage(t, "write", len(msgs), len(res), err)
	for i, r := range res {
		if r.Status == runner.WriteFailed && r.Err == nil {
			t.Fatalf("message %q: failed without an error to say why", msgs[i].ID)
		}
	}
	// The sink still works.
	checkWrite(t, c, s, testMessages("after-odd", 5, 16))
}

func (c SinkCase) continues(t *testing.T) {
	s := connected(t, c.New(t))
	defer closeAdapter(t, c.Features.Lifecycle, s)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _ = write(t, c, s, ctx, testMessages("before", 10, 16))
	if c.Features.BadInput {
		_, _ = write(t, c, s, testContext(t, 30*time.Second), oddMessages("before-odd"))
	}
	msgs := testMessages("after-errors", 50, 16)
	checkWrite(t, c, s, msgs)
	waitReceived(t, c, msgs)
}

func (c SinkCase) inFlight(a closer, ctx context.Context) {
	_, _ = a.(runner.Sink).Write(ctx, testMessages("closing", 500, 64))
}

func (c SinkCase) reconnects(t *testing.T) {
	s := connected(t, c.New(t))
	defer closeAdapter(t, c.Features.Lifecycle, s)
	checkWrite(t, c, s, testMessages("before-stop", 5, 16))
	// While the peer is away each write returns in time; what it reports
	// written must arrive once the peer is back.
	away := testMessages("while-away", 5, 16)
	var claimed []*runner.Message
	awayAndBack(t, c.Peer, func() {
		for i := 0; i < 2; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			res, err := write(t, c, s, ctx, away)
			cancel()
			if err == nil {
				claimed = append(claimed, okOnes(t, away, res)...)
			}
		}
	})
	msgs := testMessages("after-restart", 20, 16)
	left := msgs
	deadline := time.Now().Add(c.Features.ReconnectWait)
	var lastErr error
	for len(left) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages still not written %v after the peer came back; last error: %v", len(left), len(msgs), c.Features.ReconnectWait, lastErr)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		res, err := write(t, c, s, ctx, left)
		cancel()
		if err != nil {
			lastErr = err
			time.Sleep(200 * time.Millisecond)
			continue
		}
		var next []*runner.Message
		for i, r := range res {
			if r.Status != runner.WriteOK {
				next = append(next, left[i])
				lastErr = errors.Join(fmt.Errorf("message %s: %s", left[i].ID, r.Status), r.Err)
			}
		}
		left = next
	}
	waitReceived(t, c, append(msgs, claimed...))
}
