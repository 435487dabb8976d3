package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/runnertest"
)

func runPipeline(t *testing.T, opts runner.Options, p runner.Pipeline) (*runner.Engine, error) {
	t.Helper()
	e, err := runner.NewPipeline(opts, p)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return e, e.Run(ctx)
}

// runAcked runs p with src as its source to the end, and fails on a run
// error, on an ack src refused (OnAck) or unless all n inputs were acked.
func runAcked(t *testing.T, opts runner.Options, src *runnertest.Source, n int, p runner.Pipeline) *runner.Engine {
	t.Helper()
	p.Source = src
	e, err := runPipeline(t, opts, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Errors(); err != nil {
		t.Fatal(err)
	}
	if got := len(src.Acked()); got != n {
		t.Fatalf("acked %d of %d", got, n)
	}
	return e
}

// num is the number in a runnertest message ID (m-17 -> 17).
func num(id string) int {
	n, _ := strconv.Atoi(strings.SplitN(id, "-", 3)[1])
	return n
}

// TestOnSuccessWritesTheReplacementAndAcksAfterIt: ON_SUCCESS with a
// replacement message writes the replacement to the onSuccess sink, the
// original otherwise, and acks only once the onSuccess sink has it.
func TestOnSuccessWritesTheReplacementAndAcksAfterIt(t *testing.T) {
	const n = 600
	src := runnertest.NewSource(runnertest.Messages(n))
	sink := runnertest.NewSink(func(m *runner.Message, _ int) runner.WriteResult {
		switch num(m.ID) % 3 {
		case 0:
			return runner.WriteResult{Status: runner.WriteOnSuccess, OnSuccess: &runner.Message{ID: m.ID, Value: []byte("ons:" + string(m.Value)), Keys: []string{"ons"}}}
		case 1:
			return runner.WriteResult{Status: runner.WriteOnSuccess}
		}
		return runner.WriteResult{}
	})
	ons := runnertest.NewSink(func(m *runner.Message, attempt int) runner.WriteResult {
		if num(m.ID)%7 == 0 && attempt == 1 {
			return runner.WriteResult{Status: runner.WriteFailed, Err: fmt.Errorf("once")}
		}
		return runner.WriteResult{}
	})
	src.OnAck = func(msgs []*runner.Message) error {
		for _, m := range msgs {
			if num(m.ID)%3 != 2 && !ons.Written(m.ID) {
				return fmt.Errorf("%s acked before the onSuccess sink wrote it", m.ID)
			}
		}
		return nil
	}
	e := runAcked(t, runner.Options{BatchSize: 50}, src, n, runner.Pipeline{Sink: sink, OnSuccess: ons})
	for i := range n {
		id := fmt.Sprintf("m-%d", i)
		if !sink.Written(id) {
			t.Fatalf("%s not written by the sink", id)
		}
		w := ons.Message(id)
		switch i % 3 {
		case 0:
			if w == nil || string(w.Value) != "ons:v-"+strconv.Itoa(i) || strings.Join(w.Keys, ",") != "ons" {
				t.Fatalf("%s: onSuccess sink got %+v, want the replacement", id, w)
			}
		case 1:
			if w == nil || string(w.Value) != "v-"+strconv.Itoa(i) {
				t.Fatalf("%s: onSuccess sink got %+v, want the original", id, w)
			}
		default:
			if w != nil {
				t.Fatalf("%s reached the onSuccess sink after a plain success", id)
			}
		}
	}
	st := e.Status().Totals
	if st.OnSuccessWritten != 400 || st.Written != n {
		t.Fatalf("totals %+v, want on_success_written 400 and written %d", st, n)
	}
}

// TestSinkNackHandsBackWithTheDelayAndIsNotRetried: a NACK goes back to
// the source with everything it asked for (delay, reason, max deliveries,
// nack map); the sink does not see it again in that round.
func TestSinkNackHandsBackWithTheDelayAndIsNotRetried(t *testing.T) {
	sent := runner.Nack{Delay: 1500 * time.Millisecond, Reason: "downstream busy", MaxDeliveries: 3, Map: map[string]string{"tenant": "a", "try": "1"}}
	const n = 200
	src := runnertest.NewSource(runnertest.Messages(n))
	sink := runnertest.NewSink(func(m *runner.Message, attempt int) runner.WriteResult {
		if num(m.ID)%4 == 0 && attempt == 1 {
			return runner.WriteResult{Status: runner.WriteNack, NackOptions: sent}
		}
		return runner.WriteResult{}
	})
	e, err := runPipeline(t, runner.Options{BatchSize: 20}, runner.Pipeline{Source: src, Sink: sink})
	if err != nil {
		t.Fatal(err)
	}
	nacked := src.Nacked()
	for i := range n {
		id := fmt.Sprintf("m-%d", i)
		want := 0
		if i%4 == 0 {
			want = 1
			if got := src.NackOf(id); !reflect.DeepEqual(got, sent) {
				t.Fatalf("%s nacked with %+v, want %+v as the sink sent it", id, got, sent)
			}
		}
		if nacked[id] != want {
			t.Fatalf("%s nacked %d times, want %d", id, nacked[id], want)
		}
		// Read once (or twice after the nack), offered once per read.
		if a := sink.Attempts(id); a != want+1 {
			t.Fatalf("%s offered %d times, want %d", id, a, want+1)
		}
	}
	if st := e.Status().Totals; st.Acked != n || st.SinkNacked != n/4 || st.Nacked != n/4 {
		t.Fatalf("totals %+v", st)
	}
}

// TestChainOfStagesDropsFansOutAndCounts: a transformer then a map UDF,
// each dropping and fanning out; every final output is written once and
// every input acked once, after its outputs.
func TestChainOfStagesDropsFansOutAndCounts(t *testing.T) {
	const n = 1000
	src := runnertest.NewSource(runnertest.Messages(n))
	tr := runnertest.NewTransformer(func(m *runner.Message, _ int) runner.TransformResult {
		switch num(m.ID) % 10 {
		case 0:
			return runner.TransformResult{} // dropped
		case 1:
			return runner.TransformResult{Outputs: []*runner.Message{runnertest.Copy(m, "a"), runnertest.Copy(m, "b")}}
		}
		return runner.TransformResult{Outputs: []*runner.Message{runnertest.Copy(m, "t")}}
	})
	udf := runnertest.NewTransformer(func(m *runner.Message, attempt int) runner.TransformResult {
		i := num(m.ID)
		switch {
		case i%10 == 2:
			return runner.TransformResult{}
		case i%10 == 3 && attempt == 1:
			return runner.TransformResult{Err: fmt.Errorf("transient")}
		case i%10 == 4:
			return runner.TransformResult{Outputs: []*runner.Message{runnertest.Copy(m, "x"), runnertest.Copy(m, "y"), runnertest.Copy(m, "z")}}
		}
		return runner.TransformResult{Outputs: []*runner.Message{runnertest.Copy(m, string(m.Value)+"+u")}}
	})
	sink := runnertest.NewSink(nil)
	src.OnAck = func(msgs []*runner.Message) error {
		for _, m := range msgs {
			i := num(m.ID)
			var want []string
			switch i % 10 {
			case 0, 2:
			case 1:
				want = []string{m.ID + "-0", m.ID + "-1"}
			case 4:
				want = []string{m.ID + "-0", m.ID + "-1", m.ID + "-2"}
			default:
				want = []string{m.ID}
			}
			for _, id := range want {
				if !sink.Written(id) {
					return fmt.Errorf("%s acked before its output %s was written", m.ID, id)
				}
			}
		}
		return nil
	}
	e := runAcked(t, runner.Options{BatchSize: 64}, src, n, runner.Pipeline{Sink: sink, Stages: []runner.Stage{
		{Kind: "test", Role: runner.RoleTransformer, Transformer: tr},
		{Kind: "test", Role: runner.RoleUDF, Transformer: udf},
	}})
	// Per 10 inputs: 1 dropped by the transformer, 1 by the UDF, 2 outputs
	// for the transformer's fan-out, 3 for the UDF's, 6 single ones.
	if got, want := len(sink.WrittenIDs()), n/10*(2+3+6); got != want {
		t.Fatalf("written %d, want %d", got, want)
	}
	if got := string(sink.Message("m-5").Value); got != "t+u" {
		t.Fatalf("m-5 went through the chain as %q, want t+u", got)
	}
	st := e.Status()
	if st.Totals.TransformerDropped != n/10 || st.Totals.UDFDropped != n/10 || st.Totals.UDFErrors != n/10 {
		t.Fatalf("totals %+v", st.Totals)
	}
	if got := strings.Join(st.Chain, " -> "); got != "source -> transformer (test) -> udf (test) -> sink" {
		t.Fatalf("chain %q", got)
	}
}

// TestBypassRoutesByTagsAndDropsUnmatchedAtTheSink follows Numaflow's rules:
// conditions are checked after each stage in the order sink, fallback,
// onSuccess; a bypassed output skips the remaining stages; with a sink
// condition, what matches nothing is dropped at the sink.
func TestBypassRoutesByTagsAndDropsUnmatchedAtTheSink(t *testing.T) {
	const n = 500
	tags := func(i int) []string {
		switch i % 5 {
		case 0:
			return []string{"bad"}
		case 1:
			return []string{"audit", "keep"}
		case 2:
			return []string{"keep"}
		case 3:
			return []string{"audit"} // "and" needs audit and keep: no match
		}
		return nil
	}
	src := runnertest.NewSource(runnertest.Messages(n))
	tr := runnertest.NewTransformer(func(m *runner.Message, _ int) runner.TransformResult {
		o := runnertest.Copy(m, "t")
		o.Tags = tags(num(m.ID))
		return runner.TransformResult{Outputs: []*runner.Message{o}}
	})
	var udfSaw sync.Map
	udf := runnertest.NewTransformer(func(m *runner.Message, _ int) runner.TransformResult {
		udfSaw.Store(m.ID, true)
		return runner.TransformResult{Outputs: []*runner.Message{m}}
	})
	sink, fb, ons := runnertest.NewSink(nil), runnertest.NewSink(nil), runnertest.NewSink(nil)
	must := func(s string) *runner.TagCondition {
		c, err := runner.ParseTagCondition(s)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	e := runAcked(t, runner.Options{BatchSize: 50}, src, n, runner.Pipeline{
		Sink: sink, Fallback: fb, OnSuccess: ons,
		Stages: []runner.Stage{{Role: runner.RoleTransformer, Transformer: tr}, {Role: runner.RoleUDF, Transformer: udf}},
		Bypass: runner.Bypass{Sink: must("keep"), Fallback: must("or:bad"), OnSuccess: must("and:audit,keep")},
	})
	for i := range n {
		id := fmt.Sprintf("m-%d", i)
		_, sawUDF := udfSaw.Load(id)
		inSink, inFb, inOns := sink.Written(id), fb.Written(id), ons.Written(id)
		var ok bool
		switch i % 5 {
		case 0: // bad -> fallback, past the UDF
			ok = inFb && !inSink && !inOns && !sawUDF
		case 1, 2: // keep matches the sink's condition first
			ok = inSink && !inFb && !inOns && !sawUDF
		default: // no match: through the UDF, then dropped at the sink
			ok = !inSink && !inFb && !inOns && sawUDF
		}
		if !ok {
			t.Fatalf("%s (tags %v): sink %v fallback %v onSuccess %v udf %v", id, tags(i), inSink, inFb, inOns, sawUDF)
		}
	}
	st := e.Status().Totals
	if st.Bypassed != 300 || st.BypassDropped != 200 || st.Dropped != 200 {
		t.Fatalf("totals %+v, want 300 bypassed and 200 dropped at the sink", st)
	}
}

// TestFallbackMovesInTheRoundItWasAskedFor: one message of a batch asks for
// fallback while another is retried for a long time; the first reaches the
// fallback sink and is acked within its round.
func TestFallbackMovesInTheRoundItWasAskedFor(t *testing.T) {
	src := runnertest.NewSource(runnertest.Messages(2))
	var retried atomic.Int64
	release := make(chan struct{})
	sink := runnertest.NewSink(func(m *runner.Message, attempt int) runner.WriteResult {
		if m.ID == "m-0" {
			return runner.WriteResult{Status: runner.WriteFallback}
		}
		select {
		case <-release:
			return runner.WriteResult{}
		default:
			retried.Add(1)
			return runner.WriteResult{Status: runner.WriteFailed, Err: fmt.Errorf("busy")}
		}
	})
	fb := runnertest.NewSink(nil)
	src.OnAck = func(msgs []*runner.Message) error {
		for _, m := range msgs {
			if m.ID == "m-0" && !fb.Written("m-0") {
				return fmt.Errorf("m-0 acked before the fallback sink wrote it")
			}
		}
		return nil
	}
	acked := make(chan struct{})
	var once sync.Once
	prev := src.OnAck
	src.OnAck = func(msgs []*runner.Message) error {
		for _, m := range msgs {
			if m.ID == "m-0" {
				once.Do(func() { close(acked) })
			}
		}
		return prev(msgs)
	}
	e, err := runner.NewPipeline(runner.Options{BatchSize: 2, Retry: runner.RetryPolicy{Interval: 5 * time.Millisecond}}, runner.Pipeline{Source: src, Sink: sink, Fallback: fb})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Run(context.Background()) }()
	select {
	case <-acked:
	case <-time.After(30 * time.Second):
		t.Fatal("m-0 not acked within 30s while m-1 was retried")
	}
	if !fb.Written("m-0") || sink.Written("m-1") {
		t.Fatalf("fallback wrote m-0: %v; sink wrote m-1 already: %v", fb.Written("m-0"), sink.Written("m-1"))
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := src.Errors(); err != nil {
		t.Fatal(err)
	}
	if len(src.Acked()) != 2 || retried.Load() == 0 {
		t.Fatalf("acked %v, m-1 retried %d times", src.Acked(), retried.Load())
	}
}

// TestMissingTierStopsTheRunAsNumaflowDoes: ON_SUCCESS without an onSuccess
// sink is a fatal error, and the message stays unacked.
func TestMissingTierStopsTheRunAsNumaflowDoes(t *testing.T) {
	for _, status := range []runner.WriteStatus{runner.WriteOnSuccess, runner.WriteFallback} {
		t.Run(status.String(), func(t *testing.T) {
			src := runnertest.NewSource(runnertest.Messages(10))
			sink := runnertest.NewSink(func(m *runner.Message, _ int) runner.WriteResult {
				if m.ID == "m-3" {
					return runner.WriteResult{Status: status}
				}
				return runner.WriteResult{}
			})
			_, err := runPipeline(t, runner.Options{BatchSize: 10}, runner.Pipeline{Source: src, Sink: sink})
			if !runner.IsFatal(err) || !strings.Contains(err.Error(), "m-3") {
				t.Fatalf("run returned %v, want a fatal error naming m-3", err)
			}
			if src.Acked()["m-3"] != 0 {
				t.Fatal("m-3 was acked")
			}
		})
	}
}

// metadataSink is a runnertest.Sink that asks for Numaflow metadata.
type metadataSink struct {
	*runnertest.Sink
	mu   sync.Mutex
	seen map[string][]string
}

func (s *metadataSink) PassesMetadata() {}

func (s *metadataSink) Write(ctx context.Context, msgs []*runner.Message) ([]runner.WriteResult, error) {
	s.mu.Lock()
	for _, m := range msgs {
		s.seen[m.ID] = append(s.seen[m.ID], string(m.Metadata.System[runner.SinkMetadataGroup][runner.RetryCountKey]))
	}
	s.mu.Unlock()
	return s.Sink.Write(ctx, msgs)
}

// TestRetryCountIsStampedForMetadataSinks: a sink that passes metadata on
// sees retry_count 0, 1, 2 on successive attempts, and user metadata kept.
func TestRetryCountIsStampedForMetadataSinks(t *testing.T) {
	msgs := runnertest.Messages(20)
	for _, m := range msgs {
		m.Metadata = &runner.Metadata{User: map[string]map[string][]byte{"app": {"k": []byte(m.ID)}}}
	}
	src := runnertest.NewSource(msgs)
	sink := &metadataSink{seen: map[string][]string{}, Sink: runnertest.NewSink(func(m *runner.Message, attempt int) runner.WriteResult {
		if num(m.ID)%2 == 0 && attempt < 3 {
			return runner.WriteResult{Status: runner.WriteFailed, Err: fmt.Errorf("again")}
		}
		return runner.WriteResult{}
	})}
	if _, err := runPipeline(t, runner.Options{BatchSize: 20}, runner.Pipeline{Source: src, Sink: sink}); err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		want := "0"
		if num(m.ID)%2 == 0 {
			want = "0,1,2"
		}
		if got := strings.Join(sink.seen[m.ID], ","); got != want {
			t.Fatalf("%s saw retry counts %s, want %s", m.ID, got, want)
		}
		if got := string(sink.Message(m.ID).Metadata.User["app"]["k"]); got != m.ID {
			t.Fatalf("%s user metadata %q", m.ID, got)
		}
	}
}

// TestStreamingModeBoundsMessagesNotBatches: in streaming mode a message
// held by the sink holds only its own place; reading goes on up to
// MV_CONCURRENCY messages in flight, never more.
func TestStreamingModeBoundsMessagesNotBatches(t *testing.T) {
	const n, concurrency = 400, 16
	src := runnertest.NewSource(runnertest.Messages(n))
	hold := make(chan struct{})
	sink := runnertest.NewSink(func(m *runner.Message, _ int) runner.WriteResult {
		if m.ID == "m-0" {
			<-hold
		}
		return runner.WriteResult{}
	})
	counting := &peakSource{Source: src}
	e, err := runner.NewPipeline(runner.Options{BatchSize: 8, Streaming: true, Concurrency: concurrency, InflightBatches: 1},
		runner.Pipeline{Source: counting, Sink: &unlockedSink{sink}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Run(context.Background()) }()
	// With m-0 held, everything else still goes through: batch slots would
	// have stopped at the first batch with InflightBatches=1.
	deadline := time.Now().Add(30 * time.Second)
	for e.Status().Totals.Acked < n-8 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := e.Status().Totals.Acked; got < n-8 {
		t.Fatalf("acked %d with m-0 held; streaming mode should go on past it", got)
	}
	close(hold)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(src.Acked()) != n {
		t.Fatalf("acked %d of %d", len(src.Acked()), n)
	}
	if most := counting.peak.Load(); most > concurrency {
		t.Fatalf("%d messages in flight at once, more than MV_CONCURRENCY=%d", most, concurrency)
	}
	if e.Status().Mode != "streaming" {
		t.Fatalf("mode %q", e.Status().Mode)
	}
}

// unlockedSink lets writes of different batches run at once, so one held
// message does not hold the others' writes (the runnertest sink's lock
// would).
type unlockedSink struct{ s *runnertest.Sink }

func (u *unlockedSink) Write(ctx context.Context, msgs []*runner.Message) ([]runner.WriteResult, error) {
	for _, m := range msgs {
		if m.ID == "m-0" {
			u.s.Decide(m, 1)
		}
	}
	return u.s.Write(ctx, msgs)
}

func (u *unlockedSink) Close(ctx context.Context) error { return u.s.Close(ctx) }

// TestStatusLastErrorIsSnakeCase: /status is snake_case throughout, the
// last error included.
func TestStatusLastErrorIsSnakeCase(t *testing.T) {
	src := runnertest.NewSource(runnertest.Messages(3))
	sink := runnertest.NewSink(func(m *runner.Message, attempt int) runner.WriteResult {
		if attempt == 1 {
			return runner.WriteResult{Status: runner.WriteFailed, Err: fmt.Errorf("first try fails")}
		}
		return runner.WriteResult{}
	})
	e, err := runPipeline(t, runner.Options{}, runner.Pipeline{Source: src, Sink: sink})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(e.Status())
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	le, ok := doc["last_error"].(map[string]any)
	if !ok || le["at"] == nil || !strings.Contains(fmt.Sprint(le["error"]), "first try fails") {
		t.Fatalf("last_error %v, want {at, error}", doc["last_error"])
	}
}

// TestFanOutNacksHandBackTheInputOnceWithTheLongestWait: when two outputs
// of one input are nacked with different options, the input goes back
// once, with the options of the nack that asked to wait longest.
func TestFanOutNacksHandBackTheInputOnceWithTheLongestWait(t *testing.T) {
	const n = 40
	short := runner.Nack{Delay: time.Second, Reason: "short"}
	long := runner.Nack{Delay: 2 * time.Second, Reason: "long", MaxDeliveries: 5, Map: map[string]string{"k": "v"}}
	src := runnertest.NewSource(runnertest.Messages(n))
	tr := runnertest.NewTransformer(func(m *runner.Message, _ int) runner.TransformResult {
		return runner.TransformResult{Outputs: []*runner.Message{runnertest.Copy(m, "short"), runnertest.Copy(m, "long")}}
	})
	sink := runnertest.NewSink(func(m *runner.Message, attempt int) runner.WriteResult {
		if attempt > 1 {
			return runner.WriteResult{}
		}
		if string(m.Value) == "short" {
			return runner.WriteResult{Status: runner.WriteNack, NackOptions: short}
		}
		return runner.WriteResult{Status: runner.WriteNack, NackOptions: long}
	})
	if _, err := runPipeline(t, runner.Options{BatchSize: 8}, runner.Pipeline{Source: src, Sink: sink, Stages: []runner.Stage{{Role: runner.RoleTransformer, Transformer: tr}}}); err != nil {
		t.Fatal(err)
	}
	nacked := src.Nacked()
	for i := range n {
		id := fmt.Sprintf("m-%d", i)
		if nacked[id] != 1 {
			t.Fatalf("%s nacked %d times, want once", id, nacked[id])
		}
		if got := src.NackOf(id); !reflect.DeepEqual(got, long) {
			t.Fatalf("%s nacked with %+v, want the longer wait's %+v", id, got, long)
		}
	}
}

// TestAStageWithItsOwnRetryStrategy: a transformer with its own retry
// strategy (2 steps) gets 3 tries per failing message whatever the sink's
// (unlimited here), then does what its onFailure says, as numaflow-core's
// shared/retry.rs: drop drops the message, retry hands the input back to
// the source with a reason.
func TestAStageWithItsOwnRetryStrategy(t *testing.T) {
	for _, onFailure := range []runner.OnFailure{runner.OnFailureDrop, runner.OnFailureRetry} {
		t.Run(string(onFailure), func(t *testing.T) {
			const n = 30
			src := runnertest.NewSource(runnertest.Messages(n))
			failed := map[string]bool{}
			tr := runnertest.NewTransformer(func(m *runner.Message, attempt int) runner.TransformResult {
				// m%3 == 0 fails its first 3 tries; once handed back and
				// read again it passes.
				if num(m.ID)%3 == 0 && attempt <= 3 {
					return runner.TransformResult{Err: errors.New("not now")}
				}
				return runner.TransformResult{Outputs: []*runner.Message{m}}
			})
			sink := runnertest.NewSink(func(*runner.Message, int) runner.WriteResult { return runner.WriteResult{} })
			retry := &runner.StageRetry{Policy: runner.RetryPolicy{Interval: time.Millisecond, Steps: 2}, OnFailure: onFailure}
			_, err := runPipeline(t, runner.Options{BatchSize: 10, Retry: runner.RetryPolicy{Interval: time.Millisecond}},
				runner.Pipeline{Source: src, Sink: sink, Stages: []runner.Stage{{Role: runner.RoleTransformer, Transformer: tr, Retry: retry}}})
			if err != nil {
				t.Fatal(err)
			}
			nacked := src.Nacked()
			for i := range n {
				id := fmt.Sprintf("m-%d", i)
				if i%3 != 0 {
					continue
				}
				failed[id] = true
				switch onFailure {
				case runner.OnFailureDrop:
					if a := tr.Attempts(id); a != 3 || nacked[id] != 0 || sink.Attempts(id) != 0 {
						t.Fatalf("%s: %d tries, %d nacks, %d writes; want 3 tries (2 retries), then dropped", id, a, nacked[id], sink.Attempts(id))
					}
				default:
					if a := tr.Attempts(id); a != 4 || nacked[id] != 1 || sink.Attempts(id) != 1 || !strings.Contains(src.NackOf(id).Reason, "not now") {
						t.Fatalf("%s: %d tries, %d nacks (%+v), %d writes; want 3 tries, a nack with the failure as its reason, then a try that passes and is written", id, a, nacked[id], src.NackOf(id), sink.Attempts(id))
					}
				}
			}
			if len(failed) != 10 {
				t.Fatalf("%d failing messages; the test expects 10", len(failed))
			}
		})
	}
}

// TestANackWithoutADelayKeepsItsReason: the first nack of an input stands
// as it came, with no delay to compare it by.
func TestANackWithoutADelayKeepsItsReason(t *testing.T) {
	sent := runner.Nack{Reason: "not yet", MaxDeliveries: 2}
	src := runnertest.NewSource(runnertest.Messages(10))
	sink := runnertest.NewSink(func(m *runner.Message, attempt int) runner.WriteResult {
		if attempt == 1 {
			return runner.WriteResult{Status: runner.WriteNack, NackOptions: sent}
		}
		return runner.WriteResult{}
	})
	if _, err := runPipeline(t, runner.Options{BatchSize: 5}, runner.Pipeline{Source: src, Sink: sink}); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if got := src.NackOf(fmt.Sprintf("m-%d", i)); !reflect.DeepEqual(got, sent) {
			t.Fatalf("m-%d nacked with %+v, want %+v", i, got, sent)
		}
	}
}
