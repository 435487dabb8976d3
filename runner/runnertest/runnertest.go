// Package runnertest has in-memory, fault-injecting adapters for engine
// tests: a finite source that counts acks and nacks and lets a test check
// every ack as it happens, a sink and a transformer whose answers a test
// decides per message. They are never registered, so production
// configuration cannot select them.
package runnertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/monovertex/monovertex/runner"
)

// Source is a finite in-memory source. It returns io.EOF once every message
// has been acked, and gives nacked messages out again.
type Source struct {
	mu       sync.Mutex
	cond     chan struct{} // closed and replaced when queue changes
	all      map[string]*runner.Message
	queue    []*runner.Message
	inflight map[string]*runner.Message
	acked    map[string]int
	nacked   map[string]int
	nacks    map[string]runner.Nack
	reads    int
	errs     []error

	// OnAck, if set, is called with each ack batch before it is recorded;
	// an error it returns is kept in Errors. Tests use it to check, at ack
	// time, that every acked message reached a final state.
	OnAck func(msgs []*runner.Message) error
	// ReadError, if set, is called before each read; an error it returns
	// fails that read.
	ReadError func(read int) error
	// ReadLatency delays each read.
	ReadLatency time.Duration
	// NumaflowOffsets, if set, are the offsets (by message ID) the engine
	// names outputs from under MV_MESSAGE_IDS=numaflow, where they are not
	// the message's ID (runner.NumaflowOffsetter).
	NumaflowOffsets map[string]string
}

// Partition, as a message's Offset, is the partition the source says the
// message was read from (runner.PartitionedSource); a message with another
// Offset names none.
type Partition uint16

var (
	_ runner.PartitionedSource = (*Source)(nil)
	_ runner.NumaflowOffsetter = (*Source)(nil)
)

// NewSource returns a source holding msgs.
func NewSource(msgs []*runner.Message) *Source {
	s := &Source{
		cond: make(chan struct{}), all: map[string]*runner.Message{}, inflight: map[string]*runner.Message{},
		acked: map[string]int{}, nacked: map[string]int{}, nacks: map[string]runner.Nack{},
	}
	for _, m := range msgs {
		s.all[m.ID] = m
		s.queue = append(s.queue, m)
	}
	return s
}

// Messages returns n messages with IDs m-0 .. m-(n-1) and values v-0 ...
func Messages(n int) []*runner.Message {
	out := make([]*runner.Message, n)
	base := time.UnixMilli(1_700_000_000_000)
	for i := range out {
		out[i] = &runner.Message{
			ID: fmt.Sprintf("m-%d", i), Value: []byte(fmt.Sprintf("v-%d", i)),
			Keys: []string{fmt.Sprintf("k%d", i%4)}, EventTime: base.Add(time.Duration(i) * time.Millisecond),
		}
	}
	return out
}

func (s *Source) signal() {
	close(s.cond)
	s.cond = make(chan struct{})
}

// Read returns queued messages, io.EOF once everything is acked.
func (s *Source) Read(ctx context.Context, max int, timeout time.Duration) ([]*runner.Message, error) {
	if s.ReadLatency > 0 {
		time.Sleep(s.ReadLatency)
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		s.reads++
		if s.ReadError != nil {
			if err := s.ReadError(s.reads); err != nil {
				s.mu.Unlock()
				return nil, err
			}
		}
		if len(s.queue) > 0 {
			n := min(max, len(s.queue))
			out := append([]*runner.Message(nil), s.queue[:n]...)
			s.queue = s.queue[n:]
			for _, m := range out {
				s.inflight[m.ID] = m
			}
			s.mu.Unlock()
			return out, nil
		}
		if len(s.inflight) == 0 && len(s.acked) == len(s.all) {
			s.mu.Unlock()
			return nil, io.EOF
		}
		wake := s.cond
		s.mu.Unlock()
		select {
		case <-wake:
		case <-deadline.C:
			return nil, nil
		case <-ctx.Done():
			return nil, nil
		}
	}
}

// Ack records acks; acking a message that is not in flight is an error.
func (s *Source) Ack(_ context.Context, msgs []*runner.Message) error {
	if s.OnAck != nil {
		if err := s.OnAck(msgs); err != nil {
			s.mu.Lock()
			s.errs = append(s.errs, err)
			s.mu.Unlock()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		if _, ok := s.inflight[m.ID]; !ok {
			s.errs = append(s.errs, fmt.Errorf("ack of %s, which is not in flight", m.ID))
		}
		delete(s.inflight, m.ID)
		s.acked[m.ID]++
	}
	s.signal()
	return nil
}

// Nack puts messages back at the end of the queue.
func (s *Source) Nack(_ context.Context, msgs []*runner.Message, n runner.Nack) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		if _, ok := s.inflight[m.ID]; !ok {
			s.errs = append(s.errs, fmt.Errorf("nack of %s, which is not in flight", m.ID))
			continue
		}
		delete(s.inflight, m.ID)
		s.nacked[m.ID]++
		s.nacks[m.ID] = n
		s.queue = append(s.queue, m)
	}
	s.signal()
	return nil
}

// SourcePartition is the Partition in m's Offset.
func (s *Source) SourcePartition(m *runner.Message) (uint16, bool) {
	p, ok := m.Offset.(Partition)
	return uint16(p), ok
}

// NumaflowOffset is m's entry in NumaflowOffsets; "" (m's ID) without one.
func (s *Source) NumaflowOffset(m *runner.Message) string {
	return s.NumaflowOffsets[m.ID]
}

