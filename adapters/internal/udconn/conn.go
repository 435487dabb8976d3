package udconn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/numaproj/numaflow-go/pkg/info"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/status"

	"github.com/monovertex/monovertex/adapters/internal/udwire"
	"github.com/monovertex/monovertex/runner"
)

// Timing of the wait for a container. Polling is cheap (a stat, and a dial
// of a local socket), and 200ms keeps a restarted container's downtime short
// without a busy loop.
const (
	pollInterval = 200 * time.Millisecond
	// endMarkerWait is how long a server-info file may lack its end marker.
	// The SDKs write the JSON and the marker in one go, so a file still
	// incomplete after this is not a Numaflow SDK server of a supported version.
	endMarkerWait = 2 * time.Second
	// probeTimeout bounds one IsReady call.
	probeTimeout = 2 * time.Second
	// waitLogEvery spaces out the "still waiting" logs.
	waitLogEvery = 5 * time.Second
)

// ReadyFunc calls a container's IsReady RPC over cc.
type ReadyFunc func(ctx context.Context, cc grpc.ClientConnInterface) (bool, error)

// Client is a gRPC connection to one container: the runner's own transport
// (package udwire) or grpc-go's, as MV_UDF_TRANSPORT chooses.
type Client interface {
	grpc.ClientConnInterface
	Close() error
}

// ErrClosed is returned by Get after Close.
var ErrClosed = errors.New("connection closed")

// Conn is the gRPC connection to one Numaflow container. It is made once
// the container's server-info file is complete and compatible and its
// socket answers IsReady, and it is remade the same way when the container
// restarts: an adapter that sees a stream break calls Fail, and callers of
// Get wait until the container is back, or get a runner.Fatal error once it
// stayed away longer than MV_UDF_RECONNECT_TIMEOUT.
type Conn struct {
	ep    Endpoint
	set   Settings
	log   *zap.SugaredLogger
	ready ReadyFunc

	warned sync.Map // server-info warnings already logged
	// si is the server-info of the container of the current connection,
	// set with it.
	si atomic.Pointer[info.ServerInfo]

	ctx    context.Context // ends at Close
	cancel context.CancelFunc

	mu        sync.Mutex
	cc        Client
	gen       uint64
	file      fileID
	down      bool
	downSince time.Time
	lastErr   error
	back      chan struct{} // closed when a reconnect attempt ends
	fatal     error
	closed    bool
	reporter  runner.ErrorReporter
	stage     string
}

// Connect waits (up to Settings.StartupTimeout) for the container's
// server-info file, checks it, dials the socket and waits for IsReady.
// A file that does not fit returns an *IncompatibleError (a
// *runner.ConfigError), a container that did not come up in time a
// runner.Fatal error: the wait is the retry, so an adapter's
// runner.Connector returns either as it is and the start-up stops. The
// engine reports the connection up; each failed poll is reported here.
func Connect(ctx context.Context, ep Endpoint, set Settings, log *zap.SugaredLogger, ready ReadyFunc) (*Conn, error) {
	if log == nil {
		log = zap.NewNop().Sugar()
	}
	c := &Conn{ep: ep, set: set, log: log.With("container", ep.Name, "socket", ep.Socket), ready: ready}
	c.ctx, c.cancel = context.WithCancel(context.WithoutCancel(ctx))
	start := time.Now()
	cc, id, si, err := c.wait(ctx, start.Add(set.StartupTimeout))
	if err != nil {
		c.cancel()
		if IsIncompatible(err) || ctx.Err() != nil {
			return nil, err
		}
		return nil, runner.Fatal(fmt.Errorf("the %s container did not come up within %v (MV_UDF_STARTUP_TIMEOUT): %w", ep.Name, set.StartupTimeout, err))
	}
	c.cc, c.file, c.gen = cc, id, 1
	c.si.Store(si)
	c.reportSDK()
	go c.watch(cc, c.gen)
	c.log.Infow("connected to Numaflow container", "after", time.Since(start).Round(time.Millisecond).String())
	return c, nil
}

// ServerInfo is the server-info file of the container of the current
// connection: what its SDK can do (SupportsNack) may change when it
// restarts.
func (c *Conn) ServerInfo() *info.ServerInfo { return c.si.Load() }

// SidecarContainer is the container's name in a Numaflow MonoVertex pod;
// the adapters pass it on as runner.Sidecar.
func (c *Conn) SidecarContainer() string { return c.ep.Numaflow }

// MaxMessageSize is the largest gRPC message either side may send.
func (c *Conn) MaxMessageSize() int { return c.set.MaxMessageSize }

// CallTimeout is the longest wait for a container's answers to one batch
// (MV_UDF_CALL_TIMEOUT): a container that stops answering without closing
// its stream must not hold messages for ever.
func (c *Conn) CallTimeout() time.Duration { return c.set.CallTimeout }

