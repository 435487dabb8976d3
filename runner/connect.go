package runner

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// The backoff between failed Connect attempts: Benthos' starts at 100ms
// too; its cap of 1s would log a line a second for a peer that stays away.
const (
	connectFirstWait = 100 * time.Millisecond
	connectMaxWait   = 5 * time.Second
)

// connectWait is the wait after failed attempt number attempt (from 1).
func connectWait(attempt int) time.Duration {
	d := connectFirstWait
	for i := 1; i < attempt && d < connectMaxWait; i++ {
		d *= 2
	}
	return min(d, connectMaxWait)
}

// link is the engine's record of one Connector adapter's connection.
type link struct {
	c Connector
	// report is the adapter's role's Connection, the one its Env has.
	report    Connection
	connected atomic.Bool
	failures  atomic.Int64
	lastErr   atomic.Pointer[error]
}

// notConnected says why the adapter cannot be used yet, nil once it is
// connected (or for an adapter without Connect).
func (l *link) notConnected() error {
	if l == nil || l.connected.Load() {
		return nil
	}
	if p := l.lastErr.Load(); p != nil {
		return fmt.Errorf("not connected (%d attempts failed, the last: %w)", l.failures.Load(), *p)
	}
	return errors.New("not connected yet")
}

// state is the adapter's connection as /status shows it.
func (l *link) state() string {
	switch {
	case l == nil:
		return ""
	case l.connected.Load():
		return "connected"
	}
	return "connecting"
}

// stopsConnecting reports whether a failed Connect ends the start-up
// rather than being tried again: a Fatal error, or a setting the peer
// showed cannot work.
func stopsConnecting(err error) bool {
	var ce *ConfigError
	return IsFatal(err) || errors.As(err, &ce)
}

// Connect connects every adapter that implements Connector, each in a
// loop of its own that retries with backoff and logs every failed
// attempt, and returns once all of them are connected (nil), ctx ended
// (ctx's error), or one failed for good (its error, naming the adapter,
// once the others stopped trying). It runs once: later calls return what
// the first returned. Run calls it unless it was called before; the
// runner calls it itself to start serving /readyz and /status first.
func (e *Engine) Connect(ctx context.Context) error {
	e.connectOnce.Do(func() { e.connectErr = e.connectAll(ctx) })
	return e.connectErr
}

func (e *Engine) connectAll(ctx context.Context) error {
	e.state.Store("connecting")
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	started := map[*link]bool{}
	for _, a := range e.all {
		if a.link == nil || started[a.link] {
			continue
		}
		started[a.link] = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := e.connect(ctx, a); err != nil {
				cancel(err)
			}
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		if stopsConnecting(err) {
			e.recordError(err)
		}
		return err
	}
	// What an adapter tells about itself may depend on its peer (a map
	// container's mode is in its server-info file).
	for _, s := range e.stages {
		if ost, ok := s.t.(OutputStreamer); ok {
			s.streams = ost.StreamsOutputs()
		}
	}
	return nil
}

// connect tries a's Connect until it succeeds, fails for good (the error
// is returned) or ctx ends (nil is returned: the caller sees ctx).
func (e *Engine) connect(ctx context.Context, a namedAdapter) error {
	l := a.link
	start := time.Now()
	for attempt := 1; ; attempt++ {
		err := l.c.Connect(ctx)
		if err == nil {
			l.connected.Store(true)
			l.report.Up()
			if attempt > 1 {
				e.log.Infow("connected", "adapter", a.name, "attempts", attempt, "after", time.Since(start).Round(time.Millisecond).String())
			}
			return nil
		}
		if ctx.Err() != nil {
			return nil
		}
		if stopsConnecting(err) {
			return fmt.Errorf("%s: %w", a.name, err)
		}
		l.failures.Add(1)
		l.lastErr.Store(&err)
		l.report.Failed(err)
		wait := max(connectWait(attempt), RetryAfterOf(err))
		e.log.Warnw("cannot connect; retrying", "adapter", a.name, "attempt", attempt, "retry_in", wait.String(), zap.Error(err))
		if !Sleep(ctx, wait) {
			return nil
		}
	}
}
