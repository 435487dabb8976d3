package udconn

import (
	"context"
	"fmt"
	"slices"

	"github.com/numaproj/numaflow-go/pkg/apis/proto/common"
	"go.uber.org/zap"

	"github.com/monovertex/monovertex/internal/payloadpool"
	"github.com/monovertex/monovertex/runner"
)

// FailTag is the tag by which a map or source-transform UDF fails its input
// ("U+005C__FAIL__"). numaflow-go v0.12 has no helper for it; the data
// plane honours it (numaflow-core src/message.rs Message::failed,
// src/transformer.rs).
var FailTag = fmt.Sprintf("%U__FAIL__", '\\')

// TransformAdapter is what the map and source-transform adapters' New
// returns: a transformer whose concurrency and error reporting the runner
// sets.
type TransformAdapter interface {
	runner.Transformer
	SetConcurrency(n int)
	ReportErrorsTo(r runner.ErrorReporter, stage runner.Role)
}

// RegisterTransformer registers a Numaflow transformer adapter under name,
// with the Settings every Numaflow adapter shares as its configuration, so
// udmap and udtransformer are built the same way from the runner's Env.
func RegisterTransformer[T TransformAdapter](name string, newT func(ctx context.Context, set Settings, log *zap.SugaredLogger) (T, error)) {
	runner.RegisterTransformer(name, func(ctx context.Context, env runner.Env, cfg *Settings) (runner.Transformer, error) {
		cfg.Connection = env.Connection
		t, err := newT(ctx, *cfg, env.Logger)
		if err != nil {
			return nil, err
		}
		t.SetConcurrency(env.Concurrency)
		t.ReportErrorsTo(env.Errors, env.Role)
		return t, nil
	})
}

// TransformOutput is one result of a map or source-transform response;
// both protocols share its fields.
type TransformOutput interface {
	GetKeys() []string
	GetValue() []byte
	GetTags() []string
	GetMetadata() *common.Metadata
	GetNackOptions() *common.NackOptions
}

// TransformResult turns the results of one input into the engine's result,
// by numaflow-core's rules (message.rs dropped/nacked/failed, mapper/map.rs,
// src/transformer.rs):
//
//   - a FailTag result fails the input, which is retried with the retry
//     strategy; the error says "<who> failed message <id>";
//   - a NACK-tagged result nacks the input, with nack_options.delay in
//     milliseconds (numaflow-core message.rs NackOptions) as the
//     redelivery delay. Numaflow still writes the input's other outputs and
//     nacks it, so it comes back and they are written again; here none of
//     them is written, which ends the same way with fewer duplicates;
//   - dropTag results are left out; none left means dropped on purpose;
//     when one was left out, Indexes gives each output's place among all
//     the results, by which numaflow-core numbers outputs;
//   - every other result is an output with the container's keys, value,
//     tags and user metadata and the input's system metadata; then set
//     adds what only its protocol carries (nil when nothing).
func TransformResult[R TransformOutput](in *runner.Message, results []R, who, dropTag, nackTag string, set func(o *runner.Message, r R)) runner.TransformResult {
	for _, r := range results {
		if slices.Contains(r.GetTags(), FailTag) {
			return runner.TransformResult{Err: fmt.Errorf("%s failed message %s (%s tag)", who, in.ID, FailTag)}
		}
	}
	for _, r := range results {
		if slices.Contains(r.GetTags(), nackTag) {
			return runner.TransformResult{Nack: true, NackOptions: NackFromProto(r.GetNackOptions())}
		}
	}
	var outs []*runner.Message
	// idx is each output's place among the results, once a dropped one
	// made them differ: Numaflow numbers outputs by it.
	var idx []int
	for i, r := range results {
		if slices.Contains(r.GetTags(), dropTag) {
			if idx == nil {
				idx = make([]int, len(outs), len(results))
				for j := range idx {
					idx[j] = j
				}
			}
			continue
		}
		if idx != nil {
			idx = append(idx, i)
		}
		keys := r.GetKeys()
		if keys == nil {
			// The container chose no keys: keep it that way rather than
			// letting the engine copy the input's.
			keys = []string{}
		}
		value := r.GetValue()
		if value == nil {
			value = []byte{}
		}
		o := &runner.Message{Keys: keys, Value: value, Metadata: OutputMetadata(in.Metadata, r.GetMetadata())}
		if set != nil {
			set(o, r)
		}
		if tags := r.GetTags(); len(tags) > 0 {
			o.Tags = slices.Clone(tags)
		}
		outs = append(outs, o)
	}
	if len(outs) == 0 {
		idx = nil
	}
	return runner.TransformResult{Outputs: outs, Indexes: idx}
}

// GiveBuffers hands the pooled buffers that a result's output values
// alias to the engine with runner.TransformResult.Hold: on its first
// output, released once every output of the input is written (so they may
// share the buffers), or at once when there is no output.
func GiveBuffers(res *runner.TransformResult, bufs ...*payloadpool.Buffer) {
	for _, b := range bufs {
		if b != nil {
			res.Hold(b.Release)
		}
	}
}

// Collect is Transform for an adapter's TransformEach: every result in
// input order, or the error that failed the call.
func Collect(ctx context.Context, msgs []*runner.Message, each func(ctx context.Context, msgs []*runner.Message, done func(k int, r runner.TransformResult)) error) ([]runner.TransformResult, error) {
	results := make([]runner.TransformResult, len(msgs))
	if err := each(ctx, msgs, func(k int, r runner.TransformResult) { results[k] = r }); err != nil {
		return nil, err
	}
	return results, nil
}