// Get returns the current connection and its generation. While the
// container is away it waits for it to come back, for ctx, or for the
// reconnect timeout, after which it returns a runner.Fatal error.
func (c *Conn) Get(ctx context.Context) (Client, uint64, error) {
	for {
		c.mu.Lock()
		switch {
		case c.fatal != nil:
			err := c.fatal
			c.mu.Unlock()
			return nil, 0, err
		case c.closed:
			c.mu.Unlock()
			return nil, 0, ErrClosed
		case !c.down:
			cc, gen := c.cc, c.gen
			c.mu.Unlock()
			return cc, gen, nil
		}
		back := c.back
		c.mu.Unlock()
		select {
		case <-back:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
}

// Current returns the connection without waiting: an error while the
// container is away. It suits calls that must not block, such as Pending.
func (c *Conn) Current() (Client, uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.fatal != nil:
		return nil, 0, c.fatal
	case c.closed:
		return nil, 0, ErrClosed
	case c.down:
		return nil, 0, fmt.Errorf("the %s container is away since %s, reconnecting: %v", c.ep.Name, c.downSince.Format(time.RFC3339), c.lastErr)
	}
	return c.cc, c.gen, nil
}

// Fail reports that a stream of connection generation gen broke. The first
// report for the current generation marks the container away and starts
// waiting for it in the background; later and stale reports are ignored.
func (c *Conn) Fail(gen uint64, err error) { c.fail(gen, err, false) }

// fail is Fail; stopped says the container closed the connection after a
// graceful stop (GOAWAY), which a pod deletion brings about and which is
// not worth a warning.
func (c *Conn) fail(gen uint64, err error, stopped bool) {
	c.mu.Lock()
	if c.closed || c.fatal != nil || c.down || gen != c.gen {
		c.mu.Unlock()
		return
	}
	c.down, c.downSince, c.lastErr = true, time.Now(), err
	c.set.connection().Lost(err)
	c.back = make(chan struct{})
	deadline := c.downSince.Add(c.set.ReconnectTimeout)
	c.mu.Unlock()
	if stopped {
		c.log.Infow("the Numaflow container stopped gracefully; holding unfinished messages and waiting for it to come back",
			"reconnect_timeout", c.set.ReconnectTimeout.String(), zap.Error(err))
	} else {
		c.log.Warnw("lost the Numaflow container; holding unfinished messages and waiting for it to come back",
			"reconnect_timeout", c.set.ReconnectTimeout.String(), zap.Error(err))
	}
	go c.reconnect(deadline)
}

func (c *Conn) reconnect(deadline time.Time) {
	cc, id, si, err := c.wait(c.ctx, deadline)
	c.mu.Lock()
	defer c.mu.Unlock()
	defer close(c.back)
	if err != nil {
		if c.closed || c.ctx.Err() != nil {
			return
		}
		if IsIncompatible(err) {
			c.fatal = runner.Fatal(fmt.Errorf("the restarted %s container cannot be used: %w", c.ep.Name, err))
		} else {
			c.fatal = runner.Fatal(fmt.Errorf("the %s container (socket %s) stayed unreachable for %v (MV_UDF_RECONNECT_TIMEOUT); exiting so the pod restarts, unacked messages will be redelivered by the source: %w",
				c.ep.Name, c.ep.Socket, c.set.ReconnectTimeout, err))
		}
		c.log.Errorw("giving up on the Numaflow container", zap.Error(c.fatal))
		return
	}
	old := c.cc
	fresh := id != c.file
	c.cc, c.file, c.down = cc, id, false
	c.si.Store(si)
	c.set.connection().Up()
	c.reportSDK()
	c.gen++
	go c.watch(cc, c.gen)
	if old != nil {
		go old.Close()
	}
	c.log.Infow("reconnected to Numaflow container", "away", time.Since(c.downSince).Round(time.Millisecond).String(), "fresh_server_info", fresh)
}

// watch notices a connection that dropped while no stream was using it (a
// sink killed between batches), so readiness and reconnecting do not wait
// for the next call.
func (c *Conn) watch(cc Client, gen uint64) {
	if w, ok := cc.(*udwire.ClientConn); ok {
		select {
		case <-w.Draining():
		case <-c.ctx.Done():
			return
		}
		stopped := w.Err() == nil
		if stopped {
			// GOAWAY: the container is stopping gracefully (the SDKs do on
			// SIGTERM, which a pod deletion sends every container at once)
			// and still serves the streams it has, for up to 15 s. The
			// runner finishes its in-flight messages over them, as
			// numaflow-core does; a new connection is wanted only once
			// this one ends (a new stream on it fails and reports that).
			c.log.Infow("the Numaflow container is stopping (GOAWAY); its open streams go on until it closes the connection")
			select {
			case <-w.Done():
			case <-c.ctx.Done():
				return
			}
		}
		err := w.Err()
		if err == nil {
			err = errors.New("the container sent GOAWAY")
		}
		c.fail(gen, fmt.Errorf("connection to %s ended: %w", c.ep.Socket, err), stopped)
		return
	}
	gc := cc.(*grpc.ClientConn)
	logged := false // the transient failure since the last Ready
	for {
		s := gc.GetState()
		switch s {
		case connectivity.Shutdown:
			return
		case connectivity.TransientFailure:
			// After a GOAWAY grpc-go goes idle and a call's reconnect to
			// the stopping container fails, while the streams it has go
			// on (see the udwire case): a broken stream or a failed
			// probe reports a container that is really away.
			if !logged {
				c.log.Infow("the connection to the Numaflow container is in transient failure; its open streams report it if they break", "socket", c.ep.Socket)
				logged = true
			}
		case connectivity.Ready:
			logged = false
		case connectivity.Idle:
			// grpc-go goes idle on a GOAWAY too, while the streams it
			// has go on: the next call reconnects or fails.
		}
		if !gc.WaitForStateChange(c.ctx, s) {
			return
		}
	}
}

// Ready reports nil while the container is connected and says it is ready.
func (c *Conn) Ready(ctx context.Context) error {
	c.mu.Lock()
	cc, gen, down, since, last, fatal := c.cc, c.gen, c.down, c.downSince, c.lastErr, c.fatal
	c.mu.Unlock()
	switch {
	case fatal != nil:
		return fatal
	case down:
		return fmt.Errorf("the %s container is away since %s, reconnecting: %v", c.ep.Name, since.Format(time.RFC3339), last)
	case cc == nil:
		return ErrClosed
	}
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	ok, err := c.ready(pctx, cc)
	if err != nil {
		if status.Code(err) == codes.Unavailable {
			c.Fail(gen, err)
		}
		return fmt.Errorf("the %s container does not answer IsReady: %w", c.ep.Name, err)
	}
	if !ok {
		return fmt.Errorf("the %s container says it is not ready", c.ep.Name)
	}
	return nil
}

// Close stops waiting and closes the connection.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	cc := c.cc
	c.cc = nil
	c.mu.Unlock()
	c.cancel()
	if cc != nil {
		return cc.Close()
	}
	return nil
}

