package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// sdkServers runs the bench's numaflow-go servers in this process, in a
// fresh socket directory, until the test ends.
type sdkServers struct {
	dir  string
	src  *fastSource
	sink *acceptSink
	tr   *identityTransformer
}

func startSDKServers(t *testing.T, transform bool) *sdkServers {
	t.Helper()
	// Unix socket paths must stay under 108 bytes: a short directory in /tmp.
	dir, err := os.MkdirTemp("", "mvbt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ctx, cancel := context.WithCancel(context.Background())
	s := &sdkServers{dir: dir, src: &fastSource{payload: []byte("0123456789")}, sink: &acceptSink{}}
	start := []struct {
		sock  string
		serve func(context.Context) error
	}{
		{sourceSock, sourceServer(dir, s.src).Start},
		{sinkSock, sinkServer(dir, s.sink).Start},
	}
	if transform {
		s.tr = &identityTransformer{}
		start = append(start, struct {
			sock  string
			serve func(context.Context) error
		}{transformSock, transformServer(dir, s.tr).Start})
	}
	done := make(chan error, len(start))
	for _, st := range start {
		go func() { done <- st.serve(ctx) }()
	}
	t.Cleanup(func() {
		cancel()
		for range start {
			if err := <-done; err != nil {
				t.Errorf("SDK server: %v", err)
			}
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for _, st := range start {
		for !exists(filepath.Join(dir, st.sock)) {
			if time.Now().After(deadline) {
				t.Fatalf("%s did not appear", st.sock)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return s
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func TestSequentialClientMovesAndAcksExactlyN(t *testing.T) {
	const n, batch = 1234, 100 // the last read asks for the 34 left
	for _, transform := range []bool{false, true} {
		name := "source->sink"
		if transform {
			name = "source->transformer->sink"
		}
		t.Run(name, func(t *testing.T) {
			s := startSDKServers(t, transform)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, err := openSequential(ctx, s.dir, transform)
			if err != nil {
				t.Fatal(err)
			}
			defer c.close()
			var acked, ackedBytes atomic.Int64
			if err := c.run(ctx, batch, n, &acked, &ackedBytes); err != nil {
				t.Fatal(err)
			}
			if ctx.Err() != nil {
				t.Fatalf("stopped by the deadline, not the count: %v", ctx.Err())
			}
			if got := acked.Load(); got != n {
				t.Errorf("client counted %d acked, want %d", got, n)
			}
			if got := ackedBytes.Load(); got != n*int64(len(s.src.payload)) {
				t.Errorf("client counted %d bytes, want %d", got, n*len(s.src.payload))
			}
			if got := s.src.seq.Load(); got != n {
				t.Errorf("source produced %d messages, want %d (the client read more than it moved)", got, n)
			}
			if got := s.sink.received.Load(); got != n {
				t.Errorf("sink received %d messages, want %d", got, n)
			}
			if got, want := s.sink.batches.Load(), int64((n+batch-1)/batch); got != want {
				t.Errorf("sink handled %d batches, want %d", got, want)
			}
			if got := s.sink.mostActive.Load(); got != 1 {
				t.Errorf("sink had up to %d Sink calls at once, want 1 (one stream)", got)
			}
			if transform {
				if got := s.tr.received.Load(); got != n {
					t.Errorf("transformer received %d messages, want %d", got, n)
				}
			}
			// The ack response can reach the client before the SDK's
			// handler has returned; wait briefly for the source's count.
			deadline := time.Now().Add(5 * time.Second)
			for s.src.acked.Load() != n && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if got := s.src.acked.Load(); got != n {
				t.Errorf("source got %d offsets acked, want %d", got, n)
			}
		})
	}
}

func TestSequentialClientStopsWithItsContext(t *testing.T) {
	s := startSDKServers(t, false)
	ctx, cancel := context.WithCancel(context.Background())
	c, err := openSequential(ctx, s.dir, false)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	var acked, ackedBytes atomic.Int64
	done := make(chan error, 1)
	go func() { done <- c.run(ctx, 50, 0, &acked, &ackedBytes) }()
	for deadline := time.Now().Add(10 * time.Second); acked.Load() < 500; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("acked %d in 10s", acked.Load())
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("run after cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not stop with its context")
	}
	if got := acked.Load(); got%50 != 0 {
		t.Errorf("acked %d: a batch was counted before its ack", got)
	}
}
