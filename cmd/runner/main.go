// Command runner is the monovertex runner: it reads from a source, passes
// messages through an optional transformer, writes them to a sink, and acks
// the source only after each message reached a final state. Settings come
// from the environment; run it with --help to list them.
package main

import (
	"context"
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
)

// Exit statuses: 2 for configuration the runner cannot use, 1 for a run
// that failed (a fatal adapter error or a shutdown that ran out of time).
const (
	exitFailed = 1
	exitConfig = 2
)

func main() {
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

// start builds and runs the runner; memLimit are the log fields of the Go
// memory limit setMemoryLimit chose and of the GC pacing, for the "runner
// started" line.
func start(ctx context.Context, cfg *config.Config, log *zap.SugaredLogger, memLimit []any) (int, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	labels := prometheus.Labels{runner.LabelName: cfg.Name, runner.LabelReplica: strconv.Itoa(cfg.Replica)}
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "build_info", Help: "Version and commit of the running binary (always 1).",
		ConstLabels: prometheus.Labels{"version": version.Version, "commit": version.Commit, runner.LabelName: cfg.Name, runner.LabelReplica: labels[runner.LabelReplica]},
	})
	buildInfo.Set(1)
	reg.MustRegister(buildInfo)

	// Bind both ports before building adapters, so a port in use is a clear
	// start-up error rather than a runner that half works.
	portMux := http.NewServeMux()
	portLn, err := listen(cfg.Port, "PORT")
	if err != nil {
		return exitConfig, err
	}
	adminLn, err := listen(cfg.AdminPort, "MV_ADMIN_PORT")
	if err != nil {
		portLn.Close()
		return exitConfig, err
	}

	// The adapters are built before the engine, so the ring their
	// containers' runtime errors go to is made here and handed to both.
	containerErrors := runner.NewContainerErrors()
	conns, err := runner.NewConnections(reg, cfg.Name, cfg.Replica)
	if err != nil {
		portLn.Close()
		adminLn.Close()
		return exitFailed, fmt.Errorf("connection metrics: %w", err)
	}
	env := func(role runner.Role) runner.Env {
		return runner.Env{Name: cfg.Name, Replica: cfg.Replica, Role: role, Logger: log.Named(string(role)), Mux: portMux, Metrics: reg,
			Concurrency: cfg.StageConcurrency(), Errors: containerErrors, Connection: conns.For(role),
			MessageIDs: runner.MessageIDs(cfg.MessageIDs)}
	}
	adapters, err := build(ctx, cfg, env)
	if err != nil {
		portLn.Close()
		adminLn.Close()
		if ctx.Err() != nil {
			// Stopped while waiting for an adapter (a sidecar not up yet):
			// nothing was read, so this is a clean stop, not a bad setting.
			log.Infow("stopped before the adapters were ready", "waiting_for", err.Error())
			return 0, nil
		}
		// A *runner.ConfigError (a setting that cannot work) exits 2 in
		// run; anything else (a broker unreachable at start) exits 1.
		return exitFailed, err
	}

	tracer, stopTracing, err := startTracing(ctx, cfg, log)
	if err != nil {
		adapters.close()
		portLn.Close()
		adminLn.Close()
		return exitConfig, err
	}
	// Deferred, so the spans of the last batches are sent on every way out.
	defer stopTracing()

	opts := cfg.RunnerOptions()
	opts.Logger = log
	opts.Registerer = reg
	opts.ContainerErrors = containerErrors
	if opts.RateLimiter, err = cfg.NewRateLimiter(reg, labels, log.Named("ratelimit")); err != nil {
		adapters.close()
		portLn.Close()
		adminLn.Close()
		return exitConfig, err
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
	opts.Tracer = tracer
	eng, err := runner.NewPipeline(opts, adapters.pipeline(cfg))
	if err != nil {
		adapters.close()
		portLn.Close()
		adminLn.Close()
		return exitConfig, err
	}

	portMux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := eng.Ready(r.Context()); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	portSrv := &http.Server{
		Handler:           portMux,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    1 << 20,
	}
	if g, ok := adapters.source().(portGuard); ok {
		portLn = g.GuardPort(portSrv, portLn)
	}
	adminSrv := &http.Server{Handler: eng.AdminHandler(reg, cfg.PProf), ReadHeaderTimeout: 10 * time.Second}
	go serve(log, portSrv, portLn, "PORT")
	go serve(log, adminSrv, adminLn, "admin")

	log.Infow("runner started", append([]any{"chain", eng.Chain(), "streaming", cfg.Streaming, "port", cfg.Port, "admin_port", cfg.AdminPort,
		"version", version.Version, "commit", version.Commit}, memLimit...)...)
	if cfg.ConfigDir != "" {
		// Read once before Run, so a runner started paused reads nothing.
		if p, ok := readPaused(cfg.ConfigDir, log); ok {
			eng.SetPaused(p)
		}
		go watchPause(ctx, cfg.ConfigDir, cfg.ConfigPoll, eng.SetPaused, log)
	}
	started := time.Now()
	runErr := eng.Run(ctx)

	// The http source answered its waiting callers when it closed, so the
	// servers have only idle connections left to drop.
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	portSrv.Shutdown(shutdownCtx)
	adminSrv.Shutdown(shutdownCtx)

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

func serve(log *zap.SugaredLogger, srv *http.Server, ln net.Listener, name string) {
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Errorw("http server stopped", "server", name, zap.Error(err))
	}
}

