package runner

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/pprof"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/monovertex/monovertex/internal/version"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/monovertex/monovertex/runner/ratelimit"
)

// Status is the engine's state as /status reports it.
type Status struct {
	Name    string `json:"name"`
	Replica int    `json:"replica"`
	// State is starting, connecting, running, paused, draining or stopped.
	State  string `json:"state"`
	Paused bool   `json:"paused"`
	// Mode is batch or streaming (MV_STREAMING).
	Mode string `json:"mode"`
	// Chain lists the adapters in pipeline order: the source, each stage,
	// then the sink tiers, as "role kind" pairs.
	Chain  []string      `json:"chain"`
	Bypass *BypassStatus `json:"bypass,omitempty"`
	Totals Totals        `json:"totals"`
	// Rate is acked input messages per second over each window.
	Rate map[string]float64 `json:"processing_rate"`
	// Pending is the source's last reported pending count; -1 is unknown.
	Pending int64 `json:"pending"`
	// PendingAverages is monovtx_pending{period}: the pending count
	// averaged over 1m, 5m, 15m and default (the lookback), as Numaflow's
	// daemon averages it; a period not computable yet is absent.
	PendingAverages map[string]int64 `json:"pending_averages"`
	Scaling         ScaleSignals     `json:"scaling"`
	// Health is the data-flow health Numaflow's daemon reports.
	Health Health `json:"health"`
	// RateLimit is the read rate limiter's state, absent without one.
	RateLimit *ratelimit.Status `json:"rate_limit,omitempty"`
	LastError *errorRecord      `json:"last_error,omitempty"`

	// Time is when this snapshot was taken; Started when the engine was built.
	Time    time.Time `json:"time"`
	Started time.Time `json:"started"`
	Build   BuildInfo `json:"build"`
	// Errors are the containers' runtime errors in the shape of Numaflow's
	// GetMonoVertexErrors (one entry per replica; this replica only, and
	// none while there are no errors).
	Errors []ReplicaErrors `json:"errors"`
	// CriticalErrors is monovtx_critical_error_total by reason.
	CriticalErrors map[string]int64 `json:"critical_errors"`
	// RecentErrors are the engine's own recent errors (failed reads,
	// writes, acks), counted by message, the most recent first.
	RecentErrors []ContainerError `json:"recent_errors"`
	// Latency has p50 and p99 of every timing histogram since start.
	Latency []StageLatency `json:"latency"`
	// Adapters is each adapter's readiness, in pipeline order; /status
	// fills it, Engine.Status leaves it out (it asks the containers).
	Adapters []AdapterStatus `json:"adapters,omitempty"`
}

// BuildInfo is the running binary's version, as build_info exports it.
type BuildInfo struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	GoVersion string `json:"go_version"`
}

// AdapterStatus is one adapter's readiness.
type AdapterStatus struct {
	// Name is the adapter's place and kind, as in Chain.
	Name string `json:"name"`
	// Ready is false when its Ready check failed; Error says why.
	Ready bool   `json:"ready"`
	Error string `json:"error,omitempty"`
	// Checked is false for adapters that cannot tell (no Ready method
	// and no Connect).
	Checked bool `json:"checked"`
	// Connection is "connecting" until the adapter's Connect succeeded
	// (Ready is false then, Error says why), "connected" after; empty
	// for adapters without Connect.
	Connection string `json:"connection,omitempty"`
	// ConnectFailures counts its failed Connect attempts.
	ConnectFailures int64 `json:"connect_failures,omitempty"`
}

// BypassStatus shows the bypass conditions in their MV_BYPASS_* form.
type BypassStatus struct {
	Sink      string `json:"sink,omitempty"`
	Fallback  string `json:"fallback,omitempty"`
	OnSuccess string `json:"on_success,omitempty"`
}

// Totals are the engine's counts since start.
type Totals struct {
	Read               int64 `json:"read"`
	ReadBytes          int64 `json:"read_bytes"`
	Acked              int64 `json:"acked"`
	Nacked             int64 `json:"nacked"`
	Written            int64 `json:"written"`
	FallbackWritten    int64 `json:"fallback_written"`
	Dropped            int64 `json:"dropped"`
	TransformerDropped int64 `json:"transformer_dropped"`
	SinkDropped        int64 `json:"sink_dropped"`
	SinkErrors         int64 `json:"sink_errors"`
	FallbackErrors     int64 `json:"fallback_errors"`
	TransformerErrors  int64 `json:"transformer_errors"`
	AckErrors          int64 `json:"ack_errors"`
	// OnSuccessWritten counts messages the onSuccess sink wrote.
	OnSuccessWritten int64 `json:"on_success_written"`
	OnSuccessErrors  int64 `json:"on_success_errors"`
	// UDFDropped and UDFErrors are the map UDF's, as Transformer* are the
	// source transformer's.
	UDFDropped int64 `json:"udf_dropped"`
	UDFErrors  int64 `json:"udf_errors"`
	// FilterDropped and FilterErrors are the in-process filter's.
	FilterDropped int64 `json:"filter_dropped"`
	FilterErrors  int64 `json:"filter_errors"`
	// SinkNacked counts outputs a sink answered NACK for: their inputs
	// went back to the source.
	SinkNacked int64 `json:"sink_nacked"`
	// Bypassed counts outputs that went straight to a sink by a bypass
	// condition; BypassDropped those dropped at the primary sink because
	// it has conditions and they matched none.
	Bypassed      int64 `json:"bypassed"`
	BypassDropped int64 `json:"bypass_dropped"`
	// DuplicateDropped counts deliveries of a message already in flight,
	// dropped as numaflow-core drops them (see RedeliversInFlight); they
	// are in Read and Dropped too.
	DuplicateDropped int64 `json:"duplicate_dropped"`
	// Errors is the sum of the error counts above (transformer, map UDF,
	// sink, fallback, onSuccess and ack errors).
	Errors int64 `json:"errors"`
}

