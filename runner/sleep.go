package runner

import (
	"context"
	"time"
)

// Sleep waits for d or until ctx is done, and reports whether the wait ran
// out (false means ctx ended first): the engine's and the adapters' retry
// and pacing waits, which must never outlive a cancelled run. A d of zero or less does not wait; it
// reports whether ctx is still live.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
