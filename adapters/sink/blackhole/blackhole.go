// Package blackhole is a sink that accepts every message and keeps none,
// for measuring the rest of the pipeline.
package blackhole

import (
	"context"

	"github.com/monovertex/monovertex/runner"
)

func init() {
	runner.RegisterSink("blackhole", func(_ context.Context, _ runner.Env, _ *struct{}) (runner.Sink, error) {
		return Sink{}, nil
	})
}

// Sink discards every message and reports it written.
type Sink struct{}

// Write reports every message written.
func (Sink) Write(_ context.Context, msgs []*runner.Message) ([]runner.WriteResult, error) {
	return runner.OKResults(len(msgs)), nil
}

// Close has nothing to release.
func (Sink) Close(context.Context) error { return nil }
