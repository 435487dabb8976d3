package runner_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/runnertest"
)

// backgroundSink is udsink's exchange in small: a write whose context ends
// returns at once while its batch goes on in the background, which reads
// each message's ID (udsink.batch builds its result map from msgs[i].ID
// after the send) once the call has returned.
type backgroundSink struct {
	mu   sync.Mutex
	seen map[string]string // ID at the call -> ID read in the background
	wg   sync.WaitGroup
}

func (s *backgroundSink) Write(ctx context.Context, msgs []*runner.Message) ([]runner.WriteResult, error) {
	sent := make([]string, len(msgs))
	for i, m := range msgs {
		sent[i] = m.ID
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		<-ctx.Done()
		time.Sleep(50 * time.Millisecond) // the container's answer comes
		s.mu.Lock()
		defer s.mu.Unlock()
		for i, m := range msgs {
			s.seen[sent[i]] = m.ID
		}
	}()
	<-ctx.Done()
	return nil, ctx.Err()
}

func (s *backgroundSink) Close(context.Context) error { return nil }

// TestHandBackLeavesIDsToACallStillRunning: a call cut short by shutdown
// may still read its messages (the engine's own Release rule allows it,
// and udsink does); handing the inputs back must not rename them under it.
func TestHandBackLeavesIDsToACallStillRunning(t *testing.T) {
	for _, ids := range []runner.MessageIDs{runner.SourceIDs, runner.NumaflowIDs} {
		t.Run(string(ids), func(t *testing.T) {
			src := runnertest.NewSource(runnertest.Messages(10))
			sink := &backgroundSink{seen: map[string]string{}}
			e, err := runner.NewPipeline(runner.Options{Name: "mv", BatchSize: 10, ShutdownTimeout: 100 * time.Millisecond, MessageIDs: ids},
				runner.Pipeline{Source: src, Sink: sink})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			go func() { time.Sleep(100 * time.Millisecond); cancel() }()
			if err := e.Run(ctx); err != nil && !errors.Is(err, runner.ErrShutdownTimeout) {
				t.Fatal(err)
			}
			sink.wg.Wait()
			if len(sink.seen) == 0 {
				t.Fatal("no write")
			}
			for sent, later := range sink.seen {
				if sent != later {
					t.Errorf("the sink sent %q and, its call cut short, read %q", sent, later)
				}
			}
			if n := len(src.Nacked()); n != 10 {
				t.Fatalf("%d nacked, want 10", n)
			}
		})
	}
}

// lingeringSink fails its first call and goes on reading that call's
// messages' IDs for a while after it returned, as a call cut short may;
// the retry writes them.
type lingeringSink struct {
	mu    sync.Mutex
	calls int
	seen  map[string]string
	wg    sync.WaitGroup
}

func (s *lingeringSink) Write(ctx context.Context, msgs []*runner.Message) ([]runner.WriteResult, error) {
	s.mu.Lock()
	s.calls++
	first := s.calls == 1
	s.mu.Unlock()
	if !first {
		return runner.OKResults(len(msgs)), nil
	}
	sent := make([]string, len(msgs))
	for i, m := range msgs {
		sent[i] = m.ID
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		time.Sleep(200 * time.Millisecond)
		s.mu.Lock()
		defer s.mu.Unlock()
		for i, m := range msgs {
			s.seen[sent[i]] = m.ID
		}
	}()
	return nil, errors.New("connection reset")
}

func (s *lingeringSink) Close(context.Context) error { return nil }

// TestAckLeavesIDsToACallStillRunning: the same for an ack after a retry,
// while the call that failed first still reads its messages.
func TestAckLeavesIDsToACallStillRunning(t *testing.T) {
	src := runnertest.NewSource(runnertest.Messages(10))
	sink := &lingeringSink{seen: map[string]string{}}
	e, err := runner.NewPipeline(runner.Options{Name: "mv", BatchSize: 10, MessageIDs: runner.NumaflowIDs},
		runner.Pipeline{Source: src, Sink: sink})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	sink.wg.Wait()
	for sent, later := range sink.seen {
		if sent != later {
			t.Errorf("the sink sent %q and, its call cut short, read %q", sent, later)
		}
	}
	if n := len(src.Acked()); n != 10 {
		t.Fatalf("%d acked, want 10", n)
	}
	if err := src.Errors(); err != nil {
		t.Fatal(err)
	}
}
