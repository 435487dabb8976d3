package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/monovertex/monovertex/runner/ratelimit"
)

// OnFailure is what happens to a message whose retries are spent (MV_ON_FAILURE).
type OnFailure string

// The MV_ON_FAILURE choices.
const (
	// OnFailureRetry keeps retrying; nothing is given up.
	OnFailureRetry OnFailure = "retry"
	// OnFailureFallback writes the message to the fallback sink.
	OnFailureFallback OnFailure = "fallback"
	// OnFailureDrop drops the message on purpose and acks it.
	OnFailureDrop OnFailure = "drop"
)

// ErrShutdownTimeout is returned by Run when in-flight work did not finish
// within Options.ShutdownTimeout; what was unfinished was handed back or
// left unacked, so the source redelivers it. It is not a failure of the
// run: nothing unwritten was acked.
var ErrShutdownTimeout = errors.New("shutdown timeout: in-flight messages were left unacked for redelivery")

// Options configure an Engine. Zero values take the documented defaults.
type Options struct {
	// Name and Replica label metrics and status (MV_NAME, MV_REPLICA).
	Name    string
	Replica int
	// BatchSize is the most messages one read returns (MV_READ_BATCH_SIZE).
	BatchSize int
	// ReadTimeout is the longest wait for a batch to fill (MV_READ_TIMEOUT).
	ReadTimeout time.Duration
	// InflightBatches bounds how many read batches are being transformed,
	// written or acked at once (MV_INFLIGHT_BATCHES); memory is bounded by
	// BatchSize x payload x InflightBatches.
	InflightBatches int
	// Streaming is Numaflow's spec.streaming (MV_STREAMING): instead of
	// batch slots, the read loop is bounded by Concurrency messages read
	// but not yet acked or handed back, and reads again as soon as any of
	// them is settled, so one slow message holds only its own place.
	Streaming bool
	// Concurrency is the most messages in flight in streaming mode
	// (MV_CONCURRENCY, Numaflow's spec.limits.concurrency); it defaults to
	// BatchSize, as Numaflow's does.
	Concurrency int
	// Ordering is which messages keep their read order through the
	// stages and sinks (MV_ORDERING, see Ordering); empty is
	// OrderingUnordered.
	Ordering Ordering
	// MessageIDs is how message IDs are formed (MV_MESSAGE_IDS); empty
	// is SourceIDs.
	MessageIDs MessageIDs
	// Retry is the backoff for failed transformer and sink messages.
	Retry RetryPolicy
	// OnFailure decides for messages whose retries are spent.
	OnFailure OnFailure
	// ShutdownTimeout bounds draining once Run's context is done.
	ShutdownTimeout time.Duration
	// PendingInterval is how often the source's pending count is asked for.
	PendingInterval time.Duration
	// Lookback is the window of the processing rate used for scaling.
	Lookback time.Duration
	// Scaling bounds and targets the replica recommendation.
	Scaling Scaling
	// RateLimiter gates the source's read calls (Numaflow's
	// limits.rateLimit); nil reads without a limit. Run closes it.
	RateLimiter *ratelimit.Limiter
	// Logger receives the engine's logs; nil discards them.
	Logger *zap.SugaredLogger
	// Registerer receives the engine's metrics; nil keeps them private.
	Registerer prometheus.Registerer
	// ContainerErrors is the ring the adapters report their containers'
	// runtime errors to (through Env.Errors, built before the engine);
	// nil makes the engine its own.
	ContainerErrors *ContainerErrors
	// Tracer, when set, gets a span per batch and per stage of it (see
	// tracing.go); nil turns tracing off at no cost.
	Tracer trace.Tracer
	// Connections are the monovtx_connection_* metrics the adapters
	// report to (built before them); the engine reports each Connector's
	// attempts there. Nil reports nowhere.
	Connections *Connections
}

