// Package conformance is the one test suite per adapter kind that every
// source, transformer and sink must pass, the way Watermill tests every
// pub/sub with one suite. An adapter's test file calls RunSource, RunSink or
// RunTransformer with a Case that says how to build it over a fresh backing
// store and, in its Features, what it supports: the suite checks only that.
//
// Every call the suite makes into an adapter has a deadline, so a hung
// adapter fails its check at once with a message naming the call, instead of
// stalling the test binary until its global timeout.
package conformance

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	"github.com/monovertex/monovertex/runner"
)

// Lifecycle says which lifecycle and robustness checks an adapter of any
// kind takes part in. Each kind's Features embeds it.
type Lifecycle struct {
	// CloseTwice: a second Close returns nil at once.
	CloseTwice bool
	// ConcurrentClose: Close called from several goroutines at once, while a
	// call is in flight, returns in every goroutine, and the call in flight
	// returns once its context is cancelled.
	ConcurrentClose bool
	// ContinuesAfterErrors: after calls that failed (a cancelled context,
	// bad input where BadInput is set), the next ordinary call works.
	ContinuesAfterErrors bool
	// BadInput: odd or malformed input (empty, nil or binary values, no ID,
	// no keys, a zero event time, acks of messages never read) is answered
	// per message, without a panic, a hang or a whole-call error, and the
	// adapter keeps working.
	BadInput bool
	// Reconnects: with its peer stopped, calls return (failing is fine)
	// within CallTimeout; once the peer is back, calls work again within
	// ReconnectWait. The Case must supply Peer.
	Reconnects bool
	// ReconnectWait bounds how long the suite waits for the adapter to work
	// again once its peer is back; 0 means 30s.
	ReconnectWait time.Duration
	// CallTimeout is the deadline of each call into the adapter beyond the
	// wait the call itself asks for (a Read's timeout); 0 means 30s.
	CallTimeout time.Duration
}

func (l *Lifecycle) defaults() {
	if l.ReconnectWait == 0 {
		l.ReconnectWait = 30 * time.Second
	}
	if l.CallTimeout == 0 {
		l.CallTimeout = 30 * time.Second
	}
}

// Peer lets the suite take away and bring back what an adapter talks to
// (a broker, a sidecar, an HTTP endpoint, a writer), for Reconnects.
type Peer struct {
	// Stop takes the peer away, as a crash or a network partition would.
	Stop func(t *testing.T)
	// Start brings the peer back with its state (streams, stored messages).
	Start func(t *testing.T)
}

// SourceFeatures say what a source supports, so the suite checks only that.
type SourceFeatures struct {
	Lifecycle
	// Nack: nacked messages are read again soon, with the same IDs and values.
	Nack bool
	// RedeliverAfterClose: messages read but never acked are read again by a
	// new source over the same store (after its ack timeout, if any).
	RedeliverAfterClose bool
	// Pending: Pending reports a count that reaches 0 once everything is acked.
	Pending bool
	// KeepsValues: Produce returns the values, and Read must return exactly them.
	KeepsValues bool
	// Generates: the source makes messages on its own (the generator), so
	// Produce is never called and the empty-source check is skipped.
	Generates bool
	// RedeliveryWait bounds how long the suite waits for a redelivery.
	RedeliveryWait time.Duration
}

// SourceCase tells the suite how to test one source adapter.
type SourceCase struct {
	// New returns a source over the store of this test. Called again within
	// one test, it must return a new source over the same store.
	New func(t *testing.T) runner.Source
	// Produce makes n new messages available, perhaps asynchronously, and
	// returns their values when Features.KeepsValues is set. It may be nil
	// with Features.Generates.
	Produce func(t *testing.T, n int) [][]byte
	// Peer stops and restarts the source's peer, for Features.Reconnects.
	Peer     Peer
	Features SourceFeatures
}

// SinkFeatures say what a sink supports.
type SinkFeatures struct {
	Lifecycle
	// KeepsKeys: Received returns the keys that were written.
	KeepsKeys bool
	// KeepsEventTime: Received returns the event time to the millisecond.
	KeepsEventTime bool
	// KeepsHeaders: Received returns the headers that were written.
	KeepsHeaders bool
	// AnswersFailure: the peer behind the case refuses every message whose
	// value starts with "fail", and the sink reports each of those, and only
	// those, as failed (WriteFailed with an error, or WriteFallback).
	AnswersFailure bool
	// MaxPayload is the largest payload the suite writes; 0 means 1 MiB.
	MaxPayload int
}

