package conformance

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/monovertex/monovertex/runner"
)

// RunTransformer runs the transformer suite against c.
func RunTransformer(t *testing.T, c TransformerCase) {
	t.Helper()
	c.Features.defaults()
	f := c.Features
	t.Run("results follow the inputs: drop, one, fan-out", func(t *testing.T) { transformMix(t, c) })
	t.Run("concurrent calls get their own results", func(t *testing.T) { transformConcurrent(t, c) })
	t.Run("large payloads come back whole", func(t *testing.T) { transformLarge(t, c) })
	t.Run("a cancelled call returns", func(t *testing.T) { transformCancelled(t, c) })
	t.Run("each result is handed over once, as Transform gives it", func(t *testing.T) { transformEach(t, c) })
	runLifecycle(t, f.Lifecycle, c.Peer, c)
}

func (c TransformerCase) names() kindNames               { return transformerNames }
func (c TransformerCase) newAdapter(t *testing.T) closer { return connected(t, c.New(t)) }

// transform is one Transform under the call deadline.
func transform(t *testing.T, c TransformerCase, tr runner.Transformer, ctx context.Context, msgs []*runner.Message) ([]runner.TransformResult, error) {
	t.Helper()
	return callValue(t, fmt.Sprintf("Transform of %d messages", len(msgs)), c.Features.CallTimeout, func() ([]runner.TransformResult, error) {
		return tr.Transform(ctx, msgs)
	})
}

func closeTransformer(t *testing.T, c TransformerCase, tr runner.Transformer) {
	t.Helper()
	closeAdapter(t, c.Features.Lifecycle, tr)
}

func mixMessages(prefix string, n int, seed uint64) []*runner.Message {
	r := rand.New(rand.NewPCG(seed, 1))
	msgs := make([]*runner.Message, n)
	for i := range msgs {
		v := fmt.Sprintf("%s-%d", prefix, i)
		switch r.IntN(4) {
		case 0:
			v = "drop"
		case 1:
			v = "fanout"
		}
		msgs[i] = &runner.Message{
			ID: fmt.Sprintf("%s-%d", prefix, i), Keys: []string{"k"}, Value: []byte(v),
			EventTime: time.UnixMilli(1_700_000_000_000 + int64(i)),
		}
	}
	return msgs
}

func checkTransform(msgs []*runner.Message, res []runner.TransformResult) error {
	if len(res) != len(msgs) {
		return fmt.Errorf("%d results for %d inputs", len(res), len(msgs))
	}
	for i, m := range msgs {
		r := res[i]
		if r.Err != nil || r.Nack {
			return fmt.Errorf("message %s: err %v, nack %v", m.ID, r.Err, r.Nack)
		}
		want := 1
		switch string(m.Value) {
		case "drop":
			want = 0
		case "fanout":
			want = 3
		}
		if len(r.Outputs) != want {
			return fmt.Errorf("message %s (%q): %d outputs, want %d", m.ID, m.Value, len(r.Outputs), want)
		}
		for _, o := range r.Outputs {
			if !bytes.Equal(o.Value, m.Value) {
				return fmt.Errorf("message %s: output %q, want %q (a result matched to the wrong input?)", m.ID, o.Value, m.Value)
			}
		}
	}
	return nil
}

// transformChecked is one transform whose results checkTransform accepts.
func transformChecked(t *testing.T, c TransformerCase, tr runner.Transformer, ctx context.Context, msgs []*runner.Message) error {
	t.Helper()
	res, err := transform(t, c, tr, ctx, msgs)
	if err != nil {
		return fmt.Errorf("transform: %w", err)
	}
	return checkTransform(msgs, res)
}

// transformOnce transforms msgs with a new transformer and checks the results.
func transformOnce(t *testing.T, c TransformerCase, msgs []*runner.Message) {
	tr := connected(t, c.New(t))
	defer closeTransformer(t, c, tr)
	if err := transformChecked(t, c, tr, testContext(t, 60*time.Second), msgs); err != nil {
		t.Fatal(err)
	}
}

func transformMix(t *testing.T, c TransformerCase) {
	transformOnce(t, c, mixMessages("mix", 500, 7))
}

