package conformance

import (
	"bytes"
	"context"
	"fmt"
	"sync"
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
	t.Run("writes every message with its contents", func(t *testing.T) { sinkWriteAll(t, c) })
	t.Run("an empty batch is fine", func(t *testing.T) { sinkEmpty(t, c) })
	t.Run("large payloads arrive whole", func(t *testing.T) { sinkLarge(t, c) })
	t.Run("concurrent batches all arrive", func(t *testing.T) { sinkConcurrent(t, c) })
	t.Run("a cancelled write never reports unwritten messages as written", func(t *testing.T) { sinkCancelled(t, c) })
}

func closeSink(t *testing.T, s runner.Sink) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Errorf("close: %v", err)
	}
}

func testMessages(prefix string, n, size int) []*runner.Message {
	msgs := make([]*runner.Message, n)
	base := time.UnixMilli(1_700_000_000_000)
	for i := range msgs {
		v := bytes.Repeat([]byte{byte('a' + i%26)}, size)
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

// waitReceived waits until every wanted ID has arrived and returns what did.
func waitReceived(t *testing.T, c SinkCase, want []*runner.Message) map[string]*runner.Message {
	t.Helper()
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

func checkWrite(t *testing.T, s runner.Sink, msgs []*runner.Message) {
	t.Helper()
	ctx := testContext(t, 60*time.Second)
	res, err := s.Write(ctx, msgs)
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
	s := c.New(t)
	defer closeSink(t, s)
	msgs := testMessages("all", 200, 64)
	checkWrite(t, s, msgs)
	got := waitReceived(t, c, msgs)
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
	s := c.New(t)
	defer closeSink(t, s)
	res, err := s.Write(testContext(t, 30*time.Second), nil)
	if err != nil || len(res) != 0 {
		t.Fatalf("write of an empty batch: %d results, %v", len(res), err)
	}
}

func sinkLarge(t *testing.T, c SinkCase) {
	s := c.New(t)
	defer closeSink(t, s)
	msgs := testMessages("large", 3, c.Features.MaxPayload)
	checkWrite(t, s, msgs)
	got := waitReceived(t, c, msgs)
	for _, m := range msgs {
		if !bytes.Equal(got[m.ID].Value, m.Value) {
			t.Fatalf("message %s: %d bytes arrived, want %d identical bytes", m.ID, len(got[m.ID].Value), len(m.Value))
		}
	}
}

func sinkConcurrent(t *testing.T, c SinkCase) {
	s := c.New(t)
	defer closeSink(t, s)
	var all []*runner.Message
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := 0; g < 4; g++ {
		msgs := testMessages(fmt.Sprintf("conc%d", g), 100, 32)
		all = append(all, msgs...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := s.Write(context.Background(), msgs)
			if err != nil {
				errs <- err
				return
			}
			for i, r := range res {
				if r.Status != runner.WriteOK {
					errs <- fmt.Errorf("message %s: %s %v", msgs[i].ID, r.Status, r.Err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	waitReceived(t, c, all)
}

func sinkCancelled(t *testing.T, c SinkCase) {
	s := c.New(t)
	defer closeSink(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	msgs := testMessages("cancelled", 20, 16)
	res, err := s.Write(ctx, msgs)
	if err != nil {
		return // refusing the whole call is correct
	}
	if len(res) != len(msgs) {
		t.Fatalf("write returned %d results for %d messages", len(res), len(msgs))
	}
	var ok []*runner.Message
	for i, r := range res {
		if r.Status == runner.WriteOK {
			ok = append(ok, msgs[i])
		}
	}
	// Whatever it reported written must really be there.
	waitReceived(t, c, ok)
}
