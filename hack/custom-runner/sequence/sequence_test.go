package sequence_test

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/conformance"

	"example.com/custom-runner/sequence"
)

// TestConformance runs monovertex's source suite, the one every built-in
// source passes, against the sequence source: each check gets a store of
// its own, shared by the sources it builds.
func TestConformance(t *testing.T) {
	var mu sync.Mutex
	stores := map[string]*sequence.Store{}
	storeOf := func(t *testing.T) *sequence.Store {
		mu.Lock()
		defer mu.Unlock()
		if stores[t.Name()] == nil {
			stores[t.Name()] = sequence.NewStore()
		}
		return stores[t.Name()]
	}
	conformance.RunSource(t, conformance.SourceCase{
		New: func(t *testing.T) runner.Source { return sequence.New(storeOf(t)) },
		Produce: func(t *testing.T, n int) [][]byte {
			vals := make([][]byte, n)
			for i := range vals {
				vals[i] = []byte(t.Name() + "-" + strconv.Itoa(i))
				storeOf(t).Add(string(vals[i]))
			}
			return vals
		},
		Features: conformance.SourceFeatures{
			Lifecycle:           conformance.Lifecycle{CloseTwice: true, ConcurrentClose: true, ContinuesAfterErrors: true, BadInput: true},
			Nack:                true,
			RedeliverAfterClose: true,
			KeepsValues:         true,
			RedeliveryWait:      10 * time.Second,
		},
	})
}
