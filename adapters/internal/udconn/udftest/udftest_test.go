package udftest_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/monovertex/monovertex/adapters/internal/udconn/udftest"
)

// flakyServer stops by itself on its first Start, as a numaflow-go server
// does when a stream fails, and runs until its context ends afterwards.
type flakyServer struct{ starts, stopped *atomic.Int32 }

func (s flakyServer) Start(ctx context.Context) error {
	if s.starts.Add(1) == 1 {
		return errors.New("stream failed; shutting down")
	}
	<-ctx.Done()
	s.stopped.Add(1)
	return nil
}

func TestStartSDKStartsAServerThatStoppedByItselfAgain(t *testing.T) {
	var starts, stopped atomic.Int32
	t.Run("server", func(t *testing.T) {
		udftest.StartSDK(t, func() udftest.SDKServer { return flakyServer{&starts, &stopped} })
		deadline := time.Now().Add(5 * time.Second)
		for starts.Load() < 2 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	})
	if starts.Load() != 2 || stopped.Load() != 1 {
		t.Fatalf("started %d times, stopped at the end %d times; want 2 and 1", starts.Load(), stopped.Load())
	}
}