func (o *Options) setDefaults() {
	if o.BatchSize <= 0 {
		o.BatchSize = 500
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = time.Second
	}
	if o.InflightBatches <= 0 {
		o.InflightBatches = 4
	}
	if o.Concurrency <= 0 {
		o.Concurrency = o.BatchSize
	}
	if o.Retry.Interval <= 0 {
		o.Retry.Interval = time.Millisecond
	}
	if o.Retry.Factor <= 0 {
		o.Retry.Factor = 1
	}
	if o.OnFailure == "" {
		o.OnFailure = OnFailureRetry
	}
	if o.Ordering == "" {
		o.Ordering = OrderingUnordered
	}
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = 20 * time.Second
	}
	if o.PendingInterval <= 0 {
		o.PendingInterval = 5 * time.Second
	}
	if o.Lookback <= 0 {
		o.Lookback = 120 * time.Second
	}
	if o.Scaling.TargetSeconds <= 0 {
		o.Scaling.TargetSeconds = 20
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop().Sugar()
	}
	if o.Registerer == nil {
		o.Registerer = prometheus.NewRegistry()
	}
}

// Pipeline is what an engine runs: a source, an ordered chain of stages,
// and the sink tiers with their bypass conditions.
type Pipeline struct {
	Source Source
	Stages []Stage
	// Sink is required; Fallback and OnSuccess may be nil.
	Sink, Fallback, OnSuccess Sink
	Bypass                    Bypass
	// Kinds name the source's and the sinks' adapter kinds for logs and
	// /status; they may be left empty.
	Kinds struct{ Source, Sink, Fallback, OnSuccess string }
}

// adapterName is how logs and /status call an adapter: its place, and its
// kind when known.
func adapterName(place, kind string) string {
	if kind == "" {
		return place
	}
	return place + " (" + kind + ")"
}

// Engine moves messages from a source through a chain of stages to the
// sinks, acking each message only once it reached a final state.
type Engine struct {
	opts      Options
	log       *zap.SugaredLogger
	src       Source
	stages    []*stage
	sink      Sink
	fallback  Sink
	onSuccess Sink
	bypass    Bypass
	kinds     struct{ Source, Sink, Fallback, OnSuccess string }
	m         *Metrics
	tracer    trace.Tracer
	// budget bounds the messages in flight in streaming mode; nil in
	// batch mode.
	budget *messageBudget
	// inflight are the source IDs in flight, for a source that may
	// deliver them again meanwhile (RedeliversInFlight); nil otherwise.
	inflight *inflightIDs
	// lanes keep the read order under MV_ORDERING partition or key; nil
	// when unordered. The read loop sets it before any batch starts.
	lanes *lanes
	// results takes each acked input's written outputs (a ResultTaker
	// source that asked for them); nil otherwise.
	results ResultTaker
	// partitions says which partition a message was read from (a
	// PartitionedSource); offsets, under NumaflowIDs, which offset its
	// outputs are named from (a NumaflowOffsetter). Nil for a source that
	// does not tell.
	partitions PartitionedSource
	offsets    NumaflowOffsetter

	// totals are every count /status and the Prometheus counters report.
	totals *tally
	// load is what the engine measures for scaling.
	load    loadSignals
	lastErr atomic.Pointer[errorRecord]
	state   atomic.Value // string
	started time.Time
	hist    history
	// cerrs are the containers' runtime errors (/status errors), recent
	// the engine's own, both bounded.
	cerrs, recent *ContainerErrors
	// failures puts per-message failures in the log, a line per kind and
	// period rather than per message.
	failures *failureLog

	pause pauseGate

	// all are the adapters in pipeline order, with the connection of
	// each Connector; connectOnce runs Connect once, its result in
	// connectErr.
	all         []namedAdapter
	connectOnce sync.Once
	connectErr  error
}

type errorRecord struct {
	At    time.Time `json:"at"`
	Error string    `json:"error"`
}

// New builds an engine with at most one stage, the source transformer. The
// transformer and the fallback sink may be nil.
func New(opts Options, src Source, tr Transformer, sink, fallback Sink) (*Engine, error) {
	p := Pipeline{Source: src, Sink: sink, Fallback: fallback}
	if tr != nil {
		p.Stages = []Stage{{Role: RoleTransformer, Transformer: tr}}
	}
	return NewPipeline(opts, p)
}

