package generator_test

import (
	"testing"
	"time"

	"github.com/monovertex/monovertex/adapters/source/generator"
	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/conformance"
)

func TestConformance(t *testing.T) {
	conformance.RunSource(t, conformance.SourceCase{
		// Fast enough that every check's reads fill within their waits.
		New: func(*testing.T) runner.Source {
			return generator.New(generator.Config{RPU: 1000, Duration: 100 * time.Millisecond, MsgSize: 32}, 0)
		},
		Features: conformance.SourceFeatures{
			// It keeps nothing, so nothing is nacked, redelivered or pending;
			// it has no peer to lose.
			Lifecycle: conformance.Lifecycle{CloseTwice: true, ConcurrentClose: true, ContinuesAfterErrors: true, BadInput: true},
			Generates: true,
		},
	})
}
