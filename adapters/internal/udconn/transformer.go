package udconn

import (
	"context"
	"strconv"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/monovertex/monovertex/runner"
)

// StreamTransformer is what the transformer and map UDF adapters
// (udtransformer, udmap) share around their TransformEach: the connection
// to the container, the one stream of type S the calls share on it, the
// request ids, the bound on requests in flight across calls, and the
// methods that need nothing else. Each adapter embeds it.
type StreamTransformer[S closableStream] struct {
	// Conn is set by ConnectTo; nil before.
	Conn *Conn
	Log  *zap.SugaredLogger
	// Parent is the parent of the stream; it ends at Close.
	Parent context.Context
	cancel context.CancelFunc
	// InFlight bounds the requests in flight on the stream across calls
	// (numaflow-core's concurrency); nil is unbounded.
	InFlight *InFlight
	// Cur is the stream the calls share.
	Cur Current[S]
	ids atomic.Uint64

	// ep is the container; set, ready and the error reporting are what
	// ConnectTo needs.
	ep       Endpoint
	set      Settings
	ready    ReadyFunc
	reporter runner.ErrorReporter
	stage    runner.Role
}

// closableStream is what StreamTransformer needs of an adapter's stream.
type closableStream interface {
	adapterStream
	Close()
}

// Init sets the container (ep, which ConnectTo may change), the settings,
// the IsReady call and the logger, and starts Parent, which outlives ctx
// (the constructor's) until Close. It waits for nothing.
func (t *StreamTransformer[S]) Init(ctx context.Context, ep Endpoint, set Settings, ready ReadyFunc, log *zap.SugaredLogger) {
	t.ep, t.set, t.ready, t.Log = ep, set, ready, log
	t.Parent, t.cancel = context.WithCancel(context.WithoutCancel(ctx))
}

// ConnectTo waits for the container at ep to be up and compatible and
// connects to it (see Connect: its errors stop the runner's start-up),
// once: a call after it succeeded does nothing.
func (t *StreamTransformer[S]) ConnectTo(ctx context.Context, ep Endpoint) error {
	if t.Conn != nil {
		return nil
	}
	conn, err := Connect(ctx, ep, t.set, t.Log, t.ready)
	if err != nil {
		return err
	}
	conn.ReportTo(t.reporter, t.stage)
	t.ep, t.Conn = ep, conn
	return nil
}

// NextID is a request id unique over the life of the adapter.
func (t *StreamTransformer[S]) NextID() string { return strconv.FormatUint(t.ids.Add(1), 36) }

// SetConcurrency bounds the requests in flight to the container across
// concurrent calls, as numaflow-core bounds a transformer's and a map's by
// spec.limits.concurrency; n <= 0 leaves them unbounded. Call it before
// the first Transform.
func (t *StreamTransformer[S]) SetConcurrency(n int) {
	t.InFlight = NewInFlight(n)
}

// Ready reports whether the container is connected and ready.
func (t *StreamTransformer[S]) Ready(ctx context.Context) error { return t.Conn.Ready(ctx) }

// SidecarContainer is the user container's name, for /sidecar-livez.
func (t *StreamTransformer[S]) SidecarContainer() string { return t.ep.Numaflow }

// Close ends the stream the way the SDK servers expect (a closed send side
// first) and closes the connection.
func (t *StreamTransformer[S]) Close(context.Context) error {
	st, closedBefore := t.Cur.Close()
	if closedBefore {
		return nil
	}
	var none S
	if st != none {
		st.Close()
	}
	t.cancel()
	if t.Conn == nil {
		return nil // never connected
	}
	return t.Conn.Close()
}

// ReportErrorsTo makes the adapter report its container's runtime errors
// (broken streams, failed calls, handler panics) to r as errors of stage.
func (t *StreamTransformer[S]) ReportErrorsTo(r runner.ErrorReporter, stage runner.Role) {
	t.reporter, t.stage = r, stage
	if t.Conn != nil {
		t.Conn.ReportTo(r, stage)
	}
}

// Settings are the settings Init was given.
func (t *StreamTransformer[S]) Settings() Settings { return t.set }
