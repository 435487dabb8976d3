package conformance

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/monovertex/monovertex/runner"
)

// RunTransformer runs the transformer suite against c.
func RunTransformer(t *testing.T, c TransformerCase) {
	t.Helper()
	t.Run("results follow the inputs: drop, one, fan-out", func(t *testing.T) { transformMix(t, c) })
	t.Run("concurrent calls get their own results", func(t *testing.T) { transformConcurrent(t, c) })
	t.Run("large payloads come back whole", func(t *testing.T) { transformLarge(t, c) })
	t.Run("a cancelled call returns", func(t *testing.T) { transformCancelled(t, c) })
}

func closeTransformer(t *testing.T, tr runner.Transformer) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tr.Close(ctx); err != nil {
		t.Errorf("close: %v", err)
	}
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

func transformMix(t *testing.T, c TransformerCase) {
	tr := c.New(t)
	defer closeTransformer(t, tr)
	msgs := mixMessages("mix", 500, 7)
	res, err := tr.Transform(testContext(t, 60*time.Second), msgs)
	if err != nil {
		t.Fatalf("transform: %v", err)
	}
	if err := checkTransform(msgs, res); err != nil {
		t.Fatal(err)
	}
}

func transformConcurrent(t *testing.T, c TransformerCase) {
	tr := c.New(t)
	defer closeTransformer(t, tr)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := 0; g < 4; g++ {
		msgs := mixMessages(fmt.Sprintf("conc%d", g), 200, uint64(g))
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := tr.Transform(context.Background(), msgs)
			if err == nil {
				err = checkTransform(msgs, res)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func transformLarge(t *testing.T, c TransformerCase) {
	tr := c.New(t)
	defer closeTransformer(t, tr)
	v := bytes.Repeat([]byte("x"), 1<<20)
	msgs := []*runner.Message{{ID: "large-0", Value: v, EventTime: time.Now()}, {ID: "large-1", Value: v, EventTime: time.Now()}}
	res, err := tr.Transform(testContext(t, 60*time.Second), msgs)
	if err != nil {
		t.Fatalf("transform: %v", err)
	}
	if err := checkTransform(msgs, res); err != nil {
		t.Fatal(err)
	}
}

func transformCancelled(t *testing.T, c TransformerCase) {
	tr := c.New(t)
	defer closeTransformer(t, tr)
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
