package runner

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Status is the engine's state as /status reports it.
type Status struct {
	Name    string `json:"name"`
	Replica int    `json:"replica"`
	// State is starting, running, paused, draining or stopped.
	State  string `json:"state"`
	Paused bool   `json:"paused"`
	Totals Totals `json:"totals"`
	// Rate is acked input messages per second over each window.
	Rate map[string]float64 `json:"processing_rate"`
	// Pending is the source's last reported pending count; -1 is unknown.
	Pending   int64        `json:"pending"`
	Scaling   ScaleSignals `json:"scaling"`
	LastError *errorRecord `json:"last_error,omitempty"`
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
}

// Status returns a snapshot of the engine's state.
func (e *Engine) Status() Status {
	now := time.Now()
	state, _ := e.state.Load().(string)
	paused := e.Paused()
	if paused && state == "running" {
		state = "paused"
	}
	t := &e.totals
	return Status{
		Name: e.opts.Name, Replica: e.opts.Replica, State: state, Paused: paused,
		Totals: Totals{
			Read: t.read.Load(), ReadBytes: t.readBytes.Load(), Acked: t.acked.Load(), Nacked: t.nacked.Load(),
			Written: t.written.Load(), FallbackWritten: t.fallbackWritten.Load(), Dropped: t.dropped.Load(),
			TransformerDropped: t.transformerDropped.Load(), SinkDropped: t.sinkDropped.Load(),
			SinkErrors: t.sinkErrors.Load(), FallbackErrors: t.fallbackErrors.Load(),
			TransformerErrors: t.transformerErrors.Load(), AckErrors: t.ackErrors.Load(),
		},
		Rate: map[string]float64{
			"1m":       e.rate.perSecond(now, time.Minute),
			"5m":       e.rate.perSecond(now, 5*time.Minute),
			"15m":      e.rate.perSecond(now, 15*time.Minute),
			"lookback": e.rate.perSecond(now, e.opts.Lookback),
		},
		Pending:   e.pending.Load(),
		Scaling:   e.ScaleSignals(),
		LastError: e.lastErr.Load(),
	}
}

// AdminHandler serves /metrics from gatherer, /livez, /readyz (ready only
// while every adapter says so and the engine is reading), /status as JSON,
// and /debug/pprof when withPProf is set.
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
	mux.HandleFunc("/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(e.Status())
	})
	if withPProf {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}
