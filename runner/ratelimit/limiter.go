package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Consensus is a store's answer to a heartbeat: whether every active
// replica reports the same pool size, that size (the largest reported when
// they disagree), and how many replicas are active.
type Consensus struct {
	Agree  bool
	Size   int
	Active int
}

// Store is where replicas agree on how many of them share the pool
// (Numaflow's rateLimit.store). Every method may fail; the limiter keeps
// going on what it last knew.
type Store interface {
	// Register adds the replica and returns the pool size it should report
	// first, and the pool size it left behind when it last deregistered
	// within the TTL (0 if none).
	Register(ctx context.Context, id string) (poolSize int, prevMaxFilled float64, err error)
	// Sync is the heartbeat: it reports this replica's pool size, drops the
	// replicas whose heartbeat is older than the TTL, and answers whether
	// the active ones agree.
	Sync(ctx context.Context, id string, poolSize int) (Consensus, error)
	// Deregister removes the replica and keeps its pool size for a resumed
	// ramp-up.
	Deregister(ctx context.Context, id string, maxFilled float64) error
	// Close releases the connection.
	Close() error
}

// Config configures a Limiter.
type Config struct {
	// Bounds are in read calls per second (messages divided by the batch size).
	Bounds Bounds
	// BatchSize turns read calls into messages for the metrics and logs.
	BatchSize int
	// Store shares the pool between replicas; nil gives every replica its own.
	Store Store
	// ProcessorID names this replica in the store.
	ProcessorID string
	// Resume starts from the pool size this ProcessorID left behind within
	// the TTL instead of Min (Numaflow's resumedRampUp).
	Resume bool
	// SyncInterval is the heartbeat period; Numaflow's is 100ms.
	SyncInterval time.Duration
	// Logger receives warnings about the store; nil discards them.
	Logger *zap.SugaredLogger
	// Registerer receives the metrics, labelled with Labels; nil keeps them private.
	Registerer prometheus.Registerer
	Labels     prometheus.Labels
	// Clock is the time source; nil is the wall clock. Tests pass a fake.
	Clock Clock
}

// Clock is the limiter's time source.
type Clock interface {
	Now() time.Time
	// After waits like time.After.
	After(d time.Duration) <-chan time.Time
}

type wallClock struct{}

func (wallClock) Now() time.Time                         { return time.Now() }
func (wallClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Status is what /status shows of the limiter.
type Status struct {
	// Store is memory (each replica on its own) or redis (shared).
	Store string `json:"store"`
	// Replicas is how many replicas share the pool, as they last agreed.
	Replicas int `json:"replicas"`
	// LimitPerSecond is this replica's share of the current second's
	// pool in messages: read calls times the read batch size.
	LimitPerSecond int `json:"limit_per_second"`
	// Throttled reports whether a read waited for a token in the last few
	// seconds: reading is held at the limit.
	Throttled bool `json:"throttled"`
}

// throttledWindow is how recently a read must have waited for the limiter
// to count as holding reading back.
const throttledWindow = 5 * time.Second

// Limiter hands out read calls at the configured rate.
type Limiter struct {
	cfg   Config
	clock Clock
	log   *zap.SugaredLogger

	startMu sync.Mutex
	started bool
	pool    *pool

	known, desired atomic.Int64 // pool sizes: agreed, and reported next
	filled         atomic.Int64 // the whole pool of the current second, in read calls
	lastWait       atomic.Int64 // unix nanoseconds of the last wait for a token
	storeDown      atomic.Bool

	stopSync context.CancelFunc
	syncDone chan struct{}

	granted, storeErrors, waitSeconds prometheus.Counter
}

// New builds a limiter and registers its metrics. With a store, it joins
// the pool on the first Acquire.
func New(cfg Config) (*Limiter, error) {
	b := &cfg.Bounds
	if b.Max < 1 {
		return nil, errors.New("ratelimit: max must be at least one read per second")
	}
	b.Min = min(max(b.Min, 0), b.Max)
	if b.Mode == "" {
		b.Mode = Relaxed
	}
	if cfg.BatchSize < 1 {
		cfg.BatchSize = 1
	}
	if cfg.SyncInterval <= 0 {
		cfg.SyncInterval = 100 * time.Millisecond
	}
	l := &Limiter{cfg: cfg, clock: cfg.Clock, log: cfg.Logger}
	if l.clock == nil {
		l.clock = wallClock{}
	}
	if l.log == nil {
		l.log = zap.NewNop().Sugar()
	}
	l.known.Store(1)
	l.desired.Store(1)
	reg := cfg.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: cfg.Labels})
	}
	l.granted = counter("monovtx_rate_limit_tokens_granted_total", "Read calls the rate limiter allowed; each reads up to MV_READ_BATCH_SIZE messages.")
	l.storeErrors = counter("monovtx_rate_limit_store_errors_total", "Failed calls to the rate limiter's shared store (register, heartbeat, deregister); the limiter keeps its last agreed share.")
	l.waitSeconds = counter("monovtx_rate_limit_wait_seconds_total", "Seconds the read loop waited for a rate limiter token: time reading was held back by the limit.")
	limit := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "monovtx_rate_limit_messages_per_second", ConstLabels: cfg.Labels,
		Help: "This replica's current rate limit: its share of this second's token pool times MV_READ_BATCH_SIZE.",
	}, func() float64 { return float64(l.limitPerSecond()) })
	replicas := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "monovtx_rate_limit_replicas", ConstLabels: cfg.Labels,
		Help: "Replicas sharing the rate limit, as they last agreed in the store (1 without a shared store).",
	}, func() float64 { return float64(l.known.Load()) })
	for _, c := range []prometheus.Collector{l.granted, l.storeErrors, l.waitSeconds, limit, replicas} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("ratelimit: register metrics: %w", err)
		}
	}
	if cfg.Store == nil {
		l.pool = newPool(cfg.Bounds, cfg.Bounds.Min, l.clock.Now().Unix())
		l.started = true
		l.filled.Store(int64(cfg.Bounds.Min))
	}
	return l, nil
}

