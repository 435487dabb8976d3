package runner_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/ratelimit"
	"github.com/monovertex/monovertex/runner/ratelimit/ratelimittest"
	"github.com/monovertex/monovertex/runner/runnertest"
)

// readClock records, per second of the fake clock, the read calls and the
// messages they returned.
type readClock struct {
	runner.Source
	clock *ratelimittest.JumpClock
	mu    sync.Mutex
	calls map[int64]int
	msgs  map[int64]int
}

func (r *readClock) Read(ctx context.Context, max int, timeout time.Duration) ([]*runner.Message, error) {
	msgs, err := r.Source.Read(ctx, max, timeout)
	sec := r.clock.Now().Unix()
	r.mu.Lock()
	r.calls[sec]++
	r.msgs[sec] += len(msgs)
	r.mu.Unlock()
	return msgs, err
}

func TestRateLimitGatesEveryReadCallAndLosesNothing(t *testing.T) {
	const total, batch, callsPerSecond = 1000, 10, 3
	clock := ratelimittest.NewJumpClock(time.Unix(1_700_000_000, 0))
	lim, err := ratelimit.New(ratelimit.Config{
		Bounds:    ratelimit.Bounds{Max: callsPerSecond, Min: callsPerSecond, RampUp: time.Second},
		BatchSize: batch, Clock: clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	src := runnertest.NewSource(runnertest.Messages(total))
	rc := &readClock{Source: src, clock: clock, calls: map[int64]int{}, msgs: map[int64]int{}}
	sink := runnertest.NewSink(nil)
	e := run(t, runner.Options{BatchSize: batch, RateLimiter: lim}, rc, nil, sink, nil)

	read := 0
	for sec, n := range rc.calls {
		if n > callsPerSecond {
			t.Fatalf("second %d: %d read calls, want at most %d", sec, n, callsPerSecond)
		}
		if rc.msgs[sec] > callsPerSecond*batch {
			t.Fatalf("second %d: %d messages read, want at most %d", sec, rc.msgs[sec], callsPerSecond*batch)
		}
		read += rc.msgs[sec]
	}
	if secs := len(rc.calls); secs < total/(callsPerSecond*batch) {
		t.Fatalf("%d messages read in %d seconds of the clock; at %d a second that takes at least %d", total, secs, callsPerSecond*batch, total/(callsPerSecond*batch))
	}
	if read != total || len(src.Acked()) != total || len(sink.WrittenIDs()) != total || src.Unfinished() != 0 {
		t.Fatalf("read %d, acked %d, written %d, unfinished %d; want %d, %d, %d, 0", read, len(src.Acked()), len(sink.WrittenIDs()), src.Unfinished(), total, total, total)
	}
	if st := e.Status(); st.RateLimit == nil || st.RateLimit.LimitPerSecond != callsPerSecond*batch {
		t.Fatalf("/status rate_limit = %+v, want a limit of %d messages a second", st.RateLimit, callsPerSecond*batch)
	}
}