// NewPipeline builds an engine that runs p.
func NewPipeline(opts Options, p Pipeline) (*Engine, error) {
	if p.Source == nil || p.Sink == nil {
		return nil, errors.New("runner: a source and a sink are required")
	}
	opts.setDefaults()
	if opts.OnFailure == OnFailureFallback && p.Fallback == nil {
		return nil, &ConfigError{Var: "MV_ON_FAILURE", Value: string(opts.OnFailure), Reason: "needs a fallback sink: set MV_FALLBACK_SINK"}
	}
	if !opts.Ordering.Valid() {
		return nil, &ConfigError{Var: "MV_ORDERING", Value: string(opts.Ordering), Reason: "must be unordered, partition or key"}
	}
	m, err := NewMetrics(opts.Registerer, opts.Name, opts.Replica)
	if err != nil {
		return nil, fmt.Errorf("runner: register metrics: %w", err)
	}
	e := &Engine{
		opts: opts, log: opts.Logger, src: p.Source, sink: p.Sink, fallback: p.Fallback, onSuccess: p.OnSuccess,
		bypass: p.Bypass, kinds: p.Kinds, m: m, totals: newTally(m, opts.Replica), tracer: opts.Tracer,
		started: time.Now(), cerrs: opts.ContainerErrors, recent: NewContainerErrors(), failures: newFailureLog(opts.Logger),
	}
	e.load.rate = newRateCounter(time.Now())
	if e.cerrs == nil {
		e.cerrs = NewContainerErrors()
	}
	for i, st := range p.Stages {
		if st.Transformer == nil {
			return nil, fmt.Errorf("runner: stage %d (%s) has no transformer", i, st.Kind)
		}
		s := &stage{Stage: st, t: st.Transformer, name: adapterName(string(st.Role), st.Kind)}
		if ost, ok := st.Transformer.(OutputStreamer); ok {
			s.streams = ost.StreamsOutputs()
		}
		switch st.Role {
		case RoleTransformer:
			s.time, s.errors, s.dropped = m.TransformerTime, &e.totals.transformerErrors, &e.totals.transformerDropped
		case RoleUDF:
			s.time, s.errors, s.dropped = m.UDFTime, &e.totals.udfErrors, &e.totals.udfDropped
		case RoleFilter:
			s.time, s.errors, s.dropped = m.FilterTime, &e.totals.filterErrors, &e.totals.filterDropped
		default:
			return nil, fmt.Errorf("runner: stage %d (%s) has role %q; want %q, %q or %q", i, st.Kind, st.Role, RoleTransformer, RoleUDF, RoleFilter)
		}
		e.stages = append(e.stages, s)
	}
	if opts.Streaming {
		e.budget = newMessageBudget(opts.Concurrency)
	}
	if r, ok := p.Source.(ResultTaker); ok && r.TakesResults() {
		e.results = r
	}
	e.partitions, _ = p.Source.(PartitionedSource)
	if opts.MessageIDs == NumaflowIDs {
		e.offsets, _ = p.Source.(NumaflowOffsetter)
	}
	if r, ok := p.Source.(RedeliversInFlight); ok && r.RedeliversInFlight() {
		e.inflight = &inflightIDs{ids: map[string]struct{}{}}
	}
	labels := prometheus.Labels{LabelName: opts.Name, LabelReplica: strconv.Itoa(opts.Replica)}
	if err := opts.Registerer.Register(newScalingCollector(e, labels)); err != nil {
		return nil, fmt.Errorf("runner: register scaling metrics: %w", err)
	}
	if err := opts.Registerer.Register(newCriticalCollector(e.cerrs, labels)); err != nil {
		return nil, fmt.Errorf("runner: register critical error metric: %w", err)
	}
	e.load.pendingAvg = newPendingWindow(opts.Lookback, labels)
	if err := opts.Registerer.Register(e.load.pendingAvg.gauge); err != nil {
		return nil, fmt.Errorf("runner: register monovtx_pending: %w", err)
	}
	if err := opts.Registerer.Register(lookbackGauge(opts.Lookback, labels)); err != nil {
		return nil, fmt.Errorf("runner: register monovtx_lookback_window_seconds: %w", err)
	}
	e.load.pending.Store(-1)
	m.PendingRaw.Set(-1)
	e.all = e.listAdapters(opts.Connections)
	e.state.Store("starting")
	return e, nil
}

