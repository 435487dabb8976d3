// Package runnercmd is the runner's command: flags, settings, logging,
// signals, the admin and $PORT servers and shutdown, around the engine in
// package runner. A runner with adapters of one's own is a main package
// that imports them (and adapters/all for the built-in ones) and calls
// Main; cmd/runner is exactly that.
//
// It is not in package runner because package config, which Main needs to
// read the settings, imports runner: runner.Main would be an import cycle.
// It stands beside the engine as Caddy's caddycmd stands beside caddy.
package runnercmd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/monovertex/monovertex/config"
	"github.com/monovertex/monovertex/internal/version"
	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/daemon"
)

// Exit statuses: 2 for configuration the runner cannot use, 1 for a run
// that failed (a fatal adapter error or a shutdown that ran out of time).
const (
	exitFailed = 1
	exitConfig = 2
)

// Main runs the runner with the adapter kinds registered so far (by the
// init functions of the packages the main package imports) and exits the
// process: 0 after a clean stop, 2 with one line on stderr naming the
// variable for settings it cannot use, 1 for a run that failed. Settings
// come from the environment; the only arguments are --help (with
// --markdown for the reference page) and --version.
func Main() {
	if len(os.Args) == 3 && os.Args[1] == "--help" && os.Args[2] == "--markdown" {
		config.UsageMarkdown(os.Stdout)
		return
	}
	for _, a := range os.Args[1:] {
		switch a {
		case "-h", "--help", "-help", "help":
			config.Usage(os.Stdout)
			return
		case "--version", "-version", "version":
			fmt.Printf("monovertex runner %s (commit %s)\n", version.Version, version.Commit)
			return
		default:
			fmt.Fprintf(os.Stderr, "runner: unknown argument %q: settings come from the environment, see --help\n", a)
			os.Exit(exitConfig)
		}
	}
	os.Exit(run())
}

func run() int {
	cfg, err := config.Load()
	if err != nil {
		fmt.Fprintf(os.Stderr, "runner: %v\n", err)
		return exitConfig
	}
	log := newLogger(cfg.LogLevel)
	log = log.Named("runner").With("mvtx_name", cfg.Name, "mvtx_replica", cfg.Replica)
	defer log.Sync()
	memLimit := append(setMemoryLimit(), startGCPacing()...)

	ctx := signalContext()

	code, err := start(ctx, cfg, log, memLimit)
	if err != nil {
		var ce *runner.ConfigError
		if errors.As(err, &ce) {
			fmt.Fprintf(os.Stderr, "runner: %v\n", err)
			return exitConfig
		}
		log.Errorw("runner stopped with an error", zap.Error(err))
		fmt.Fprintf(os.Stderr, "runner: %v\n", err)
	}
	return code
}

// process is one start of the runner: what start acquires on its way to a
// running engine, so that one deferred release frees whatever was not yet
// handed on, on every way out.
type process struct {
	cfg *config.Config
	log *zap.SugaredLogger
	reg *prometheus.Registry
	// labels are the mono vertex's metric labels (mvtx_name, mvtx_replica).
	labels  prometheus.Labels
	portMux *http.ServeMux
	// portLn, adminLn and daemonLn are nil once their servers own them
	// (daemonLn also while MV_DAEMON_PORT is 0).
	portLn, adminLn, daemonLn net.Listener
	// daemonTLS is the daemon API's self-signed certificate.
	daemonTLS *tls.Config
	// adapters is nil once the engine owns them.
	adapters    built
	stopTracing func()
}

// release closes the adapters and the listeners not handed on, then flushes
// the spans still buffered, in the order start always had.
func (p *process) release() {
	if p.adapters != nil {
		p.adapters.close()
	}
	if p.portLn != nil {
		p.portLn.Close()
	}
	if p.adminLn != nil {
		p.adminLn.Close()
	}
	if p.daemonLn != nil {
		p.daemonLn.Close()
	}
	if p.stopTracing != nil {
		// Last, so the spans of the last batches are sent on every way out.
		p.stopTracing()
	}
}

