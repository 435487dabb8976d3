// Package clock holds the context-aware wait that the engine, the adapters
// and the benchmark tools share, so a retry or a pacing wait never outlives
// a cancelled run.
package clock

import (
	"context"
	"time"
)

// Sleep waits for d or until ctx is done, and reports whether the wait ran
// out (false means ctx ended first). A d of zero or less does not wait; it
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
