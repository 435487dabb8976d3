package runner

import (
	"context"
)

// SetPaused stops reading (in-flight work still finishes) or resumes it.
func (e *Engine) SetPaused(p bool) {
	e.pauseMu.Lock()
	defer e.pauseMu.Unlock()
	if p == e.paused {
		return
	}
	e.paused = p
	if p {
		e.resume = make(chan struct{})
		e.log.Infow("paused: reading stopped, in-flight messages finish")
	} else {
		close(e.resume)
		e.log.Infow("resumed reading")
	}
}

// Paused reports whether reading is paused.
func (e *Engine) Paused() bool {
	e.pauseMu.Lock()
	defer e.pauseMu.Unlock()
	return e.paused
}

// waitResumed blocks while paused; it reports false if ctx ended first.
func (e *Engine) waitResumed(ctx context.Context) bool {
	e.pauseMu.Lock()
	ch := e.resume
	paused := e.paused
	e.pauseMu.Unlock()
	if !paused {
		return true
	}
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	}
}
