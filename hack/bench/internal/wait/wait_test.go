package wait

import (
	"context"
	"testing"
	"time"
)

func TestSleepRunsOutOrEndsWithItsContext(t *testing.T) {
	if !Sleep(context.Background(), time.Millisecond) {
		t.Fatal("a sleep with a live context must run out and report true")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if Sleep(ctx, time.Hour) {
		t.Fatal("a sleep whose context ended must report false")
	}
	if d := time.Since(start); d > time.Minute {
		t.Fatalf("an ended context took %v to end the sleep", d)
	}
}