// wait polls until the container is usable, deadline passes (returning the
// last reason it was not), or ctx ends. An incompatible or never-completed
// server-info file ends the wait at once with an *IncompatibleError.
func (c *Conn) wait(ctx context.Context, deadline time.Time) (Client, fileID, *info.ServerInfo, error) {
	var (
		incompleteID    fileID
		incompleteSince time.Time
		lastLog         = time.Now()
	)
	for {
		cc, id, si, err := c.attempt(ctx)
		if err == nil {
			return cc, id, si, nil
		}
		c.set.connection().Failed(err)
		if IsIncompatible(err) {
			return nil, id, nil, err
		}
		var inc *incompleteError
		if errors.As(err, &inc) {
			if incompleteSince.IsZero() || id != incompleteID {
				incompleteID, incompleteSince = id, time.Now()
			} else if time.Since(incompleteSince) >= endMarkerWait {
				return nil, id, nil, &IncompatibleError{Endpoint: c.ep, Reason: fmt.Sprintf(
					"the file has no end marker %s %v after it was written, so it is not from a Numaflow SDK server this runner supports (content %q)",
					End, endMarkerWait, clip(inc.content))}
			}
		} else {
			incompleteSince = time.Time{}
		}
		if ctx.Err() != nil {
			return nil, id, nil, ctx.Err()
		}
		if !time.Now().Before(deadline) {
			return nil, id, nil, err
		}
		if !pause(ctx, c.log, c.ep.InfoFile, err, deadline, &lastLog) {
			return nil, id, nil, ctx.Err()
		}
	}
}