// limitPerSecond is this replica's share of the current second's pool, in
// messages: as the replicas divide the pool when they take from it.
func (l *Limiter) limitPerSecond() int {
	return int(l.filled.Load()) / max(int(l.known.Load()), 1) * l.cfg.BatchSize
}

// Acquire blocks until one read call is allowed, and reports false if ctx
// ended first. It is numaflow-core's acquire_n(1) before each source read:
// when this second's share is spent it waits for the next second.
func (l *Limiter) Acquire(ctx context.Context) bool {
	if !l.start(ctx) {
		return false
	}
	var waitedFrom time.Time
	for {
		now := l.clock.Now()
		got, filled := l.pool.take(1, now.Unix(), int(l.known.Load()))
		if filled >= 0 {
			l.filled.Store(int64(filled))
		}
		if got > 0 {
			if !waitedFrom.IsZero() {
				l.waitSeconds.Add(now.Sub(waitedFrom).Seconds())
			}
			l.granted.Inc()
			return true
		}
		if waitedFrom.IsZero() {
			waitedFrom = now
		}
		l.lastWait.Store(now.UnixNano())
		// Wait for the top of the next second, when the pool refills.
		next := now.Truncate(time.Second).Add(time.Second)
		select {
		case <-l.clock.After(next.Sub(now)):
		case <-ctx.Done():
			l.waitSeconds.Add(l.clock.Now().Sub(waitedFrom).Seconds())
			return false
		}
	}
}

// start joins the shared pool once: register, wait until the replicas
// agree on their number, then heartbeat in the background. Until then
// nothing is read, so the limit holds even while the store is away.
func (l *Limiter) start(ctx context.Context) bool {
	l.startMu.Lock()
	defer l.startMu.Unlock()
	if l.started {
		return true
	}
	st, id := l.cfg.Store, l.cfg.ProcessorID
	var size int
	var prev float64
	if !l.retry(ctx, "register", func() (err error) { size, prev, err = st.Register(ctx, id); return err }) {
		return false
	}
	l.desired.Store(int64(max(size, 1)))
	if !l.waitForAgreement(ctx) {
		return false
	}
	// Numaflow waits a second after agreeing, so replicas starting together
	// do not hand out one second's tokens on different pool sizes.
	select {
	case <-l.clock.After(time.Second):
	case <-ctx.Done():
		return false
	}
	burst := l.cfg.Bounds.Min
	if l.cfg.Resume && prev > 0 {
		burst = min(max(int(prev), l.cfg.Bounds.Min), l.cfg.Bounds.Max)
	}
	l.pool = newPool(l.cfg.Bounds, burst, l.clock.Now().Unix())
	l.filled.Store(int64(burst))
	syncCtx, cancel := context.WithCancel(context.Background())
	l.stopSync, l.syncDone = cancel, make(chan struct{})
	go l.heartbeat(syncCtx)
	l.started = true
	l.log.Infow("rate limiter joined the shared pool", "processor", id, "replicas", l.known.Load(), "start_tokens", burst)
	return true
}

