package runner

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Numaflow's MonoVertex data-health states (v1alpha1.MonoVertexStatus*),
// which its UI colours by.
const (
	HealthHealthy  = "healthy"
	HealthCritical = "critical"
	HealthUnknown  = "unknown"
)

// Health is the data-flow health Numaflow's MonoVertex daemon reports in
// GetMonoVertexStatus: a state, a message saying why, and Numaflow's code
// (D1 healthy, D3 critical, D4 unknown).
type Health struct {
	Status  string `json:"status"`
	Message string `json:"message"`
	Code    string `json:"code"`
}

// health judges the data flow from the scale signals as Numaflow's daemon
// does (pkg/mvtxdaemon/server/service/health_status.go): unknown without a
// pending count; critical when the replicas are at the maximum and the
// backlog wants more; healthy otherwise. The daemon compares with the
// replica count the controller set; a runner has none, so it takes its
// recommendation, which stands for that count when the autoscaler
// follows it. With MV_MAX_SCALE=1 the two are the same.
func (e *Engine) health(s ScaleSignals) Health {
	if s.Pending < 0 {
		return Health{HealthUnknown, "MonoVertex data flow is in an unknown state due to no pending information from the source", "D4"}
	}
	sc := e.opts.Scaling
	if sc.Max > 0 && s.DesiredReplicas == sc.Max {
		// The formula without the bounds: what the backlog asks for.
		if want := desiredReplicas(s.Pending, s.Rate, Scaling{TargetSeconds: sc.TargetSeconds}); want > sc.Max {
			return Health{HealthCritical, fmt.Sprintf("MonoVertex data flow is in a critical state for %s: %d pending at %.4g/s want %d replicas to drain in %gs, and MV_MAX_SCALE is %d",
				e.opts.Name, s.Pending, s.Rate, want, sc.TargetSeconds, sc.Max), "D3"}
		}
	}
	return Health{HealthHealthy, "MonoVertex data flow is healthy", "D1"}
}

// Health is the data-flow health now, as GetMonoVertexStatus answers it.
func (e *Engine) Health() Health { return e.health(e.ScaleSignals()) }

// PendingAverages is what monovtx_pending{period} holds now, by period
// (1m, 5m, 15m, default), as GetMonoVertexMetrics answers its pendings; a
// period not computable yet is absent.
func (e *Engine) PendingAverages() map[string]int64 { return e.load.pendingAvg.averages() }

// ProcessingRates are the acked inputs per second over Numaflow's windows,
// keyed as its daemon keys them: 1m, 5m, 15m and default (the lookback).
func (e *Engine) ProcessingRates(now time.Time) map[string]float64 {
	return map[string]float64{
		"1m":      e.load.rate.perSecond(now, time.Minute),
		"5m":      e.load.rate.perSecond(now, 5*time.Minute),
		"15m":     e.load.rate.perSecond(now, 15*time.Minute),
		"default": e.load.rate.perSecond(now, e.opts.Lookback),
	}
}

// RuntimeError is one entry of /runtime/errors, in the shape numaflow's
// monitor serves it: the timestamp in Unix seconds.
type RuntimeError struct {
	Container string `json:"container"`
	Timestamp int64  `json:"timestamp"`
	Code      string `json:"code"`
	Message   string `json:"message"`
	Details   string `json:"details"`
}

// RuntimeErrors is the body of /runtime/errors, as numaflow's monitor
// answers it to the MonoVertex daemon.
type RuntimeErrors struct {
	ErrorMessage *string        `json:"errorMessage"`
	Data         []RuntimeError `json:"data"`
}

// RuntimeErrors lists the containers' runtime errors as /runtime/errors
// serves them, the most recently seen first.
func (e *Engine) RuntimeErrors() RuntimeErrors {
	list := e.cerrs.List()
	out := RuntimeErrors{Data: make([]RuntimeError, len(list))}
	for i, c := range list {
		out.Data[i] = RuntimeError{Container: c.Container, Timestamp: c.Timestamp.Unix(), Code: c.Code, Message: c.Message, Details: c.Details}
	}
	return out
}

// sidecarLivez answers as numaflow-core's /sidecar-livez, the liveness
// probe Numaflow puts on the user containers: 204 while every user
// container answers its IsReady, 503 naming those that do not.
func (e *Engine) sidecarLivez(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	var down []string
	for _, a := range e.adapters() {
		s, ok := a.v.(Sidecar)
		if !ok {
			continue
		}
		// Not connected yet: its container has not come up.
		if err := a.link.notConnected(); err != nil {
			down = append(down, s.SidecarContainer()+": "+err.Error())
			continue
		}
		if err := s.Ready(ctx); err != nil {
			down = append(down, s.SidecarContainer()+": "+err.Error())
		}
	}
	if len(down) > 0 {
		http.Error(w, strings.Join(down, "; "), http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
