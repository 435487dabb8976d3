package runner_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/runnertest"
)

// releases records each Release call and what had happened to the
// message by then.
type releases struct {
	mu       sync.Mutex
	count    map[string]int
	problems []string
}

// track gives m a Release that records its call under name, and checks,
// when called, that ready(name) holds: nothing may read the payload after.
func (r *releases) track(m *runner.Message, name string, ready func() error) {
	m.Release = func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.count == nil {
			r.count = map[string]int{}
		}
		r.count[name]++
		if err := ready(); err != nil {
			r.problems = append(r.problems, fmt.Sprintf("%s released early: %v", name, err))
		}
	}
}

func (r *releases) check(t *testing.T, want map[string]int) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.problems {
		t.Error(p)
	}
	if len(r.count) != len(want) {
		t.Errorf("%d messages released, want %d: %v", len(r.count), len(want), r.count)
	}
	for name, n := range want {
		if r.count[name] != n {
			t.Errorf("%s released %d times, want %d", name, r.count[name], n)
		}
	}
}

func acked(src *runnertest.Source, id string) func() error {
	return func() error {
		if src.Acked()[id] != 1 {
			return errors.New("before its ack")
		}
		return nil
	}
}

// trackedSource is a source of n messages whose Release must come after
// their ack, exactly once each (want).
func trackedSource(n int) (msgs []*runner.Message, src *runnertest.Source, rel *releases, want map[string]int) {
	msgs = runnertest.Messages(n)
	src = runnertest.NewSource(msgs)
	rel, want = &releases{}, map[string]int{}
	for _, m := range msgs {
		rel.track(m, m.ID, acked(src, m.ID))
		want[m.ID] = 1
	}
	return msgs, src, rel, want
}

func TestPayloadsAreReleasedOnceAfterTheAck(t *testing.T) {
	_, src, rel, want := trackedSource(100)
	sink := runnertest.NewSink(nil)
	run(t, runner.Options{BatchSize: 10}, src, nil, sink, nil)
	rel.check(t, want)
}

func TestATransformersInputIsReleasedOnceItsOutputsHoldThePayload(t *testing.T) {
	msgs := runnertest.Messages(40)
	src := runnertest.NewSource(msgs)
	sink := runnertest.NewSink(nil)
	var rel releases
	want := map[string]int{}
	transformed := map[string]bool{}
	var mu sync.Mutex
	for _, m := range msgs {
		id := m.ID
		rel.track(m, id, func() error {
			mu.Lock()
			defer mu.Unlock()
			if !transformed[id] {
				return errors.New("before the transformer answered")
			}
			return nil
		})
		want[id] = 1
	}
	tr := runnertest.NewTransformer(func(m *runner.Message, _ int) runner.TransformResult {
		mu.Lock()
		transformed[m.ID] = true
		mu.Unlock()
		// Two outputs sharing one buffer: the release goes on the first,
		// as udtransformer does, and comes after the input's ack.
		a, b := &runner.Message{Value: []byte("a")}, &runner.Message{Value: []byte("b")}
		rel.track(a, m.ID+"/outputs", acked(src, m.ID))
		want[m.ID+"/outputs"] = 1
		return runner.TransformResult{Outputs: []*runner.Message{a, b}}
	})
	run(t, runner.Options{BatchSize: 8}, src, tr, sink, nil)
	if len(sink.WrittenIDs()) != 80 {
		t.Fatalf("written %d, want 80", len(sink.WrittenIDs()))
	}
	for _, m := range msgs {
		if m.Value != nil {
			t.Fatalf("%s still holds its payload after the transformer replaced it", m.ID)
		}
	}
	rel.check(t, want)
}

func TestAnInputThatAnOutputStillReadsIsReleasedAfterTheAck(t *testing.T) {
	for name, out := range map[string]func(m *runner.Message) *runner.Message{
		"passthrough": func(m *runner.Message) *runner.Message { return m },
		"slice":       func(m *runner.Message) *runner.Message { return &runner.Message{Value: m.Value[1:]} },
	} {
		t.Run(name, func(t *testing.T) {
			_, src, rel, want := trackedSource(20)
			tr := runnertest.NewTransformer(func(m *runner.Message, _ int) runner.TransformResult {
				return runner.TransformResult{Outputs: []*runner.Message{out(m)}}
			})
			sink := runnertest.NewSink(nil)
			run(t, runner.Options{BatchSize: 5}, src, tr, sink, nil)
			rel.check(t, want)
			for i := range 20 {
				got := sink.Message(fmt.Sprintf("m-%d", i))
				if want := out(runnertest.Messages(20)[i]).Value; got == nil || string(got.Value) != string(want) {
					t.Fatalf("m-%d written as %+v", i, got)
				}
			}
		})
	}
}

