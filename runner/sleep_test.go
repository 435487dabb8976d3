package runner

import (
	"context"
	"testing"
	"time"
)

func TestSleep(t *testing.T) {
	live := context.Background()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		name string
		ctx  context.Context
		d    time.Duration
		want bool
	}{
		{"no wait, live context", live, 0, true},
		{"negative wait, live context", live, -time.Second, true},
		{"no wait, ended context", done, 0, false},
		{"short wait runs out", live, time.Millisecond, true},
		// An hour never runs out in a test: only the ended context can
		// return, so a true here would mean ctx was ignored.
		{"long wait, ended context", done, time.Hour, false},
	} {
		if got := Sleep(c.ctx, c.d); got != c.want {
			t.Errorf("%s: Sleep(%v) = %v, want %v", c.name, c.d, got, c.want)
		}
	}
}

func TestSleepEndsWhenContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	if Sleep(ctx, time.Hour) {
		t.Fatal("Sleep(1h) reported the wait ran out; want false once ctx was cancelled")
	}
	if ctx.Err() == nil {
		t.Fatal("Sleep returned before ctx ended")
	}
}
