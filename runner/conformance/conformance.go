// Package conformance is the one test suite per adapter kind that every
// source, transformer and sink must pass, the way Watermill tests every
// pub/sub with one suite. An adapter's test file calls RunSource, RunSink or
// RunTransformer with a Case that says how to build it over a fresh backing
// store and what it supports.
package conformance

import (
	"context"
	"testing"
	"time"

	"github.com/monovertex/monovertex/runner"
)

// SourceFeatures say what a source supports, so the suite checks only that.
type SourceFeatures struct {
	// Nack: nacked messages are read again soon, with the same IDs and values.
	Nack bool
	// RedeliverAfterClose: messages read but never acked are read again by a
	// new source over the same store (after its ack timeout, if any).
	RedeliverAfterClose bool
	// Pending: Pending reports a count that reaches 0 once everything is acked.
	Pending bool
	// KeepsValues: Produce returns the values, and Read must return exactly them.
	KeepsValues bool
	// RedeliveryWait bounds how long the suite waits for a redelivery.
	RedeliveryWait time.Duration
}

// SourceCase tells the suite how to test one source adapter.
type SourceCase struct {
	// New returns a source over the store of this test. Called again within
	// one test, it must return a new source over the same store.
	New func(t *testing.T) runner.Source
	// Produce makes n new messages available, perhaps asynchronously, and
	// returns their values when Features.KeepsValues is set.
	Produce  func(t *testing.T, n int) [][]byte
	Features SourceFeatures
}

// SinkFeatures say what a sink supports.
type SinkFeatures struct {
	// KeepsKeys: Received returns the keys that were written.
	KeepsKeys bool
	// KeepsEventTime: Received returns the event time to the millisecond.
	KeepsEventTime bool
	// KeepsHeaders: Received returns the headers that were written.
	KeepsHeaders bool
	// MaxPayload is the largest payload the suite writes; 0 means 1 MiB.
	MaxPayload int
}

// SinkCase tells the suite how to test one sink adapter.
type SinkCase struct {
	// New returns a sink writing into the store of this test.
	New func(t *testing.T) runner.Sink
	// Received returns every message the store has received so far, in any
	// order; duplicates may appear.
	Received func(t *testing.T) []*runner.Message
	Features SinkFeatures
}

// TransformerCase tells the suite how to test one transformer adapter. The
// function behind it must implement the reference behaviour: no output for
// the value "drop", three outputs each equal to the input for "fanout", and
// one output equal to the input for anything else.
type TransformerCase struct {
	New func(t *testing.T) runner.Transformer
}

func testContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