// start builds and runs the runner; memLimit are the log fields of the Go
// memory limit setMemoryLimit chose and of the GC pacing, for the "runner
// started" line.
func start(ctx context.Context, cfg *config.Config, log *zap.SugaredLogger, memLimit []any) (int, error) {
	p := &process{cfg: cfg, log: log}
	defer p.release()
	eng, code, err := p.prepare(ctx)
	if eng == nil {
		return code, err
	}
	return p.serveAndRun(ctx, eng, memLimit)
}

// prepare binds the ports and builds the adapters, the tracer and the
// engine. A nil engine means start returns code and err as they are: a
// setting that cannot work, a constructor that failed, or a stop that
// came while one was working (code 0, no error). Adapters that implement
// runner.Connector wait for no peer here: the engine connects them
// (serveAndRun).
func (p *process) prepare(ctx context.Context) (*runner.Engine, int, error) {
	cfg, log := p.cfg, p.log
	p.newRegistry()

	// Bind both ports before building adapters, so a port in use is a clear
	// start-up error rather than a runner that half works.
	var err error
	p.portMux = http.NewServeMux()
	if p.portLn, err = listen(cfg.Port, "PORT"); err != nil {
		return nil, exitConfig, err
	}
	if p.adminLn, err = listen(cfg.AdminPort, "MV_ADMIN_PORT"); err != nil {
		return nil, exitConfig, err
	}
	if cfg.DaemonPort != 0 {
		if p.daemonLn, err = listen(cfg.DaemonPort, "MV_DAEMON_PORT"); err != nil {
			return nil, exitConfig, err
		}
		if p.daemonTLS, err = daemon.SelfSigned(); err != nil {
			return nil, exitFailed, fmt.Errorf("daemon API certificate: %w", err)
		}
	}

	// The adapters are built before the engine, so the ring their
	// containers' runtime errors go to is made here and handed to both.
	containerErrors := runner.NewContainerErrors()
	conns, err := runner.NewConnections(p.reg, cfg.Name, cfg.Replica)
	if err != nil {
		return nil, exitFailed, fmt.Errorf("connection metrics: %w", err)
	}
	env := func(role runner.Role) runner.Env {
		return runner.Env{Name: cfg.Name, Replica: cfg.Replica, Role: role, Logger: log.Named(string(role)), Mux: p.portMux, Metrics: p.reg,
			Concurrency: cfg.StageConcurrency(), Errors: containerErrors, Connection: conns.For(role),
			MessageIDs: runner.MessageIDs(cfg.MessageIDs)}
	}
	if p.adapters, err = build(ctx, cfg, env); err != nil {
		if ctx.Err() != nil {
			// Stopped while a constructor was working: nothing was read,
			// so this is a clean stop, not a bad setting.
			log.Infow("stopped before the adapters were built", "building", err.Error())
			return nil, 0, nil
		}
		// A *runner.ConfigError (a setting that cannot work) exits 2 in
		// run; anything else exits 1.
		return nil, exitFailed, err
	}

	tracer, stopTracing, err := startTracing(ctx, cfg, log)
	if err != nil {
		return nil, exitConfig, err
	}
	p.stopTracing = stopTracing

	opts, err := p.options(containerErrors)
	if err != nil {
		return nil, exitConfig, err
	}
	opts.Tracer, opts.Connections = tracer, conns
	eng, err := runner.NewPipeline(opts, p.adapters.pipeline(cfg))
	if err != nil {
		return nil, exitConfig, err
	}
	return eng, 0, nil
}

