package cewire

import (
	"context"
	"testing"
	"time"
)

func TestFloorHoldsBackOnlyMessagesAnsweredPermanently(t *testing.T) {
	now := time.Unix(1000, 0)
	f := NewFloor(time.Second)
	f.now = func() time.Time { return now }
	f.Mark("a")
	cases := []struct {
		name  string
		after time.Duration
		ids   []string
		want  time.Duration
	}{
		{"unmarked message", 0, []string{"b"}, 0},
		{"marked just now", 0, []string{"a"}, time.Second},
		{"marked one in a batch", 300 * time.Millisecond, []string{"b", "a"}, 700 * time.Millisecond},
		{"floor passed", time.Second, []string{"a"}, 0},
	}
	start := now
	for _, c := range cases {
		now = start.Add(c.after)
		if got := f.Delay(c.ids); got != c.want {
			t.Errorf("%s: delay %v, want %v", c.name, got, c.want)
		}
	}
}

func TestFloorForgetsWhatItNoLongerHoldsBack(t *testing.T) {
	now := time.Unix(1000, 0)
	f := NewFloor(time.Second)
	f.now = func() time.Time { return now }
	for i := 0; i < 100000; i++ {
		f.Mark(string(rune('a'+i%26)) + time.Duration(i).String())
		now = now.Add(time.Millisecond)
	}
	// At 1ms a mark, at most about a thousand are within one floor.
	if n := len(f.last); n > 5000 {
		t.Fatalf("floor remembers %d messages", n)
	}
}

func TestFloorWaitEndsWithTheContext(t *testing.T) {
	f := NewFloor(time.Hour)
	f.Mark("a")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := f.Wait(ctx, []string{"a"}); err == nil {
		t.Fatal("waited out an hour")
	}
}
