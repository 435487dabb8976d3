package runner_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/runnertest"
)

// resultSource is a runnertest source that takes results, and checks
// that they come before the ack of the same input.
type resultSource struct {
	*runnertest.Source
	mu      sync.Mutex
	results map[string][]string // input ID -> values of its written outputs
}

func (s *resultSource) TakesResults() bool { return true }

func (s *resultSource) Results(msgs []*runner.Message, written [][]*runner.Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, m := range msgs {
		vals := []string{}
		for _, w := range written[i] {
			vals = append(vals, string(w.Value))
		}
		if _, dup := s.results[m.ID]; dup {
			panic("results twice for " + m.ID)
		}
		s.results[m.ID] = vals
	}
}

// TestResultsReachTheSourceBeforeTheAck: a ResultTaker source gets, for
// every acked input and before its ack, exactly the outputs the sink or
// the fallback sink wrote (fan-out, fallback), none for a drop, and
// nothing for an input that was handed back.
func TestResultsReachTheSourceBeforeTheAck(t *testing.T) {
	const n = 300
	src := &resultSource{Source: runnertest.NewSource(runnertest.Messages(n)), results: map[string][]string{}}
	src.OnAck = func(msgs []*runner.Message) error {
		src.mu.Lock()
		defer src.mu.Unlock()
		for _, m := range msgs {
			if _, ok := src.results[m.ID]; !ok {
				return fmt.Errorf("%s acked before its results", m.ID)
			}
		}
		return nil
	}
	tr := runnertest.NewTransformer(func(m *runner.Message, _ int) runner.TransformResult {
		switch num(m.ID) % 5 {
		case 0:
			return runner.TransformResult{}
		case 1:
			return runner.TransformResult{Outputs: []*runner.Message{runnertest.Copy(m, "a"), runnertest.Copy(m, "b")}}
		}
		return runner.TransformResult{Outputs: []*runner.Message{runnertest.Copy(m, "t")}}
	})
	sink := runnertest.NewSink(func(m *runner.Message, attempt int) runner.WriteResult {
		switch {
		case num(m.ID)%5 == 2:
			return runner.WriteResult{Status: runner.WriteFallback}
		case num(m.ID)%5 == 3 && attempt == 1:
			return runner.WriteResult{Status: runner.WriteNack}
		}
		return runner.WriteResult{}
	})
	fb := runnertest.NewSink(func(*runner.Message, int) runner.WriteResult { return runner.WriteResult{} })
	if _, err := runPipeline(t, runner.Options{BatchSize: 32}, runner.Pipeline{Source: src, Sink: sink, Fallback: fb,
		Stages: []runner.Stage{{Kind: "test", Role: runner.RoleTransformer, Transformer: tr}}}); err != nil {
		t.Fatal(err)
	}
	if err := src.Errors(); err != nil {
		t.Fatal(err)
	}
	if got := len(src.Acked()); got != n {
		t.Fatalf("acked %d of %d", got, n)
	}
	if len(src.results) != n {
		t.Fatalf("results for %d inputs, want %d", len(src.results), n)
	}
	for i := range n {
		id := fmt.Sprintf("m-%d", i)
		want := map[int]string{0: "[]", 1: "[a b]"}[i%5]
		if want == "" {
			want = "[t]"
		}
		if got := fmt.Sprint(src.results[id]); got != want {
			t.Fatalf("%s: results %s, want %s", id, got, want)
		}
	}
}