// SinkCase tells the suite how to test one sink adapter.
type SinkCase struct {
	// New returns a sink writing into the store of this test.
	New func(t *testing.T) runner.Sink
	// Received returns every message the store has received so far, in any
	// order; duplicates may appear. Nil means the sink keeps nothing
	// (blackhole): the suite then checks its answers only.
	Received func(t *testing.T) []*runner.Message
	// BadInput, if set, returns adapter-specific malformed messages that the
	// BadInput check writes besides its own.
	BadInput func() []*runner.Message
	// Peer stops and restarts the sink's peer, for Features.Reconnects.
	Peer     Peer
	Features SinkFeatures
}

// TransformerFeatures say what a transformer supports.
type TransformerFeatures struct {
	Lifecycle
	// MaxPayload is the largest payload the suite transforms; 0 means 1 MiB.
	MaxPayload int
}

// TransformerCase tells the suite how to test one transformer adapter. The
// function behind it must implement the reference behaviour: no output for
// the value "drop", three outputs each equal to the input for "fanout", and
// one output equal to the input for anything else.
type TransformerCase struct {
	New func(t *testing.T) runner.Transformer
	// BadInput, if set, returns adapter-specific malformed messages that the
	// BadInput check transforms besides its own.
	BadInput func() []*runner.Message
	// Peer stops and restarts the function, for Features.Reconnects.
	Peer     Peer
	Features TransformerFeatures
}

// payload is size bytes of ASCII hex that never repeat within a payload and
// differ between seeds: every 8-byte cell is its own index mixed with the
// seed. A frame or chunk dropped, repeated, swapped or handed to the wrong
// message shows, which a payload of one repeated byte or a short repeated
// pattern would hide.
func payload(seed, size int) []byte {
	const hex = "0123456789abcdef"
	v := make([]byte, size)
	for k := 0; k < size; k += 8 {
		x := uint32(k/8) ^ uint32(seed)*0x9e3779b9
		for j := 0; j < 8 && k+j < size; j++ {
			v[k+j] = hex[x>>(28-4*j)&0xf]
		}
	}
	return v
}

func testContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// callErr runs f, one call into the adapter named what, and returns an error
// if it panics or does not return within d. A call that hangs is left
// running: the suite cannot stop it, only report it.
func callErr(what string, d time.Duration, f func()) error {
	done := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- fmt.Errorf("%s panicked: %v\n%s", what, p, debug.Stack())
			}
		}()
		f()
		done <- nil
	}()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		return fmt.Errorf("%s did not return within %v: the adapter hangs", what, d)
	}
}

// call is callErr that fails the test; only for the test's own goroutine.
func call(t *testing.T, what string, d time.Duration, f func()) {
	t.Helper()
	if err := callErr(what, d, f); err != nil {
		t.Fatal(err)
	}
}

// callValue is call for a call that returns a value and an error.
func callValue[R any](t *testing.T, what string, d time.Duration, f func() (R, error)) (R, error) {
	t.Helper()
	var v R
	var err error
	call(t, what, d, func() { v, err = f() })
	return v, err
}

// callE is call for a call that returns an error only.
func callE(t *testing.T, what string, d time.Duration, f func() error) error {
	t.Helper()
	_, err := callValue(t, what, d, func() (struct{}, error) { return struct{}{}, f() })
	return err
}

// tryValue is callValue for any goroutine: a hang or a panic comes back as
// the error instead of failing the test.
func tryValue[R any](what string, d time.Duration, f func() (R, error)) (R, error) {
	var v R
	var err error
	if cerr := callErr(what, d, func() { v, err = f() }); cerr != nil {
		return v, cerr
	}
	return v, err
}

