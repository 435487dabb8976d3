package runner_test

import (
	"context"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/monovertex/monovertex/runner"
)

// benchSource hands out msgs in reads of up to a batch and ends once all
// of them were acked. Only the read loop calls Read.
type benchSource struct {
	msgs  []*runner.Message
	next  int
	acked atomic.Int64
	done  chan struct{}
	once  sync.Once
}

func (s *benchSource) Read(ctx context.Context, max int, timeout time.Duration) ([]*runner.Message, error) {
	if s.next < len(s.msgs) {
		n := min(max, len(s.msgs)-s.next)
		out := append([]*runner.Message(nil), s.msgs[s.next:s.next+n]...)
		s.next += n
		return out, nil
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-s.done:
		return nil, io.EOF
	case <-t.C:
	case <-ctx.Done():
	}
	return nil, nil
}

func (s *benchSource) Ack(_ context.Context, msgs []*runner.Message) error {
	if s.acked.Add(int64(len(msgs))) == int64(len(s.msgs)) {
		s.once.Do(func() { close(s.done) })
	}
	return nil
}

func (s *benchSource) Close(context.Context) error { return nil }

// benchPass passes each message on as it is.
type benchPass struct{}

func (benchPass) Transform(_ context.Context, msgs []*runner.Message) ([]runner.TransformResult, error) {
	out := make([]runner.TransformResult, len(msgs))
	for i := range msgs {
		out[i].Outputs = msgs[i : i+1 : i+1]
	}
	return out, nil
}

func (benchPass) Close(context.Context) error { return nil }

// benchSink takes every message.
type benchSink struct{}

func (benchSink) Write(_ context.Context, msgs []*runner.Message) ([]runner.WriteResult, error) {
	return runner.OKResults(len(msgs)), nil
}

func (benchSink) Close(context.Context) error { return nil }

// BenchmarkPipeline runs b.N messages through a transformer that passes
// each on to a sink that takes them all, with the source's IDs and with
// Numaflow's, for the engine's time and allocations per message.
func BenchmarkPipeline(b *testing.B) {
	for _, ids := range []runner.MessageIDs{runner.SourceIDs, runner.NumaflowIDs} {
		b.Run(string(ids), func(b *testing.B) {
			msgs := make([]*runner.Message, b.N)
			for i := range msgs {
				msgs[i] = &runner.Message{ID: strconv.Itoa(i), Value: []byte("v")}
			}
			src := &benchSource{msgs: msgs, done: make(chan struct{})}
			e, err := runner.NewPipeline(runner.Options{Name: "mv", BatchSize: 500, MessageIDs: ids, ReadTimeout: time.Millisecond},
				runner.Pipeline{Source: src, Sink: benchSink{}, Stages: []runner.Stage{{Kind: "pass", Role: runner.RoleTransformer, Transformer: benchPass{}}}})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			if err := e.Run(context.Background()); err != nil {
				b.Fatal(err)
			}
		})
	}
}