// newRegistry makes the Prometheus registry with the Go and process
// collectors and build_info.
func (p *process) newRegistry() {
	cfg := p.cfg
	p.reg = prometheus.NewRegistry()
	p.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	p.labels = prometheus.Labels{runner.LabelName: cfg.Name, runner.LabelReplica: strconv.Itoa(cfg.Replica)}
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "build_info", Help: "Version and commit of the running binary (always 1).",
		ConstLabels: prometheus.Labels{"version": version.Version, "commit": version.Commit, runner.LabelName: cfg.Name, runner.LabelReplica: p.labels[runner.LabelReplica]},
	})
	buildInfo.Set(1)
	p.reg.MustRegister(buildInfo)
}

// options are the engine's options from the settings, with the read rate
// limiter (logged when on).
func (p *process) options(containerErrors *runner.ContainerErrors) (runner.Options, error) {
	cfg, log := p.cfg, p.log
	opts := cfg.RunnerOptions()
	opts.Logger = log
	opts.Registerer = p.reg
	opts.ContainerErrors = containerErrors
	var err error
	if opts.RateLimiter, err = cfg.NewRateLimiter(p.reg, p.labels, log.Named("ratelimit")); err != nil {
		return opts, err
	}
	if opts.RateLimiter != nil {
		maxCalls, minCalls := cfg.ReadCallsPerSecond()
		log.Infow("read rate limit", "max_read_calls_per_second", maxCalls, "min_read_calls_per_second", minCalls,
			"max_messages_per_second", maxCalls*cfg.ReadBatchSize, "store", cfg.RateLimit.Store, "mode", cfg.RateLimit.Mode)
		if cfg.RateLimit.Max%cfg.ReadBatchSize != 0 {
			log.Warnw("MV_RATE_LIMIT_MAX is not a multiple of MV_READ_BATCH_SIZE; as in Numaflow the limit counts read calls, so up to max_read_calls_per_second x MV_READ_BATCH_SIZE messages are read per second",
				"MV_RATE_LIMIT_MAX", cfg.RateLimit.Max, "MV_READ_BATCH_SIZE", cfg.ReadBatchSize, "effective_max", maxCalls*cfg.ReadBatchSize)
		}
	}
	return opts, nil
}

// serveAndRun starts the $PORT and admin servers, connects the adapters
// (not ready meanwhile), runs the engine until it stops, shuts the
// servers down and logs the totals.
func (p *process) serveAndRun(ctx context.Context, eng *runner.Engine, memLimit []any) (int, error) {
	cfg, log := p.cfg, p.log
	src := p.adapters.source()
	p.portMux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := eng.Ready(r.Context()); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	portSrv := &http.Server{
		Handler:           p.portMux,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    1 << 20,
	}
	portLn := p.portLn
	if g, ok := src.(runner.PortGuard); ok {
		portLn = g.GuardPort(portSrv, portLn)
	}
	admin := eng.AdminHandler(p.reg, cfg.PProf)
	adminSrv := &http.Server{Handler: admin, ReadHeaderTimeout: 10 * time.Second}
	go serve(log, portSrv, portLn, "PORT")
	go serve(log, adminSrv, p.adminLn, "admin")
	p.portLn, p.adminLn = nil, nil
	var daemonSrv *http.Server
	if p.daemonLn != nil {
		daemonSrv = &http.Server{Handler: daemon.Handler(daemon.NewService(eng), admin), TLSConfig: p.daemonTLS, ReadHeaderTimeout: 10 * time.Second}
		go serveTLS(log, daemonSrv, p.daemonLn)
		p.daemonLn = nil
	}

	// Until every adapter connected, /readyz says which is not and why;
	// the engine logs each failed attempt. Only a setting the peer shows
	// cannot work (exit 2, its one line) or a Fatal error ends this.
	if err := eng.Connect(ctx); err != nil {
		// Closing the adapters first answers the http source's waiting
		// callers, so the servers have only idle connections left.
		p.adapters.close()
		p.adapters = nil
		shutdownServers(portSrv, adminSrv, daemonSrv)
		if ctx.Err() != nil && !runner.IsFatal(err) && !errors.As(err, new(*runner.ConfigError)) {
			log.Infow("stopped before the adapters were connected")
			return 0, nil
		}
		return exitFailed, err
	}
	// The engine owns the adapters once connected, and closes them when
	// Run returns.
	p.adapters = nil
	log.Infow("runner started", append([]any{"chain", eng.Chain(), "streaming", cfg.Streaming, "port", cfg.Port, "admin_port", cfg.AdminPort,
		"daemon_port", cfg.DaemonPort, "version", version.Version, "commit", version.Commit}, memLimit...)...)
	if cfg.ConfigDir != "" {
		// Read once before Run, so a runner started paused reads nothing.
		if paused, ok := readPaused(cfg.ConfigDir, log); ok {
			eng.SetPaused(paused)
		}
		go watchPause(ctx, cfg.ConfigDir, cfg.ConfigPoll, eng.SetPaused, log)
	}
	started := time.Now()
	runErr := eng.Run(ctx)

	// The http source answered its waiting callers when it closed, so the
	// servers have only idle connections left to drop.
	shutdownServers(portSrv, adminSrv, daemonSrv)

	st := eng.Status()
	log.Infow("runner stopped", "after", time.Since(started).String(), "read", st.Totals.Read, "acked", st.Totals.Acked,
		"nacked", st.Totals.Nacked, "written", st.Totals.Written, "fallback_written", st.Totals.FallbackWritten, "dropped", st.Totals.Dropped)
	if errors.Is(runErr, runner.ErrShutdownTimeout) {
		// The contract for a signal: exit 0 within the budget. What could
		// not finish was handed back or left unacked, never acked unwritten.
		log.Warnw("shutdown budget spent before every in-flight message finished; the source redelivers them",
			"budget", cfg.ShutdownTimeout.String(), "unfinished", st.Totals.Read-st.Totals.Acked)
		return 0, nil
	}
	if runErr != nil {
		return exitFailed, runErr
	}
	return 0, nil
}