// concurrently runs call(0) to call(n-1) at once and fails the test with
// the errors they return.
func concurrently(t *testing.T, n int, call func(g int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := call(g); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// closer is what every adapter kind has in common.
type closer interface {
	Close(ctx context.Context) error
}

func closeAdapter(t *testing.T, l Lifecycle, a closer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := callE(t, "Close", l.CallTimeout, func() error { return a.Close(ctx) }); err != nil {
		t.Errorf("close: %v", err)
	}
}

// kind is one adapter kind's side of the checks Lifecycle switches on; each
// Case implements it.
type kind interface {
	names() kindNames
	newAdapter(t *testing.T) closer
	badInput(t *testing.T)
	continues(t *testing.T)
	// inFlight is a call into a that waits long unless ctx ends.
	inFlight(a closer, ctx context.Context)
	// reconnects works, has its peer taken away (awayAndBack) and checks
	// that it works again.
	reconnects(t *testing.T)
}

// kindNames are the words one kind's Lifecycle checks are named with.
type kindNames struct {
	call, during, badInput, continues, reconnects string
}

var (
	sourceNames      = kindNames{"Read", "read", "acks and nacks of messages never read are answered", "reads work after failed calls", "reads work again once the peer is back"}
	transformerNames = kindNames{"Transform", "call", "bad input is answered per message", "calls work after failed calls", "calls work again once the function is back"}
	sinkNames        = kindNames{"Write", "write", "bad input is answered per message", "writes work after failed writes", "writes work again once the peer is back"}
)

// runLifecycle runs the checks l switches on, which every kind has.
func runLifecycle(t *testing.T, l Lifecycle, peer Peer, k kind) {
	t.Helper()
	n := k.names()
	if l.BadInput {
		t.Run(n.badInput, k.badInput)
	}
	if l.ContinuesAfterErrors {
		t.Run(n.continues, k.continues)
	}
	if l.CloseTwice {
		t.Run("closing twice is fine", func(t *testing.T) { checkCloseTwice(t, l, k.newAdapter(t)) })
	}
	if l.ConcurrentClose {
		t.Run("concurrent close during a "+n.during+" returns", func(t *testing.T) {
			a := k.newAdapter(t)
			checkConcurrentClose(t, l, a, n.call, func(ctx context.Context) { k.inFlight(a, ctx) })
		})
	}
	if l.Reconnects {
		t.Run(n.reconnects, func(t *testing.T) {
			if peer.Stop == nil || peer.Start == nil {
				t.Fatalf("Features.Reconnects set but the case has no Peer to stop and start")
			}
			k.reconnects(t)
		})
	}
}

// awayAndBack runs away with the peer stopped, then starts it again; it
// starts the peer again too when away fails the test.
func awayAndBack(t *testing.T, p Peer, away func()) {
	t.Helper()
	p.Stop(t)
	restarted := false
	defer func() {
		if !restarted {
			p.Start(t)
		}
	}()
	away()
	p.Start(t)
	restarted = true
}

// checkCloseTwice closes a twice; the second Close must return nil.
func checkCloseTwice(t *testing.T, l Lifecycle, a closer) {
	closeAdapter(t, l, a)
	if err := callE(t, "a second Close", l.CallTimeout, func() error { return a.Close(context.Background()) }); err != nil {
		t.Fatalf("a second Close: %v, want nil", err)
	}
}

// checkConcurrentClose starts inFlight (a call that would wait long), then
// closes a from three goroutines and cancels the call's context: every
// Close and the call must return.
func checkConcurrentClose(t *testing.T, l Lifecycle, a closer, what string, inFlight func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	callDone := make(chan error, 1)
	go func() {
		callDone <- callErr(what+" in flight during Close", l.CallTimeout+10*time.Second, func() { inFlight(ctx) })
	}()
	time.Sleep(100 * time.Millisecond)
	closeDone := make(chan error, 3)
	for i := 0; i < 3; i++ {
		go func() {
			cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer ccancel()
			closeDone <- callErr("Close from one of three goroutines", l.CallTimeout, func() { _ = a.Close(cctx) })
		}()
	}
	time.Sleep(50 * time.Millisecond)
	cancel()
	for i := 0; i < 3; i++ {
		if err := <-closeDone; err != nil {
			t.Error(err)
		}
	}
	if err := <-callDone; err != nil {
		t.Error(err)
	}
}

// connected connects a when it is a runner.Connector, as the engine does
// before its first call: a Case's New builds the adapter, the suite
// connects it, so every case goes through the adapter's Connect.
func connected[A any](t *testing.T, a A) A {
	t.Helper()
	c, ok := any(a).(runner.Connector)
	if !ok {
		return a
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.Connect(ctx); err != nil {
		t.Fatalf("Connect: %v", err)
	}
	return a
}
