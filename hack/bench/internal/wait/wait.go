// Package wait holds the one wait the harness and its helper programs
// share: a sleep that ends early when its context does.
package wait

import (
	"context"
	"time"
)

// Sleep sleeps for d; it reports false if ctx ended first.
func Sleep(ctx context.Context, d time.Duration) bool {
	// Since Go 1.23 an unreferenced time.After timer is collected, so the
	// plain form no longer leaks the timer when ctx ends first.
	select {
	case <-time.After(d):
		return true
	case <-ctx.Done():
		return false
	}
}
