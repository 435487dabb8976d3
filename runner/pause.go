package runner

import (
	"context"
	"sync"
)

// pauseGate stops the read loop while reading is paused (the pause
// ConfigMap, Numaflow's lifecycle.desiredPhase); in-flight work goes on.
type pauseGate struct {
	mu     sync.Mutex
	paused bool
	resume chan struct{} // closed when a pause ends
}

// set pauses or resumes reading; it reports whether that changed anything.
func (g *pauseGate) set(p bool) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if p == g.paused {
		return false
	}
	g.paused = p
	if p {
		g.resume = make(chan struct{})
	} else {
		close(g.resume)
	}
	return true
}

// isPaused reports whether reading is paused.
func (g *pauseGate) isPaused() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.paused
}

// wait blocks while paused; it reports false if ctx ended first.
func (g *pauseGate) wait(ctx context.Context) bool {
	g.mu.Lock()
	ch := g.resume
	paused := g.paused
	g.mu.Unlock()
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

// SetPaused stops reading (in-flight work still finishes) or resumes it.
func (e *Engine) SetPaused(p bool) {
	if !e.pause.set(p) {
		return
	}
	if p {
		e.log.Infow("paused: reading stopped, in-flight messages finish")
	} else {
		e.log.Infow("resumed reading")
	}
}

// Paused reports whether reading is paused.
func (e *Engine) Paused() bool { return e.pause.isPaused() }