// Status returns a snapshot of the engine's state.
func (e *Engine) Status() Status {
	now := time.Now()
	state, _ := e.state.Load().(string)
	paused := e.Paused()
	if paused && state == "running" {
		state = "paused"
	}
	mode := "batch"
	if e.opts.Streaming {
		mode = "streaming"
	}
	var bypass *BypassStatus
	if !e.bypass.empty() {
		bypass = &BypassStatus{Sink: e.bypass.Sink.String(), Fallback: e.bypass.Fallback.String(), OnSuccess: e.bypass.OnSuccess.String()}
	}
	var rl *ratelimit.Status
	if e.opts.RateLimiter != nil {
		rls := e.opts.RateLimiter.Status()
		rl = &rls
	}
	st := Status{
		RateLimit: rl,
		Name:      e.opts.Name, Replica: e.opts.Replica, State: state, Paused: paused,
		Totals:          e.totals.totals(),
		Mode:            mode,
		Chain:           e.Chain(),
		Bypass:          bypass,
		Rate:            statusRates(e.ProcessingRates(now)),
		Pending:         e.load.pending.Load(),
		PendingAverages: e.PendingAverages(),
		Scaling:         e.ScaleSignals(),
		LastError:       e.lastErr.Load(),
		Time:            now, Started: e.started,
		Build:          BuildInfo{Version: version.Version, Commit: version.Commit, GoVersion: runtime.Version()},
		Errors:         e.ReplicaErrors(),
		CriticalErrors: e.cerrs.Critical(),
		RecentErrors:   e.recent.List(),
		Latency:        e.Latencies(),
	}
	st.Health = e.health(st.Scaling)
	return st
}

// statusRates keys the daemon's rates as /status always has: the
// lookback's as "lookback", not "default".
func statusRates(r map[string]float64) map[string]float64 {
	r["lookback"] = r["default"]
	delete(r, "default")
	return r
}

// Name is the mono vertex's name (MV_NAME).
func (e *Engine) Name() string { return e.opts.Name }

// ReplicaErrors is this replica's entry of Numaflow's errors response,
// named as Numaflow's daemon names replicas (<name>-mv-<index>).
func (e *Engine) ReplicaErrors() []ReplicaErrors {
	list := e.cerrs.List()
	if len(list) == 0 {
		return []ReplicaErrors{}
	}
	return []ReplicaErrors{{Replica: e.opts.Name + "-mv-" + strconv.Itoa(e.opts.Replica), ContainerErrors: list}}
}

// Readiness asks every adapter that can tell whether it is ready, at once
// (a Numaflow adapter asks its container), within ctx.
func (e *Engine) Readiness(ctx context.Context) []AdapterStatus {
	all := e.adapters()
	out := make([]AdapterStatus, len(all))
	var wg sync.WaitGroup
	for i, a := range all {
		out[i] = AdapterStatus{Name: a.name, Ready: true, Connection: a.link.state()}
		if a.link != nil {
			out[i].Checked, out[i].ConnectFailures = true, a.link.failures.Load()
			if err := a.link.notConnected(); err != nil {
				out[i].Ready, out[i].Error = false, err.Error()
				continue
			}
		}
		r, ok := a.v.(Readier)
		if !ok {
			continue
		}
		out[i].Checked = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.Ready(ctx); err != nil {
				out[i].Ready, out[i].Error = false, err.Error()
			}
		}()
	}
	wg.Wait()
	return out
}

// AdminHandler serves /metrics from gatherer, /livez, /readyz (ready only
// while every adapter says so and the engine is reading), /status as JSON,
// numaflow-core's /sidecar-livez and /runtime/errors, and /debug/pprof
// when withPProf is set.
func (e *Engine) AdminHandler(gatherer prometheus.Gatherer, withPProf bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := e.Ready(ctx); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/status", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		st := e.Status()
		st.Adapters = e.Readiness(ctx)
		writeJSON(w, st)
	})
	mux.HandleFunc("/sidecar-livez", e.sidecarLivez)
	mux.HandleFunc("/runtime/errors", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, e.RuntimeErrors())
	})
	mux.HandleFunc("/status/history", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, e.History())
	})
	mux.Handle("/", statusPage())
	if withPProf {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// Chain lists the adapters in pipeline order, as /status shows them.
func (e *Engine) Chain() []string {
	var out []string
	for _, a := range e.adapters() {
		out = append(out, a.name)
	}
	return out
}
