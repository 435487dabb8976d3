package runner_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

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
	return releasingSource(n, acked)
}

// releasedAnyTime is a source of n messages whose Release may come at any
// time, exactly once each (want).
func releasedAnyTime(n int) (msgs []*runner.Message, src *runnertest.Source, rel *releases, want map[string]int) {
	return releasingSource(n, func(*runnertest.Source, string) func() error { return func() error { return nil } })
}

// releasingSource is a source of n messages whose Release is tracked,
// with ready(src, id) as the check each Release makes.
func releasingSource(n int, ready func(src *runnertest.Source, id string) func() error) (msgs []*runner.Message, src *runnertest.Source, rel *releases, want map[string]int) {
	msgs = runnertest.Messages(n)
	src = runnertest.NewSource(msgs)
	rel, want = &releases{}, map[string]int{}
	for _, m := range msgs {
		rel.track(m, m.ID, ready(src, m.ID))
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
	msgs, src, rel, want := releasedAnyTime(20)
	tr := runnertest.NewTransformer(func(m *runner.Message, _ int) runner.TransformResult {
		out := *m
		out.Value = []byte("new-" + m.ID)
		return runner.TransformResult{Outputs: []*runner.Message{&out}}
	})
	sink := runnertest.NewSink(nil)
	runAcked(t, runner.Options{BatchSize: 5}, src, 20, runner.Pipeline{Sink: sink,
		Stages: []runner.Stage{{Kind: "test", Role: runner.RoleTransformer, Transformer: tr}}})
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
		{Kind: "test", Role: runner.RoleTransformer, Transformer: tr},
		{Kind: "test", Role: runner.RoleUDF, Transformer: udf},
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

// eachTransformer is a runner.EachTransformer that hands over one output
// per message ("t-" and its value) as it goes. A call listed in failAfter
// fails after handing over that many results; one listed in skip hands
// over nothing for that message and still returns nil (failing after as
// many results as the call carried hands all of them over and then fails).
// failing, when set, gives the result for a message in a call: an error
// it returns is that message's result. after runs after each output is
// handed over, still inside the call.
type eachTransformer struct {
	mu        sync.Mutex
	calls     [][]string // the IDs each call carried
	problems  []string
	failAfter map[int]int
	skip      map[int]int
	failing   func(call int, id string) error
	after     func(m *runner.Message)
}

func (t *eachTransformer) Transform(context.Context, []*runner.Message) ([]runner.TransformResult, error) {
	return nil, runner.Fatal(errors.New("Transform called on an EachTransformer"))
}

func (t *eachTransformer) TransformEach(_ context.Context, msgs []*runner.Message, done func(int, runner.TransformResult)) error {
	t.mu.Lock()
	call := len(t.calls) + 1
	ids := make([]string, len(msgs))
	for k, m := range msgs {
		ids[k] = m.ID
		if m.Value == nil {
			t.problems = append(t.problems, fmt.Sprintf("call %d carried %s without its payload", call, m.ID))
		}
	}
	t.calls = append(t.calls, ids)
	failAfter, fails := t.failAfter[call]
	skip, skips := t.skip[call]
	t.mu.Unlock()
	for k, m := range msgs {
		if fails && k == failAfter {
			return errors.New("stream broke")
		}
		if skips && k == skip {
			continue
		}
		if t.failing != nil {
			if err := t.failing(call, m.ID); err != nil {
				done(k, runner.TransformResult{Err: err})
				continue
			}
		}
		done(k, runner.TransformResult{Outputs: []*runner.Message{{Value: append([]byte("t-"), m.Value...)}}})
		if t.after != nil {
			t.after(m)
		}
	}
	if fails && failAfter >= len(msgs) {
		return errors.New("stream broke after the last answer")
	}
	return nil
}

func (t *eachTransformer) Close(context.Context) error { return nil }

// check fails t on a message sent without its payload, and returns the
// IDs each call carried.
func (t *eachTransformer) check(tb testing.TB) [][]string {
	tb.Helper()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.problems {
		tb.Error(p)
	}
	return t.calls
}

// writtenTransformed fails t unless the sink has every input of msgs
// transformed, once, from its original value.
func writtenTransformed(t *testing.T, sink *runnertest.Sink, src *runnertest.Source, msgs []*runner.Message) {
	t.Helper()
	if n, a := len(sink.WrittenIDs()), len(src.Acked()); n != len(msgs) || a != len(msgs) {
		t.Fatalf("written %d, acked %d, want %d", n, a, len(msgs))
	}
	for i := range msgs {
		id := fmt.Sprintf("m-%d", i)
		if got := sink.Message(id); got == nil || string(got.Value) != fmt.Sprintf("t-v-%d", i) {
			t.Fatalf("%s written as %+v", id, got)
		}
	}
}

func TestAnEachTransformersInputIsReleasedAsItsResultArrives(t *testing.T) {
	msgs, src, rel, want := releasedAnyTime(24)
	tr := &eachTransformer{}
	tr.after = func(m *runner.Message) {
		// Still inside the call: the engine has the result, so the
		// payload is free already, before the rest of the batch is back.
		rel.mu.Lock()
		n := rel.count[m.ID]
		rel.mu.Unlock()
		if n != 1 || m.Value != nil {
			tr.mu.Lock()
			tr.problems = append(tr.problems, fmt.Sprintf("%s released %d times, payload %q, as its result was handed over", m.ID, n, m.Value))
			tr.mu.Unlock()
		}
	}
	sink := runnertest.NewSink(nil)
	run(t, runner.Options{BatchSize: 8}, src, tr, sink, nil)
	if calls := tr.check(t); len(calls) != 3 {
		t.Fatalf("%d calls, want 3 (24 messages in batches of 8): %v", len(calls), calls)
	}
	writtenTransformed(t, sink, src, msgs)
	rel.check(t, want)
}

func TestAnEachTransformerFailingPartWayKeepsTheResultsItHandedOver(t *testing.T) {
	for name, tc := range map[string]struct {
		failAfter, skip map[int]int
		errors          int64
	}{
		"call error after 3": {failAfter: map[int]int{1: 3}, errors: 1},
		"no result for one":  {skip: map[int]int{1: 5}, errors: 1},
		"error, then again":  {failAfter: map[int]int{1: 2, 2: 1}, errors: 2},
	} {
		t.Run(name, func(t *testing.T) {
			// Released as they leave the call until it fails; after the
			// failure the batch keeps its payloads.
			msgs, src, rel, _ := releasedAnyTime(8)
			tr := &eachTransformer{failAfter: tc.failAfter, skip: tc.skip}
			sink := runnertest.NewSink(nil)
			e := run(t, runner.Options{BatchSize: 8}, src, tr, sink, nil)
			calls := tr.check(t)
			writtenTransformed(t, sink, src, msgs)
			// Each message is offered until it has a result, and never
			// after: the second call carries only what the first did not
			// answer.
			offered := map[string]int{}
			for _, c := range calls {
				for _, id := range c {
					offered[id]++
				}
			}
			answeredFirst := 8
			if n, ok := tc.failAfter[1]; ok {
				answeredFirst = n
			}
			for i, m := range msgs {
				want := 1
				if _, skipped := tc.skip[1]; (skipped && i == tc.skip[1]) || i >= answeredFirst {
					want = 2
				}
				if n, ok := tc.failAfter[2]; ok && i >= answeredFirst+n {
					want = 3
				}
				if offered[m.ID] != want {
					t.Errorf("%s offered %d times, want %d (calls %v)", m.ID, offered[m.ID], want, calls)
				}
			}
			if got := e.Status().Totals.TransformerErrors; got != tc.errors {
				t.Errorf("transformer errors %d, want %d (one per failed call)", got, tc.errors)
			}
			// What the first call answered was released as it came; the
			// failure then kept the rest (see
			// TestAFailedCallKeepsTheBatchsPayloadsFromBeingReleased).
			released := map[string]int{}
			for i := range answeredFirst {
				if skip, skipped := tc.skip[1]; !skipped || i != skip {
					released[fmt.Sprintf("m-%d", i)] = 1
				}
			}
			rel.check(t, released)
		})
	}
}

// A message that failed in the part of a call answered before the call
// broke has had its try for the round: it is not offered again with the
// rest of the call, but after the retry backoff, so MV_RETRY_STEPS bounds
// its tries however many calls break.
func TestAMessageFailingInABrokenCallSpendsItsRetryStep(t *testing.T) {
	poisoned := errors.New("poisoned")
	away := runner.Unavailable(errors.New("away"))
	m0Fails := func(_ int, id string) error {
		if id == "m-0" {
			return poisoned
		}
		return nil
	}
	rest := []string{"m-3", "m-4", "m-5", "m-6", "m-7"}
	all := append([]string{"m-0", "m-1", "m-2"}, rest...)
	for name, tc := range map[string]struct {
		failAfter map[int]int
		failing   func(call int, id string) error
		calls     [][]string
		// dropped is m-0 when it fails every time.
		dropped bool
		errors  int64
	}{
		// m-0 fails in the answered part of calls 1 and 3, which then
		// break; before, each break gave it an extra try (five calls).
		"broken after the failure": {
			failAfter: map[int]int{1: 3, 3: 1}, failing: m0Fails,
			calls:   [][]string{all, rest, {"m-0"}, {"m-0"}},
			dropped: true, errors: 3 + 2,
		},
		// Everything was answered before the break: nothing is offered
		// again in this round; m-0 waits for the next.
		"broken after every answer": {
			failAfter: map[int]int{1: 8}, failing: m0Fails,
			calls:   [][]string{all, {"m-0"}, {"m-0"}},
			dropped: true, errors: 3 + 1,
		},
		// A peer that is away costs no step, in a broken call as in one
		// that returns: m-1 goes along with the rest of the call.
		"only away in a broken call": {
			failAfter: map[int]int{1: 3},
			failing: func(call int, id string) error {
				if call == 1 && id == "m-1" {
					return away
				}
				return nil
			},
			calls:  [][]string{all, append(append([]string{}, rest...), "m-1")},
			errors: 1 + 1,
		},
		// Beside a failure an away peer spends the step too, as in a
		// round of a call that returns.
		"away beside a failure": {
			failAfter: map[int]int{1: 3},
			failing: func(call int, id string) error {
				if call == 1 && id == "m-1" {
					return away
				}
				return m0Fails(call, id)
			},
			calls:   [][]string{all, rest, {"m-0", "m-1"}, {"m-0"}},
			dropped: true, errors: 3 + 1 + 1,
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, src, _, _ := releasedAnyTime(8)
			tr := &eachTransformer{failAfter: tc.failAfter, failing: tc.failing}
			sink := runnertest.NewSink(nil)
			e := run(t, runner.Options{BatchSize: 8, OnFailure: runner.OnFailureDrop, Retry: runner.RetryPolicy{Interval: time.Millisecond, Steps: 2}}, src, tr, sink, nil)
			if calls := tr.check(t); !reflect.DeepEqual(calls, tc.calls) {
				t.Fatalf("calls %v, want %v", calls, tc.calls)
			}
			st := e.Status().Totals
			written := 8
			if tc.dropped {
				written = 7
				if st.Dropped != 1 || sink.Written("m-0") {
					t.Errorf("dropped %d, m-0 written %v; want m-0 dropped once its retries were spent", st.Dropped, sink.Written("m-0"))
				}
			}
			if n, a := len(sink.WrittenIDs()), len(src.Acked()); n != written || a != 8 {
				t.Errorf("written %d, acked %d, want %d and 8", n, a, written)
			}
			for i := 1; i < 8; i++ {
				id := fmt.Sprintf("m-%d", i)
				if got := sink.Message(id); got == nil || string(got.Value) != fmt.Sprintf("t-v-%d", i) {
					t.Errorf("%s written as %+v", id, got)
				}
			}
			if st.TransformerErrors != tc.errors {
				t.Errorf("transformer errors %d, want %d (one per failed message and per broken call)", st.TransformerErrors, tc.errors)
			}
		})
	}
}