// attempt does one round of the handshake: read and check the server-info
// file, dial the socket, ask IsReady.
func (c *Conn) attempt(ctx context.Context) (Client, fileID, *info.ServerInfo, error) {
	si, id, err := readFile(c.ep)
	if errors.Is(err, errNotYet) {
		return nil, id, nil, fmt.Errorf("no server-info file at %s yet", c.ep.InfoFile)
	}
	if err != nil {
		return nil, id, nil, err
	}
	if err := Check(c.ep, si, c.warnOnce); err != nil {
		return nil, id, nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var cc Client
	if c.set.Transport == TransportGRPCGo {
		cc, err = Dial(c.ep.Socket, c.set.MaxMessageSize)
	} else {
		cc, err = DialWire(pctx, c.ep.Socket, c.set.MaxMessageSize)
	}
	if err != nil {
		return nil, id, nil, fmt.Errorf("socket %s does not answer yet: %w", c.ep.Socket, err)
	}
	ok, err := c.ready(pctx, cc)
	if err == nil && !ok {
		err = errors.New("IsReady answered false")
	}
	if err != nil {
		cc.Close()
		return nil, id, nil, fmt.Errorf("socket %s does not answer yet: %w", c.ep.Socket, err)
	}
	return cc, id, si, nil
}

// reportSDK reports the SDK of the container just connected to, for
// Numaflow's sdk_info gauge, with the container type numaflow-core gives
// it: its server-info file's prefix (an onSuccess sink's is "ons-sinker").
func (c *Conn) reportSDK() {
	r, ok := c.set.connection().(runner.SDKReporter)
	si := c.si.Load()
	if !ok || si == nil {
		return
	}
	r.SDK(Language(si), si.Version, ContainerType(c.ep))
}

// warnOnce logs a server-info warning the first time it comes up, not on
// every poll.
func (c *Conn) warnOnce(msg string) {
	if _, seen := c.warned.LoadOrStore(msg, true); !seen {
		c.log.Warnw(msg, "server_info", c.ep.InfoFile)
	}
}

// Buffer and flow-control window sizes of the connections to containers.
const (
	socketBufferSize = 256 << 10
	windowSize       = 8 << 20
)

// SendBufferSize is the kernel send buffer (SO_SNDBUF) asked for on each
// socket to a container; Linux caps the request at net.core.wmem_max and
// doubles it for its bookkeeping. A Unix stream socket's sender may have
// at most that much queued for the reader, and with the default the
// runner's writer parked on a full socket several times per large request
// (hack/bench/RESULTS.md, "A larger send buffer on the container
// sockets"). What the kernel holds for a socket
// counts to the pod's memory: at most 2 MiB per container, and only while
// the container reads slower than the runner writes.
const SendBufferSize = 1 << 20

// dialSocket connects to a container's Unix socket with the send buffer
// SendBufferSize.
func dialSocket(ctx context.Context, path string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	if uc, ok := c.(*net.UnixConn); ok {
		// A kernel that refuses it leaves the default: slower, not wrong.
		_ = uc.SetWriteBuffer(SendBufferSize)
	}
	return c, nil
}

// DialWire connects to a container's socket with the runner's own
// transport (package udwire), with the message size limit large payloads
// need, the same receive window and buffer sizes as Dial, and the codec
// and send buffer of every connection to a container.
func DialWire(ctx context.Context, socket string, maxMessageSize int) (*udwire.ClientConn, error) {
	abs, err := filepath.Abs(socket)
	if err != nil {
		return nil, fmt.Errorf("socket path %s: %w", socket, err)
	}
	nc, err := dialSocket(ctx, abs)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", abs, err)
	}
	return udwire.New(nc, udwire.Options{Codec: codec, MaxMessageSize: maxMessageSize, Window: windowSize, BufferSize: socketBufferSize}), nil
}

// Dial makes a grpc-go client for a Unix socket, with the message size limit
// large payloads need. It does not connect until the first call.
func Dial(socket string, maxMessageSize int) (*grpc.ClientConn, error) {
	abs, err := filepath.Abs(socket)
	if err != nil {
		return nil, fmt.Errorf("socket path %s: %w", socket, err)
	}
	cc, err := grpc.NewClient("unix://"+abs,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessageSize), grpc.MaxCallSendMsgSize(maxMessageSize),
			// Large payloads without extra copies or cleared buffers
			// (package udcodec), on these connections only.
			grpc.ForceCodecV2(codec)),
		experimental.WithBufferPool(bufferPool),
		// A local socket either answers at once or is not there: keep the
		// reconnect backoff short so a restarted container is found quickly.
		// The connection is watched for drops; an idle timeout would read
		// as one (a fallback sink may go unused for hours).
		grpc.WithIdleTimeout(0),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 2 * time.Second,
		}),
		// A Unix socket moves 256 KiB in one system call as cheaply as
		// 32 KiB (grpc-go's default buffers), and at 1 MiB payloads the
		// calls were the runner's largest cost (hack/bench profiles).
		grpc.WithReadBufferSize(socketBufferSize),
		grpc.WithWriteBufferSize(socketBufferSize),
		// A fixed window lets a container send a whole batch of large
		// answers without waiting for window updates; the protocol bounds
		// what it sends (the records asked for, the answers to what was
		// sent), so the window does not add to memory.
		grpc.WithInitialWindowSize(windowSize),
		grpc.WithInitialConnWindowSize(windowSize),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return dialSocket(ctx, abs) }),
	)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", abs, err)
	}
	return cc, nil
}