// Pending counts queued and in-flight messages.
func (s *Source) Pending(context.Context) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int64(len(s.queue) + len(s.inflight)), nil
}

// Close does nothing.
func (s *Source) Close(context.Context) error { return nil }

// Acked returns how often each message was acked.
func (s *Source) Acked() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return copyCounts(s.acked)
}

// Nacked returns how often each message was nacked.
func (s *Source) Nacked() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return copyCounts(s.nacked)
}

// Unfinished counts the messages still queued or in flight.
func (s *Source) Unfinished() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue) + len(s.inflight)
}

// Errors returns the protocol errors seen (double acks, OnAck failures).
func (s *Source) Errors() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return errors.Join(s.errs...)
}

func copyCounts(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// WithoutNack wraps a Source so that it does not implement runner.Nacker,
// like sources that redeliver only after their own ack timeout.
func WithoutNack(s *Source) runner.Source { return withoutNack{s} }

type withoutNack struct{ s *Source }

func (w withoutNack) Read(ctx context.Context, max int, timeout time.Duration) ([]*runner.Message, error) {
	return w.s.Read(ctx, max, timeout)
}
func (w withoutNack) Ack(ctx context.Context, msgs []*runner.Message) error {
	return w.s.Ack(ctx, msgs)
}
func (w withoutNack) Close(ctx context.Context) error { return w.s.Close(ctx) }

// callGate is what Sink and Transformer share: a delay and a failure per
// call, and the count of offers per message, under one lock.
type callGate struct {
	mu       sync.Mutex
	attempts map[string]int
	calls    int

	// CallError, if set, fails a whole call (Write, Transform) when it
	// returns an error; it gets the call's number, counting from 1.
	CallError func(call int) error
	// Latency delays each call.
	Latency time.Duration
}

// answer is one call through g: it waits out Latency (or ctx), counts the
// call, lets CallError fail it, then answers each message with decide,
// which gets the message's offer count (from 1) and runs under g's lock.
func answer[R any](ctx context.Context, g *callGate, msgs []*runner.Message, decide func(m *runner.Message, attempt int) R) ([]R, error) {
	if g.Latency > 0 {
		select {
		case <-time.After(g.Latency):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls++
	if g.CallError != nil {
		if err := g.CallError(g.calls); err != nil {
			return nil, err
		}
	}
	res := make([]R, len(msgs))
	for i, m := range msgs {
		g.attempts[m.ID]++
		res[i] = decide(m, g.attempts[m.ID])
	}
	return res, nil
}

// Attempts returns how often the message with id was offered.
func (g *callGate) Attempts(id string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.attempts[id]
}

// Sink records what it was asked to write and answers as Decide says.
type Sink struct {
	callGate
	written map[string]*runner.Message
	order   []string

	// Decide returns the result for one message on its attempt-th write
	// (counting from 1); nil means always OK.
	Decide func(m *runner.Message, attempt int) runner.WriteResult
}

// NewSink returns a sink that answers as decide says (nil: always OK).
func NewSink(decide func(m *runner.Message, attempt int) runner.WriteResult) *Sink {
	return &Sink{callGate: callGate{attempts: map[string]int{}}, written: map[string]*runner.Message{}, Decide: decide}
}

// Write answers each message as Decide says and records the ones it took.
func (s *Sink) Write(ctx context.Context, msgs []*runner.Message) ([]runner.WriteResult, error) {
	return answer(ctx, &s.callGate, msgs, s.decide)
}

// decide is Decide (nil: OK) recording what the sink took; the caller
// holds the lock.
func (s *Sink) decide(m *runner.Message, attempt int) runner.WriteResult {
	var r runner.WriteResult
	if s.Decide != nil {
		r = s.Decide(m, attempt)
	}
	// ON_SUCCESS means the sink took the message, as OK does.
	if r.Status == runner.WriteOK || r.Status == runner.WriteOnSuccess {
		if _, dup := s.written[m.ID]; !dup {
			s.order = append(s.order, m.ID)
		}
		s.written[m.ID] = m
	}
	return r
}

// Close does nothing.
func (s *Sink) Close(context.Context) error { return nil }

// Written reports whether the message with id was written.
func (s *Sink) Written(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.written[id]
	return ok
}

// WrittenIDs returns the IDs written, in first-write order.
func (s *Sink) WrittenIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.order...)
}

// Message returns the written message with id, or nil.
func (s *Sink) Message(id string) *runner.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.written[id]
}

// Transformer answers as Decide says, per message.
type Transformer struct {
	callGate

	// Decide returns the result for one message on its attempt-th call.
	Decide func(m *runner.Message, attempt int) runner.TransformResult
}

// NewTransformer returns a transformer answering as decide says.
func NewTransformer(decide func(m *runner.Message, attempt int) runner.TransformResult) *Transformer {
	return &Transformer{callGate: callGate{attempts: map[string]int{}}, Decide: decide}
}

// Transform answers each message as Decide says.
func (t *Transformer) Transform(ctx context.Context, msgs []*runner.Message) ([]runner.TransformResult, error) {
	return answer(ctx, &t.callGate, msgs, t.Decide)
}

// Close does nothing.
func (t *Transformer) Close(context.Context) error { return nil }

// NackOf returns what the last nack of the message with id asked for.
func (s *Source) NackOf(id string) runner.Nack {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nacks[id]
}

// Copy returns an output message equal to m with value v.
func Copy(m *runner.Message, v string) *runner.Message {
	return &runner.Message{Value: []byte(v), Keys: m.Keys, EventTime: m.EventTime}
}
