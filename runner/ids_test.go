package runner_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/runnertest"
)

// inputNum is the runnertest number in a Numaflow-style ID of vertex mv
// (mv-m-17-0-1 -> 17).
func inputNum(t *testing.T, id string) int {
	var n int
	if _, err := fmt.Sscanf(id, "mv-m-%d", &n); err != nil {
		t.Errorf("ID %q is not mv-m-<n>...: %v", id, err)
	}
	return n
}

// streamingUDF is a map UDF stage that says it streams its outputs.
type streamingUDF struct{ *runnertest.Transformer }

func (streamingUDF) StreamsOutputs() bool { return true }

// TestNumaflowIDs: under MV_MESSAGE_IDS=numaflow every output reaches the
// sink with the ID numaflow-core gives it: <vertex>-<offset>-<index>, a
// transformer's output k taking index k, a unary or batch map appending
// its input's index to the offset, a stream map numbering on from it;
// nacked messages read again (the same Message, re-queued) keep theirs;
// and the source is acked by the IDs it gave.
func TestNumaflowIDs(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			const n = 60
			msgs := runnertest.Messages(n)
			for _, m := range msgs {
				m.Offset = m.ID // the source's ID, for the transformer's check
			}
			src := runnertest.NewSource(msgs)
			fan := func(m *runner.Message, k int) []*runner.Message {
				out := make([]*runner.Message, k)
				for i := range out {
					out[i] = runnertest.Copy(m, fmt.Sprint(i))
				}
				return out
			}
			tr := runnertest.NewTransformer(func(m *runner.Message, _ int) runner.TransformResult {
				srcID, _ := m.Offset.(string)
				if m.ID != "mv-"+srcID+"-0" {
					t.Errorf("transformer got %q for source ID %q", m.ID, srcID)
				}
				if inputNum(t, m.ID)%3 == 0 {
					return runner.TransformResult{Outputs: fan(m, 2)}
				}
				return runner.TransformResult{Outputs: []*runner.Message{m}} // passed on as it is
			})
			var udf runner.Transformer = runnertest.NewTransformer(func(m *runner.Message, _ int) runner.TransformResult {
				if inputNum(t, m.ID)%2 == 0 {
					return runner.TransformResult{Outputs: fan(m, 3)}
				}
				return runner.TransformResult{Outputs: fan(m, 1)}
			})
			if stream {
				udf = streamingUDF{udf.(*runnertest.Transformer)}
			}
			sink := runnertest.NewSink(func(m *runner.Message, attempt int) runner.WriteResult {
				if inputNum(t, m.ID)%5 == 0 && attempt == 1 {
					return runner.WriteResult{Status: runner.WriteNack, NackOptions: runner.Nack{Delay: time.Millisecond}}
				}
				return runner.WriteResult{}
			})
			runAcked(t, runner.Options{Name: "mv", BatchSize: 16, MessageIDs: runner.NumaflowIDs}, src, n, runner.Pipeline{Sink: sink, Stages: []runner.Stage{
				{Kind: "test", Role: runner.RoleTransformer, Transformer: tr},
				{Kind: "test", Role: runner.RoleUDF, Transformer: udf},
			}})
			var want []string
			for i := range n {
				tOuts := 1
				if i%3 == 0 {
					tOuts = 2
				}
				uOuts := 1
				if i%2 == 0 {
					uOuts = 3
				}
				for kt := range tOuts {
					for ku := range uOuts {
						switch {
						case stream && kt == 0:
							want = append(want, fmt.Sprintf("mv-m-%d-%d-%d", i, ku, ku))
						case stream:
							// Numaflow's would be mv-m-i-(kt+ku)-(kt+ku), colliding with kt 0's.
							want = append(want, fmt.Sprintf("mv-m-%d-%d-%d-%d", i, kt, kt+ku, kt+ku))
						default:
							want = append(want, fmt.Sprintf("mv-m-%d-%d-%d", i, kt, ku))
						}
					}
				}
			}
			got := sink.WrittenIDs()
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("sink IDs:\n got %d %q\nwant %d %q", len(got), got, len(want), want)
			}
			nacked := src.Nacked()
			for i := range n {
				id := fmt.Sprintf("m-%d", i)
				if src.Acked()[id] != 1 {
					t.Fatalf("%s acked %d times", id, src.Acked()[id])
				}
				if wantNacks := 0; i%5 == 0 && nacked[id] < 1 || i%5 != 0 && nacked[id] != wantNacks {
					t.Fatalf("%s nacked %d times", id, nacked[id])
				}
			}
		})
	}
}

// TestSourceIDsAreTheDefault: without MV_MESSAGE_IDS=numaflow one output
// keeps its input's ID and several get -k suffixes, as before.
func TestSourceIDsAreTheDefault(t *testing.T) {
	const n = 20
	src := runnertest.NewSource(runnertest.Messages(n))
	tr := runnertest.NewTransformer(func(m *runner.Message, _ int) runner.TransformResult {
		if num(m.ID)%2 == 0 {
			return runner.TransformResult{Outputs: []*runner.Message{runnertest.Copy(m, "a"), runnertest.Copy(m, "b")}}
		}
		return runner.TransformResult{Outputs: []*runner.Message{runnertest.Copy(m, "a")}}
	})
	sink := runnertest.NewSink(nil)
	runAcked(t, runner.Options{Name: "mv", BatchSize: 8}, src, n, runner.Pipeline{Sink: sink, Stages: []runner.Stage{{Kind: "test", Role: runner.RoleTransformer, Transformer: tr}}})
	var want []string
	for i := range n {
		if i%2 == 0 {
			want = append(want, fmt.Sprintf("m-%d-0", i), fmt.Sprintf("m-%d-1", i))
		} else {
			want = append(want, fmt.Sprintf("m-%d", i))
		}
	}
	got := sink.WrittenIDs()
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("sink IDs %q, want %q", got, want)
	}
}