// transformEach checks an EachTransformer's TransformEach: every message
// handed over exactly once, with the results Transform would give.
func transformEach(t *testing.T, c TransformerCase) {
	tr := connected(t, c.New(t))
	defer closeTransformer(t, c, tr)
	et, ok := tr.(runner.EachTransformer)
	if !ok {
		t.Skip("not a runner.EachTransformer")
	}
	msgs := mixMessages("each", 300, 11)
	res := make([]runner.TransformResult, len(msgs))
	times := make([]int, len(msgs))
	_, err := callValue(t, "TransformEach", c.Features.CallTimeout, func() (struct{}, error) {
		return struct{}{}, et.TransformEach(testContext(t, 60*time.Second), msgs, func(k int, r runner.TransformResult) {
			times[k]++
			res[k] = r
		})
	})
	if err != nil {
		t.Fatalf("TransformEach: %v", err)
	}
	for k, n := range times {
		if n != 1 {
			t.Fatalf("message %s handed over %d times, want once", msgs[k].ID, n)
		}
	}
	if err := checkTransform(msgs, res); err != nil {
		t.Fatal(err)
	}
}

func transformConcurrent(t *testing.T, c TransformerCase) {
	tr := connected(t, c.New(t))
	defer closeTransformer(t, c, tr)
	concurrently(t, 4, func(g int) error {
		msgs := mixMessages(fmt.Sprintf("conc%d", g), 200, uint64(g))
		res, err := tryValue("concurrent Transform", c.Features.CallTimeout, func() ([]runner.TransformResult, error) {
			return tr.Transform(context.Background(), msgs)
		})
		if err != nil {
			return err
		}
		return checkTransform(msgs, res)
	})
}

func transformLarge(t *testing.T, c TransformerCase) {
	size := c.Features.MaxPayload
	if size == 0 {
		size = 1 << 20
	}
	transformOnce(t, c, []*runner.Message{{ID: "large-0", Value: payload(0, size), EventTime: time.Now()}, {ID: "large-1", Value: payload(1, size), EventTime: time.Now()}})
}

func transformCancelled(t *testing.T, c TransformerCase) {
	tr := connected(t, c.New(t))
	defer closeTransformer(t, c, tr)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		res, err := tr.Transform(ctx, mixMessages("cancel", 10, 1))
		if err == nil && len(res) != 10 {
			t.Errorf("cancelled transform returned %d results for 10 inputs and no error", len(res))
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("Transform with a cancelled context did not return")
	}
}

func (c TransformerCase) badInput(t *testing.T) {
	tr := connected(t, c.New(t))
	defer closeTransformer(t, c, tr)
	msgs := badMessages(c.BadInput)
	res, err := transform(t, c, tr, testContext(t, 60*time.Second), msgs)
	checkPerMessage(t, "transform", len(msgs), len(res), err)
	for i, r := range res {
		if r.Err != nil || r.Nack {
			continue // refusing one message is a fine answer
		}
		for _, o := range r.Outputs {
			if !bytes.Equal(o.Value, msgs[i].Value) {
				t.Fatalf("message %q: output %q, want %q", msgs[i].ID, o.Value, msgs[i].Value)
			}
		}
	}
	if err := transformChecked(t, c, tr, testContext(t, 60*time.Second), mixMessages("after-odd", 20, 3)); err != nil {
		t.Fatalf("after malformed input: %v", err)
	}
}

func (c TransformerCase) continues(t *testing.T) {
	tr := connected(t, c.New(t))
	defer closeTransformer(t, c, tr)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _ = transform(t, c, tr, ctx, mixMessages("cancelled", 10, 1))
	if c.Features.BadInput {
		_, _ = transform(t, c, tr, testContext(t, 30*time.Second), oddMessages("before-odd"))
	}
	if err := transformChecked(t, c, tr, testContext(t, 60*time.Second), mixMessages("after-errors", 100, 5)); err != nil {
		t.Fatalf("after failed calls: %v", err)
	}
}

func (c TransformerCase) inFlight(a closer, ctx context.Context) {
	_, _ = a.(runner.Transformer).Transform(ctx, mixMessages("closing", 500, 9))
}

func (c TransformerCase) reconnects(t *testing.T) {
	tr := connected(t, c.New(t))
	defer closeTransformer(t, c, tr)
	if err := transformChecked(t, c, tr, testContext(t, 30*time.Second), mixMessages("before-stop", 10, 2)); err != nil {
		t.Fatalf("before the function stopped: %v", err)
	}
	awayAndBack(t, c.Peer, func() {
		for i := 0; i < 2; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, _ = transform(t, c, tr, ctx, mixMessages("while-away", 5, 4))
			cancel()
		}
	})
	msgs := mixMessages("after-restart", 20, 6)
	deadline := time.Now().Add(c.Features.ReconnectWait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := transformChecked(t, c, tr, ctx, msgs)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still failing %v after the function came back: %v", c.Features.ReconnectWait, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
