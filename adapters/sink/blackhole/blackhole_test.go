package blackhole_test

import (
	"testing"

	"github.com/monovertex/monovertex/adapters/sink/blackhole"
	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/conformance"
)

func TestConformance(t *testing.T) {
	conformance.RunSink(t, conformance.SinkCase{
		New: func(*testing.T) runner.Sink { return blackhole.Sink{} },
		// Received is nil: the sink keeps nothing, so only its answers are checked.
		Features: conformance.SinkFeatures{
			Lifecycle: conformance.Lifecycle{CloseTwice: true, ConcurrentClose: true, ContinuesAfterErrors: true, BadInput: true},
		},
	})
}