// TestNumaflowIDsCountTheContainersResults: Numaflow numbers a stage's
// outputs by their place among all the results its container returned,
// those it asked to drop included (TransformResult.Indexes), and derives
// them from the offset the source set where it differs from the one in
// the message's own ID (the HTTP source's <id>-<replica>).
func TestNumaflowIDsCountTheContainersResults(t *testing.T) {
	const n = 10
	msgs := runnertest.Messages(n)
	src := runnertest.NewSource(msgs)
	src.NumaflowOffsets = map[string]string{}
	for i, m := range msgs {
		if i%2 == 1 {
			src.NumaflowOffsets[m.ID] = m.ID + "-7"
		}
	}
	tr := runnertest.NewTransformer(func(m *runner.Message, _ int) runner.TransformResult {
		// Results 0 and 2 of four were dropped by the container.
		return runner.TransformResult{Outputs: []*runner.Message{runnertest.Copy(m, "a"), runnertest.Copy(m, "b")}, Indexes: []int{1, 3}}
	})
	udf := runnertest.NewTransformer(func(m *runner.Message, _ int) runner.TransformResult {
		return runner.TransformResult{Outputs: []*runner.Message{runnertest.Copy(m, "x")}, Indexes: []int{2}}
	})
	sink := runnertest.NewSink(nil)
	runAcked(t, runner.Options{Name: "mv", BatchSize: 4, MessageIDs: runner.NumaflowIDs}, src, n, runner.Pipeline{Sink: sink, Stages: []runner.Stage{
		{Kind: "test", Role: runner.RoleTransformer, Transformer: tr},
		{Kind: "test", Role: runner.RoleUDF, Transformer: udf},
	}})
	var want []string
	for i := range n {
		off := fmt.Sprintf("m-%d", i)
		if i%2 == 1 {
			off += "-7"
		}
		want = append(want, "mv-"+off+"-1-2", "mv-"+off+"-3-2")
	}
	got := sink.WrittenIDs()
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("sink IDs %q, want %q", got, want)
	}
}

// TestFilterStagesKeepIDsAndCountTheirDrops: a filter stage, before the
// transformer or after the map UDF, passes messages on under the ID they
// had (Numaflow has no such stage, so the sink sees the IDs it would see
// without it), and its drops are acked and counted as the filter's, not
// as the stages' around it.
func TestFilterStagesKeepIDsAndCountTheirDrops(t *testing.T) {
	const n = 80
	src := runnertest.NewSource(runnertest.Messages(n))
	filter := func(drop func(m *runner.Message) bool) runner.Transformer {
		return runnertest.NewTransformer(func(m *runner.Message, _ int) runner.TransformResult {
			if drop(m) {
				return runner.TransformResult{}
			}
			return runner.TransformResult{Outputs: []*runner.Message{m}}
		})
	}
	tr := runnertest.NewTransformer(func(m *runner.Message, _ int) runner.TransformResult {
		return runner.TransformResult{Outputs: []*runner.Message{runnertest.Copy(m, "a"), runnertest.Copy(m, "b")}}
	})
	udf := runnertest.NewTransformer(func(m *runner.Message, _ int) runner.TransformResult {
		return runner.TransformResult{Outputs: []*runner.Message{runnertest.Copy(m, string(m.Value)+"!")}}
	})
	sink := runnertest.NewSink(func(*runner.Message, int) runner.WriteResult { return runner.WriteResult{} })
	e := runAcked(t, runner.Options{Name: "mv", BatchSize: 16, MessageIDs: runner.NumaflowIDs}, src, n, runner.Pipeline{Sink: sink, Stages: []runner.Stage{
		{Kind: "test", Role: runner.RoleFilter, Transformer: filter(func(m *runner.Message) bool { return inputNum(t, m.ID)%4 == 0 })},
		{Kind: "test", Role: runner.RoleTransformer, Transformer: tr},
		{Kind: "test", Role: runner.RoleUDF, Transformer: udf},
		{Kind: "test", Role: runner.RoleFilter, Transformer: filter(func(m *runner.Message) bool { return string(m.Value) == "a!" })},
	}})
	var want []string
	for i := range n {
		if i%4 != 0 {
			want = append(want, fmt.Sprintf("mv-m-%d-1-0", i))
		}
	}
	got := sink.WrittenIDs()
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("sink got %d IDs %v..., want %d %v...", len(got), got[:min(4, len(got))], len(want), want[:4])
	}
	tot := e.Status().Totals
	if wantDropped := int64(n/4 + 3*n/4); tot.FilterDropped != wantDropped || tot.TransformerDropped != 0 || tot.UDFDropped != 0 {
		t.Fatalf("filter dropped %d (want %d), transformer %d, udf %d (want 0)", tot.FilterDropped, wantDropped, tot.TransformerDropped, tot.UDFDropped)
	}
}
