package runner

import (
	"slices"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// NoConnection is the Connection of an Env built without metrics (tests).
var NoConnection Connection = noConnection{}

type noConnection struct{}

func (noConnection) Up()          {}
func (noConnection) Failed(error) {}
func (noConnection) Lost(error)   {}

// Connections holds the monovtx_connection_* metrics, one set of series
// per adapter role.
type Connections struct {
	up, failed, lost *prometheus.CounterVec
	connected        *prometheus.GaugeVec
	sdk              *prometheus.GaugeVec

	mu    sync.Mutex
	roles map[Role]*connection
}

// NewConnections registers the connection metrics. They are made before
// the engine, because the adapters that report to them connect first.
func NewConnections(reg prometheus.Registerer, name string, replica int) (*Connections, error) {
	labels := prometheus.Labels{LabelName: name, LabelReplica: strconv.Itoa(replica)}
	vec := func(n, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: n, Help: help, ConstLabels: labels}, []string{"role"})
	}
	c := &Connections{
		up:     vec("monovtx_connection_up_total", "Connections to an adapter's peer established, by adapter role (Benthos' connection_up)."),
		failed: vec("monovtx_connection_failed_total", "Attempts to connect to an adapter's peer that failed, by adapter role (Benthos' connection_failed)."),
		lost:   vec("monovtx_connection_lost_total", "Established connections to an adapter's peer that broke, by adapter role (Benthos' connection_lost)."),
		connected: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "monovtx_connected", ConstLabels: labels,
			Help: "1 while an adapter's connection to its peer is up, 0 while it is away; absent for adapters that hold none."}, []string{"role"}),
		// numaflow-core's global sdk_info, with its labels: no mvtx_*
		// labels, component "mono-vertex" and the vertex's name.
		sdk: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sdk_info",
			ConstLabels: prometheus.Labels{"component": "mono-vertex", "component_name": name},
			Help:        "A metric with a constant value '1', labeled by SDK information such as version, language, and type"},
			[]string{"language", "version", "type"}),
	}
	for _, col := range []prometheus.Collector{c.up, c.failed, c.lost, c.connected, c.sdk} {
		if err := reg.Register(col); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// For is the Connection an adapter in role reports to: one per role, so
// the engine's reports of its Connect attempts and the adapter's own of
// what follows share whether the connection is up.
func (c *Connections) For(role Role) Connection {
	if c == nil {
		return NoConnection
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if conn, ok := c.roles[role]; ok {
		return conn
	}
	r := string(role)
	conn := &connection{up: c.up.WithLabelValues(r), failed: c.failed.WithLabelValues(r), lost: c.lost.WithLabelValues(r),
		connected: c.connected.WithLabelValues(r), sdk: c.sdk}
	if c.roles == nil {
		c.roles = map[Role]*connection{}
	}
	c.roles[role] = conn
	return conn
}

type connection struct {
	mu                 sync.Mutex
	up, failed, lost   prometheus.Counter
	connected          prometheus.Gauge
	isUp, everReported bool
	sdk                *prometheus.GaugeVec
	sdkLabels          []string // the series SDK last set
}

// SDK sets this connection's sdk_info series, replacing the one a
// container before a restart set.
func (c *connection) SDK(language, version, container string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	labels := []string{language, version, container}
	if c.sdkLabels != nil {
		if slices.Equal(c.sdkLabels, labels) {
			return
		}
		c.sdk.DeleteLabelValues(c.sdkLabels...)
	}
	c.sdk.WithLabelValues(labels...).Set(1)
	c.sdkLabels = labels
}

func (c *connection) Up() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.up.Inc()
	c.connected.Set(1)
	c.isUp, c.everReported = true, true
}

func (c *connection) Failed(error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failed.Inc()
	if !c.isUp {
		c.connected.Set(0)
	}
	c.everReported = true
}

func (c *connection) Lost(error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// A report of a loss for a connection already down (two streams
	// breaking on the same restart) counts once.
	if c.isUp || !c.everReported {
		c.lost.Inc()
	}
	c.connected.Set(0)
	c.isUp, c.everReported = false, true
}
