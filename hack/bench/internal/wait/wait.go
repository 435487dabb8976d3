// Package wait holds the one wait the harness and its helper programs
// share: a sleep that ends early when its context does.
package wait

import (
	"context"
	"time"
)

// Sleep sleeps for d; it reports false if ctx ended first.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