func TestAFailedCallKeepsTheBatchsPayloadsFromBeingReleased(t *testing.T) {
	for name, setup := range map[string]func(sink *runnertest.Sink){
		"call error": func(sink *runnertest.Sink) {
			sink.CallError = func(call int) error {
				if call == 1 {
					return errors.New("stream broken")
				}
				return nil
			}
		},
		"one message failed": func(sink *runnertest.Sink) {
			sink.Decide = func(m *runner.Message, attempt int) runner.WriteResult {
				if m.ID == "m-3" && attempt == 1 {
					return runner.WriteResult{Status: runner.WriteFailed, Err: errors.New("try again")}
				}
				return runner.WriteResult{}
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, src, rel, _ := trackedSource(10)
			sink := runnertest.NewSink(nil)
			setup(sink)
			run(t, runner.Options{BatchSize: 10}, src, nil, sink, nil)
			if len(src.Acked()) != 10 || len(sink.WrittenIDs()) != 10 {
				t.Fatalf("acked %d written %d, want 10", len(src.Acked()), len(sink.WrittenIDs()))
			}
			// One batch, whose first attempt failed: an attempt cut short
			// may still read, so its payloads go to the collector instead.
			rel.check(t, map[string]int{})
		})
	}
}

func TestHoldRunsNowWithoutOutputsAndOtherwiseChainsOnTheFirst(t *testing.T) {
	var calls []string
	rel := func(name string) func() { return func() { calls = append(calls, name) } }

	var none runner.TransformResult
	none.Hold(rel("now"))
	if len(calls) != 1 || calls[0] != "now" {
		t.Fatalf("without outputs: %v, want it run at once", calls)
	}

	calls = nil
	res := runner.TransformResult{Outputs: []*runner.Message{{}, {}}}
	res.Hold(nil)
	res.Hold(rel("a"))
	res.Hold(rel("b"))
	if len(calls) != 0 || res.Outputs[1].Release != nil {
		t.Fatalf("ran %v early, or put a release on the second output", calls)
	}
	res.Outputs[0].Release()
	if fmt.Sprint(calls) != "[a b]" {
		t.Fatalf("the first output's Release ran %v, want [a b]", calls)
	}
}

// A transformer may copy its input (out := *m) and change the copy; the
// copy must not carry the input's Release, or the buffer would go back
// twice (once as the input is replaced, once after its ack) and the
// second time hand the next message's buffer out again.
func TestACopyOfTheInputDoesNotCarryItsRelease(t *testing.T) {
	msgs := runnertest.Messages(20)
	src := runnertest.NewSource(msgs)
	var rel releases
	want := map[string]int{}
	for _, m := range msgs {
		rel.track(m, m.ID, func() error { return nil })
		want[m.ID] = 1
	}
	tr := runnertest.NewTransformer(func(m *runner.Message, _ int) runner.TransformResult {
		out := *m
		out.Value = []byte("new-" + m.ID)
		return runner.TransformResult{Outputs: []*runner.Message{&out}}
	})
	sink := runnertest.NewSink(nil)
	runAcked(t, runner.Options{BatchSize: 5}, src, 20, runner.Pipeline{Sink: sink,
		Stages: []runner.Stage{{Kind: "test", Role: runner.StageTransformer, Transformer: tr}}})
	rel.check(t, want)
	for _, m := range msgs {
		if got := sink.Message(m.ID); got == nil || string(got.Value) != "new-"+m.ID {
			t.Fatalf("%s written as %+v", m.ID, got)
		}
	}
}

// A transformer passes its input on beside a second output that reads the
// same payload; the next stage replaces the input but keeps the second.
// The input's buffer may go back only after the ack (the second output is
// written from it), and the input, still the source's ack handle, keeps
// its ID.
func TestAnInputPassedOnBesideASiblingIsReleasedAfterTheAck(t *testing.T) {
	msgs, src, rel, want := trackedSource(12)
	original := map[string]string{}
	for _, m := range msgs {
		original[m.ID] = string(m.Value)
	}
	tr := runnertest.NewTransformer(func(m *runner.Message, _ int) runner.TransformResult {
		return runner.TransformResult{Outputs: []*runner.Message{m, {Value: m.Value, Tags: []string{"sibling"}}}}
	})
	udf := runnertest.NewTransformer(func(m *runner.Message, _ int) runner.TransformResult {
		if len(m.Tags) > 0 {
			return runner.TransformResult{Outputs: []*runner.Message{m}}
		}
		return runner.TransformResult{Outputs: []*runner.Message{{Value: []byte("replaced")}}}
	})
	sink := runnertest.NewSink(nil)
	runAcked(t, runner.Options{BatchSize: 4}, src, 12, runner.Pipeline{Sink: sink, Stages: []runner.Stage{
		{Kind: "test", Role: runner.StageTransformer, Transformer: tr},
		{Kind: "test", Role: runner.StageUDF, Transformer: udf},
	}})
	rel.check(t, want)
	if n := len(sink.WrittenIDs()); n != 24 {
		t.Fatalf("written %d, want 24", n)
	}
	for _, m := range msgs {
		if got := sink.Message(m.ID + "-1"); got == nil || string(got.Value) != original[m.ID] {
			t.Fatalf("the sibling of %s written as %+v, want %q", m.ID, got, original[m.ID])
		}
		if got := sink.Message(m.ID + "-0"); got == nil || string(got.Value) != "replaced" {
			t.Fatalf("the replaced output of %s written as %+v", m.ID, got)
		}
	}
}