// retry calls f until it succeeds or ctx ends, backing off from 100ms to 5s.
func (l *Limiter) retry(ctx context.Context, what string, f func() error) bool {
	delay := 100 * time.Millisecond
	for {
		err := f()
		if err == nil {
			return true
		}
		l.storeFailed(what, err)
		select {
		case <-l.clock.After(delay):
		case <-ctx.Done():
			return false
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// waitForAgreement heartbeats every 100ms until the active replicas agree.
func (l *Limiter) waitForAgreement(ctx context.Context) bool {
	for {
		var c Consensus
		if !l.retry(ctx, "heartbeat", func() (err error) {
			c, err = l.cfg.Store.Sync(ctx, l.cfg.ProcessorID, int(l.desired.Load()))
			return err
		}) {
			return false
		}
		l.storeUp()
		if l.apply(c) {
			return true
		}
		select {
		case <-l.clock.After(100 * time.Millisecond):
		case <-ctx.Done():
			return false
		}
	}
}

// apply takes a heartbeat's answer and reports whether the replicas agree.
// The share changes only on agreement; until then the last agreed one
// stays. Numaflow agrees whenever every report is equal, so when a replica
// leaves, the others keep dividing by the old count for good; here an
// agreement also needs the count of active replicas to match, and a
// disagreement makes this replica report that count, so the pool is shared
// by the replicas that are there.
func (l *Limiter) apply(c Consensus) bool {
	if c.Agree && c.Size == c.Active && c.Size > 0 {
		l.known.Store(int64(c.Size))
		l.desired.Store(int64(c.Size))
		return true
	}
	if c.Active > 0 {
		l.desired.Store(int64(c.Active))
	}
	return false
}

func (l *Limiter) heartbeat(ctx context.Context) {
	defer close(l.syncDone)
	for {
		select {
		case <-l.clock.After(l.cfg.SyncInterval):
		case <-ctx.Done():
			return
		}
		callCtx, cancel := context.WithTimeout(ctx, time.Second)
		c, err := l.cfg.Store.Sync(callCtx, l.cfg.ProcessorID, int(l.desired.Load()))
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			// Numaflow keeps the last agreed pool size while the store is
			// away, and so does this: each replica goes on with its share.
			l.storeFailed("heartbeat", err)
			continue
		}
		l.storeUp()
		before := l.known.Load()
		if l.apply(c) && l.known.Load() != before {
			l.log.Infow("rate limit replicas changed", "from", before, "to", l.known.Load())
		}
	}
}

func (l *Limiter) storeFailed(what string, err error) {
	l.storeErrors.Inc()
	if !l.storeDown.Swap(true) {
		l.log.Warnw("rate limiter store unreachable; keeping the last agreed share of the limit and retrying",
			"call", what, "replicas", l.known.Load(), zap.Error(err))
	}
}

func (l *Limiter) storeUp() {
	if l.storeDown.Swap(false) {
		l.log.Infow("rate limiter store reachable again")
	}
}

// Status reports the limiter's state for /status and the scaling signals.
func (l *Limiter) Status() Status {
	s := Status{Store: "memory", Replicas: int(l.known.Load()), LimitPerSecond: l.limitPerSecond()}
	if l.cfg.Store != nil {
		s.Store = "redis"
	}
	if last := l.lastWait.Load(); last != 0 {
		s.Throttled = l.clock.Now().Sub(time.Unix(0, last)) < throttledWindow
	}
	return s
}

// Close stops the heartbeat and leaves the shared pool, keeping this
// replica's pool size there for a resumed ramp-up.
func (l *Limiter) Close(ctx context.Context) error {
	l.startMu.Lock()
	defer l.startMu.Unlock()
	if l.cfg.Store == nil {
		return nil
	}
	defer l.cfg.Store.Close()
	if !l.started {
		return nil
	}
	l.stopSync()
	<-l.syncDone
	if err := l.cfg.Store.Deregister(ctx, l.cfg.ProcessorID, l.pool.size()); err != nil {
		l.storeErrors.Inc()
		return fmt.Errorf("ratelimit: deregister %s: %w (the store drops it after the TTL)", l.cfg.ProcessorID, err)
	}
	return nil
}