// shutdownServers drops the servers' idle connections, waiting at most
// 500ms; daemon may be nil.
func shutdownServers(port, admin, daemon *http.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	port.Shutdown(ctx)
	admin.Shutdown(ctx)
	if daemon != nil {
		daemon.Shutdown(ctx)
	}
}

// newLogger is the runner's JSON logger on stderr, in the shape of
// Knative's (knative.dev/pkg/logging), built with zap directly: Knative's
// constructor logs an info line of its own when the binary carries no VCS
// revision, which would put a second line before a one-line settings error.
func newLogger(level string) *zap.SugaredLogger {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		lvl = zapcore.InfoLevel // config.Load allows only valid levels
	}
	enc := zap.NewProductionEncoderConfig()
	enc.TimeKey, enc.EncodeTime = "ts", zapcore.ISO8601TimeEncoder
	zc := zap.Config{
		Level:            zap.NewAtomicLevelAt(lvl),
		Encoding:         "json",
		EncoderConfig:    enc,
		OutputPaths:      []string{"stderr"},
		ErrorOutputPaths: []string{"stderr"},
	}
	l, err := zc.Build()
	if err != nil {
		return zap.NewNop().Sugar()
	}
	return l.Sugar()
}

func listen(port int, variable string) (net.Listener, error) {
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(port))
	if err != nil {
		return nil, &runner.ConfigError{Var: variable, Value: strconv.Itoa(port), Reason: fmt.Sprintf("cannot listen: %v; pick a free port", err)}
	}
	return ln, nil
}

// serveTLS serves the daemon API with srv's TLSConfig, HTTP/2 included.
func serveTLS(log *zap.SugaredLogger, srv *http.Server, ln net.Listener) {
	if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Errorw("http server stopped", "server", "daemon", zap.Error(err))
	}
}

func serve(log *zap.SugaredLogger, srv *http.Server, ln net.Listener, name string) {
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Errorw("http server stopped", "server", name, zap.Error(err))
	}
}