// Metrics returns the engine's collectors.
func (e *Engine) Metrics() *Metrics { return e.m }

// Run connects the adapters (see Connect), then reads until ctx is done,
// the source ends (io.EOF) or a fatal error happens; then it finishes what
// is in flight (bounded by ShutdownTimeout once ctx is done), closes every
// adapter, and returns. It returns nil after a clean drain or a stop while
// connecting, ErrShutdownTimeout when the budget ran out, or the fatal
// error (a Connect's that stopped the start-up among them).
func (e *Engine) Run(ctx context.Context) error {
	if err := e.Connect(ctx); err != nil {
		e.closeAll(time.Now().Add(closeBudget(e.opts.ShutdownTimeout)))
		e.closeLimiter(time.Now().Add(closeBudget(e.opts.ShutdownTimeout)))
		e.state.Store("stopped")
		if stopsConnecting(err) {
			return err
		}
		// Stopped while connecting: nothing was read.
		return nil
	}
	workCtx, cancelWork := context.WithCancelCause(context.Background())
	defer cancelWork(nil)
	readCtx, cancelRead := context.WithCancel(ctx)
	defer cancelRead()

	var fatalOnce sync.Once
	var fatalErr error
	onFatal := func(err error) {
		fatalOnce.Do(func() {
			fatalErr = err
			e.recordError(err)
			// As numaflow-core does when its forwarder fails: the runner's
			// own container ("numa"), counted as mvtx_runtime_error.
			e.cerrs.ReportContainerError(ContainerError{Container: "numa", Code: "Internal error",
				Message: "Error occurred while running MonoVertex", Details: err.Error(), Reason: ReasonMonoVertexRuntime})
			e.log.Errorw("fatal error, stopping", zap.Error(err))
			cancelRead()
			cancelWork(err)
		})
	}

	pollDone := make(chan struct{})
	go func() { defer close(pollDone); e.pollPending(readCtx) }()
	histCtx, stopHist := context.WithCancel(context.Background())
	histDone := make(chan struct{})
	go func() { defer close(histDone); e.sampleHistory(histCtx) }()
	defer func() { stopHist(); <-histDone }()
	stopFailures, failuresDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(failuresDone); e.failures.run(stopFailures) }()
	defer func() { close(stopFailures); <-failuresDone }()

	e.state.Store("running")
	var wg sync.WaitGroup
	readErr := e.readLoop(readCtx, workCtx, &wg, onFatal)
	if readErr != nil && !errors.Is(readErr, io.EOF) {
		onFatal(readErr)
	}
	if rs, ok := e.src.(ReadStopper); ok {
		rs.StopReading()
	}
	e.state.Store("draining")
	e.log.Infow("reading stopped, finishing in-flight messages", "reason", stopReason(ctx, readErr))

	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	var runErr error
	closeBy := time.Now().Add(closeBudget(e.opts.ShutdownTimeout))
	select {
	case <-drained:
	case <-workCtx.Done():
		<-drained
	case <-ctx.Done():
		// One budget for the whole shutdown: draining gets all of it but
		// a reserve for closing the adapters, so the process exits within
		// MV_SHUTDOWN_TIMEOUT even when the drain cannot finish.
		shutdownBy := time.Now().Add(e.opts.ShutdownTimeout)
		reserve := closeBudget(e.opts.ShutdownTimeout)
		timer := time.NewTimer(e.opts.ShutdownTimeout - reserve)
		select {
		case <-drained:
		case <-timer.C:
			runErr = ErrShutdownTimeout
			cancelWork(ErrShutdownTimeout)
			<-drained
		}
		timer.Stop()
		closeBy = shutdownBy
	}
	cancelRead()
	<-pollDone
	if fatalErr != nil {
		runErr = fatalErr
	}
	e.closeAll(closeBy)
	e.closeLimiter(closeBy)
	e.state.Store("stopped")
	return runErr
}