// portGuard is a source that takes requests on $PORT and bounds what its
// connections may cost below net/http (the http source): it may set the
// server's limits and hooks and wrap the listener before serving starts.
type portGuard interface {
	GuardPort(srv *http.Server, ln net.Listener) net.Listener
}

// built holds the adapters by the place they fill; a place set to none has
// no entry.
type built map[runner.Role]any

func (b built) source() runner.Source { s, _ := b[runner.RoleSource].(runner.Source); return s }
func (b built) sink(role runner.Role) runner.Sink {
	s, _ := b[role].(runner.Sink)
	return s
}
func (b built) transformer(role runner.Role) runner.Transformer {
	t, _ := b[role].(runner.Transformer)
	return t
}

// pipeline is the engine's view of what was built: the chain of stages in
// Numaflow's order (source transformer, then map UDF) and the sink tiers.
func (b built) pipeline(cfg *config.Config) runner.Pipeline {
	p := runner.Pipeline{Source: b.source(), Sink: b.sink(runner.RoleSink), Fallback: b.sink(runner.RoleFallbackSink),
		OnSuccess: b.sink(runner.RoleOnSuccessSink), Bypass: cfg.Bypass}
	for _, st := range []struct {
		role runner.Role
		as   runner.StageRole
		kind string
	}{{runner.RoleTransformer, runner.StageTransformer, cfg.Transformer}, {runner.RoleUDF, runner.StageUDF, cfg.UDF}} {
		if t := b.transformer(st.role); t != nil {
			// Validate parsed it already: no error here.
			retry, _ := cfg.StageRetry(st.role)
			p.Stages = append(p.Stages, runner.Stage{Kind: st.kind, Role: st.as, Transformer: t, Retry: retry})
		}
	}
	if f := b.transformer(runner.RoleFilter); f != nil {
		st := runner.Stage{Kind: cfg.FilterKind, Role: runner.StageFilter, Transformer: f}
		if a, ok := f.(interface{ After() bool }); ok && a.After() {
			p.Stages = append(p.Stages, st)
		} else {
			p.Stages = append([]runner.Stage{st}, p.Stages...)
		}
	}
	p.Kinds.Source, p.Kinds.Sink = cfg.Source, cfg.Sink
	if p.Fallback != nil {
		p.Kinds.Fallback = cfg.FallbackSink
	}
	if p.OnSuccess != nil {
		p.Kinds.OnSuccess = cfg.OnSuccessSink
	}
	return p
}

func (b built) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, slot := range runner.Slots {
		if c, ok := b[slot.Role].(interface{ Close(context.Context) error }); ok {
			c.Close(ctx)
		}
	}
	if c, ok := b[runner.RoleFilter].(interface{ Close(context.Context) error }); ok {
		c.Close(ctx)
	}
}

// build constructs the chosen adapters in the order of runner.Slots;
// config.Load has checked that every chosen kind is registered and read
// its settings.
func build(ctx context.Context, cfg *config.Config, env func(runner.Role) runner.Env) (built, error) {
	b := built{}
	for _, slot := range runner.Slots {
		settings, chosen := cfg.Settings[slot.Role]
		if !chosen {
			continue
		}
		kind := cfg.Kind(slot)
		k, _ := runner.LookupKind(slot.Role, kind)
		a, err := k.New(ctx, env(slot.Role), settings)
		if err != nil {
			b.close()
			return nil, fmt.Errorf("%s %s: %w", slot.Title, kind, err)
		}
		b[slot.Role] = a
	}
	if settings, ok := cfg.Settings[runner.RoleFilter]; ok {
		k, _ := runner.LookupKind(runner.RoleFilter, cfg.FilterKind)
		a, err := k.New(ctx, env(runner.RoleFilter), settings)
		if err != nil {
			b.close()
			return nil, fmt.Errorf("filter %s: %w", cfg.FilterKind, err)
		}
		if a != nil {
			b[runner.RoleFilter] = a
		}
	}
	return b, nil
}
