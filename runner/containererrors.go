package runner

import (
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Critical error reasons, as numaflow-core labels monovtx_critical_error_total
// (rust/numaflow-core/src/metrics/mod.rs critical_error_reasons, and
// lib.rs for the whole run), so Numaplane's rollout analysis and existing
// alerts keep working.
const (
	ReasonSourceRuntime      = "source_runtime_error"
	ReasonTransformerRuntime = "source_transformer_runtime_error"
	ReasonSinkRuntime        = "sink_runtime_error"
	ReasonMapRuntime         = "map_runtime_error"
	// ReasonMonoVertexRuntime counts runs that ended with a fatal error.
	ReasonMonoVertexRuntime = "mvtx_runtime_error"
)

// ContainerError is one runtime error of a container, in the shape of
// Numaflow's errors API (mvtxdaemon.proto ContainerError: container,
// timestamp, code, message, details), with the stage it happened in and
// how many times it was seen.
type ContainerError struct {
	// Container is Numaflow's container name: udsource, transformer, udf,
	// udsink, fb-udsink, ons-udsink, or numa for the runner itself.
	Container string `json:"container"`
	// Timestamp is when it was last seen.
	Timestamp time.Time `json:"timestamp"`
	// Code is the gRPC status code as numaflow-core words it ("Internal
	// error", "The service is currently unavailable", ...).
	Code string `json:"code"`
	// Message is the gRPC status message (an SDK's UDF_EXECUTION_ERROR(...) text).
	Message string `json:"message"`
	// Details is where an SDK puts a panic's stack (google.rpc.DebugInfo).
	Details string `json:"details"`
	// Stage is the runner role the container serves (source, transformer,
	// udf, sink, fallback-sink, onsuccess-sink).
	Stage string `json:"stage"`
	// Count is how many times this container reported this code and message.
	Count int64 `json:"count"`
	// FirstSeen is when it was first seen.
	FirstSeen time.Time `json:"firstSeen"`
	// Reason is the monovtx_critical_error_total reason it counted under;
	// empty counts nothing.
	Reason string `json:"reason,omitempty"`
}

// ReplicaErrors are one replica's container errors, as Numaflow's
// GetMonoVertexErrors returns them per replica.
type ReplicaErrors struct {
	Replica         string           `json:"replica"`
	ContainerErrors []ContainerError `json:"containerErrors"`
}

// Bounds of what the ring keeps: a panic's stack is a few KiB, and a
// flood of distinct messages must not grow the runner's memory.
const (
	containerErrorCapacity = 32
	maxErrorMessage        = 2 << 10
	maxErrorDetails        = 16 << 10
)

// ContainerErrors is a bounded ring of container errors: the same
// container, code and message seen again counts up instead of taking a new
// place, and when it is full the entry seen least recently goes. It also
// counts monovtx_critical_error_total by reason.
type ContainerErrors struct {
	mu       sync.Mutex
	entries  []*ContainerError
	critical map[string]int64
	now      func() time.Time
}

var _ ErrorReporter = (*ContainerErrors)(nil)

// NewContainerErrors makes an empty ring.
func NewContainerErrors() *ContainerErrors {
	return &ContainerErrors{critical: map[string]int64{}, now: time.Now}
}

// ReportContainerError records e; Timestamp, Count and FirstSeen are set here.
func (c *ContainerErrors) ReportContainerError(e ContainerError) {
	now := c.now()
	e.Message = clipText(e.Message, maxErrorMessage)
	e.Details = clipText(e.Details, maxErrorDetails)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.Reason != "" {
		c.critical[e.Reason]++
	}
	for _, old := range c.entries {
		if old.Container == e.Container && old.Code == e.Code && old.Message == e.Message {
			old.Count++
			old.Timestamp = now
			if e.Details != "" {
				old.Details = e.Details
			}
			old.Stage = e.Stage
			return
		}
	}
	e.Count, e.Timestamp, e.FirstSeen = 1, now, now
	if len(c.entries) >= containerErrorCapacity {
		oldest := 0
		for i, old := range c.entries {
			if old.Timestamp.Before(c.entries[oldest].Timestamp) {
				oldest = i
			}
		}
		c.entries = append(c.entries[:oldest], c.entries[oldest+1:]...)
	}
	c.entries = append(c.entries, &e)
}

// List returns the errors, the most recently seen first.
func (c *ContainerErrors) List() []ContainerError {
	c.mu.Lock()
	out := make([]ContainerError, len(c.entries))
	for i, e := range c.entries {
		out[i] = *e
	}
	c.mu.Unlock()
	sort.SliceStable(out, func(i, j int) bool { return out[i].Timestamp.After(out[j].Timestamp) })
	return out
}

// Critical returns monovtx_critical_error_total by reason.
func (c *ContainerErrors) Critical() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int64, len(c.critical))
	for k, v := range c.critical {
		out[k] = v
	}
	return out
}

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "… (" + strconv.Itoa(len(s)-n) + " bytes more)"
}

// criticalCollector exports the ring's reason counts as
// monovtx_critical_error_total{mvtx_name, mvtx_replica, reason}; a reason
// appears once it was counted, as in numaflow-core.
type criticalCollector struct {
	errs *ContainerErrors
	desc *prometheus.Desc
}

func newCriticalCollector(errs *ContainerErrors, labels prometheus.Labels) *criticalCollector {
	return &criticalCollector{errs: errs, desc: prometheus.NewDesc("monovtx_critical_error_total",
		"Runtime errors of the user containers (a failed call or broken stream), and fatal ends of the run, by reason.",
		[]string{"reason"}, labels)}
}

func (c *criticalCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *criticalCollector) Collect(ch chan<- prometheus.Metric) {
	for reason, n := range c.errs.Critical() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(n), reason)
	}
}