// closeLimiter leaves the read rate limiter's shared pool, which lets the
// other replicas take this one's share at once instead of after the TTL;
// past deadline the TTL has to do.
func (e *Engine) closeLimiter(deadline time.Time) {
	l := e.opts.RateLimiter
	if l == nil {
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if err := l.Close(ctx); err != nil {
		e.log.Warnw("rate limiter close failed", zap.Error(err))
	}
}

// closeBudget is the part of the shutdown budget kept for closing the
// adapters: a quarter of it, at most 2s.
func closeBudget(shutdown time.Duration) time.Duration {
	return min(shutdown/4, 2*time.Second)
}

func stopReason(ctx context.Context, readErr error) string {
	switch {
	case errors.Is(readErr, io.EOF):
		return "source ended"
	case readErr != nil:
		return readErr.Error()
	case ctx.Err() != nil:
		return "shutdown requested"
	}
	return "fatal error"
}

func (e *Engine) closeAll(deadline time.Time) {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	for _, a := range e.adapters() {
		if err := a.v.(interface{ Close(context.Context) error }).Close(ctx); err != nil {
			e.log.Warnw("close failed", "adapter", a.name, zap.Error(err))
		}
	}
}

type namedAdapter struct {
	name string
	v    any
	// link is the adapter's connection, nil unless it is a Connector;
	// an adapter in two places has one link.
	link *link
}

// adapters lists every adapter in pipeline order, leaving out those not set.
func (e *Engine) adapters() []namedAdapter { return e.all }

// listAdapters lists every adapter in pipeline order, with a link for
// each Connector reporting to its role's Connection.
func (e *Engine) listAdapters(conns *Connections) []namedAdapter {
	type placed struct {
		namedAdapter
		role Role
	}
	all := []placed{{namedAdapter{name: adapterName("source", e.kinds.Source), v: e.src}, RoleSource}}
	for _, s := range e.stages {
		all = append(all, placed{namedAdapter{name: s.name, v: s.t}, s.Role})
	}
	for _, a := range []struct {
		name string
		s    Sink
		role Role
	}{{adapterName("sink", e.kinds.Sink), e.sink, RoleSink}, {adapterName("fallback sink", e.kinds.Fallback), e.fallback, RoleFallbackSink},
		{adapterName("onSuccess sink", e.kinds.OnSuccess), e.onSuccess, RoleOnSuccessSink}} {
		if a.s != nil {
			all = append(all, placed{namedAdapter{name: a.name, v: a.s}, a.role})
		}
	}
	out := make([]namedAdapter, len(all))
	for i, a := range all {
		out[i] = a.namedAdapter
		c, ok := a.v.(Connector)
		if !ok {
			continue
		}
		for j := range i {
			if out[j].link != nil && sameAdapter(out[j].v, a.v) {
				out[i].link = out[j].link
			}
		}
		if out[i].link == nil {
			out[i].link = &link{c: c, report: conns.For(a.role)}
		}
	}
	return out
}

// sameAdapter reports whether a and b are one adapter, without the panic
// == has for values of a type that cannot be compared.
func sameAdapter(a, b any) bool {
	if reflect.TypeOf(a) != reflect.TypeOf(b) || !reflect.TypeOf(a).Comparable() {
		return false
	}
	return a == b
}

func (e *Engine) recordError(err error) {
	e.lastErr.Store(&errorRecord{At: time.Now(), Error: err.Error()})
	e.recent.ReportContainerError(ContainerError{Container: "numa", Message: err.Error()})
}

// ContainerErrors is the ring of the containers' runtime errors.
func (e *Engine) ContainerErrors() *ContainerErrors { return e.cerrs }

// Ready reports nil while the engine runs (paused counts as running),
// every Connector is connected and every adapter that can tell says it is
// ready; starting, connecting, draining and stopped are not ready, so
// Knative stops routing to a replica going away.
func (e *Engine) Ready(ctx context.Context) error {
	for _, a := range e.adapters() {
		if err := a.link.notConnected(); err != nil {
			return fmt.Errorf("%s %w", a.name, err)
		}
	}
	if state, _ := e.state.Load().(string); state != "running" {
		return errors.New(state)
	}
	for _, a := range e.adapters() {
		if r, ok := a.v.(Readier); ok {
			if err := r.Ready(ctx); err != nil {
				return fmt.Errorf("%s not ready: %w", a.name, err)
			}
		}
	}
	return nil
}
