package runner_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/runnertest"
)

// TestNumaflowIDsThroughLanesNacksAndRetries: under MV_ORDERING=key and
// MV_MESSAGE_IDS=numaflow, with a source that redelivers in flight, a
// transformer passing each input on alone (so the input takes its
// output's ID), a filter dropping some, and a sink that nacks some and
// fails others once (a tainted batch), every input is acked once under
// its source's ID, the in-flight set ends empty, and the sink sees
// Numaflow's IDs on every attempt.
func TestNumaflowIDsThroughLanesNacksAndRetries(t *testing.T) {
	const n = 200
	msgs := orderedMessages(n, 7, 3, 1)
	src := runnertest.NewSource(msgs)
	tr := runnertest.NewTransformer(func(m *runner.Message, _ int) runner.TransformResult {
		return runner.TransformResult{Outputs: []*runner.Message{m}}
	})
	filter := runnertest.NewTransformer(func(m *runner.Message, _ int) runner.TransformResult {
		if inputNum(t, m.ID)%6 == 1 {
			return runner.TransformResult{}
		}
		return runner.TransformResult{Outputs: []*runner.Message{m}}
	})
	sink := runnertest.NewSink(func(m *runner.Message, attempt int) runner.WriteResult {
		i := inputNum(t, m.ID)
		if m.ID != fmt.Sprintf("mv-m-%d-0", i) {
			t.Errorf("sink got %q", m.ID)
		}
		switch {
		case i%5 == 0 && attempt == 1:
			return runner.WriteResult{Status: runner.WriteNack, NackOptions: runner.Nack{Delay: time.Millisecond}}
		case i%7 == 0 && attempt == 1:
			return runner.WriteResult{Status: runner.WriteFailed, Err: errors.New("once")}
		}
		return runner.WriteResult{}
	})
	e, err := runPipeline(t, runner.Options{Name: "mv", BatchSize: 16, MessageIDs: runner.NumaflowIDs, Ordering: runner.OrderingKey, Retry: runner.RetryPolicy{Interval: time.Millisecond}},
		runner.Pipeline{Source: redelivering{src}, Sink: sink, Stages: []runner.Stage{
			{Kind: "test", Role: runner.RoleTransformer, Transformer: tr},
			{Kind: "test", Role: runner.RoleFilter, Transformer: filter},
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Errors(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if id := fmt.Sprintf("m-%d", i); src.Acked()[id] != 1 {
			t.Fatalf("%s acked %d times", id, src.Acked()[id])
		}
	}
	if c := runner.InflightCount(e); c != 0 {
		t.Fatalf("%d left in flight", c)
	}
}
