package runner

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric label names, as Numaflow's mono vertex uses them, so existing
// dashboards and alerts keep working.
const (
	LabelName    = "mvtx_name"
	LabelReplica = "mvtx_replica"
	// LabelSourcePartition labels monovtx_read_total with the partition a
	// message was read from (numaflow-core's SOURCE_PARTITION_NAME_LABEL).
	LabelSourcePartition = "source_partition"
)

// Metrics are the engine's Prometheus collectors, named as Numaflow names them.
type Metrics struct {
	ReadTotal               *prometheus.CounterVec // by source_partition
	ReadBytesTotal          prometheus.Counter
	AckTotal                prometheus.Counter
	NackTotal               prometheus.Counter
	DroppedTotal            prometheus.Counter
	TransformerDropped      prometheus.Counter
	TransformerErrors       prometheus.Counter
	SinkWriteTotal          prometheus.Counter
	SinkWriteErrors         prometheus.Counter
	SinkDropped             prometheus.Counter
	FallbackSinkWriteTotal  prometheus.Counter
	FallbackSinkErrors      prometheus.Counter
	OnSuccessSinkWriteTotal prometheus.Counter
	OnSuccessSinkErrors     prometheus.Counter
	UDFErrors               prometheus.Counter
	UDFDropped              prometheus.Counter
	FilterDropped           prometheus.Counter
	FilterErrors            prometheus.Counter
	PendingRaw              prometheus.Gauge
	ReadBatchSize           prometheus.Gauge
	ProcessingTime          prometheus.Observer
	ReadTime                prometheus.Observer
	AckTime                 prometheus.Observer
	NackTime                prometheus.Observer
	TransformerTime         prometheus.Observer
	SinkTime                prometheus.Observer
	FallbackSinkTime        prometheus.Observer
	OnSuccessSinkTime       prometheus.Observer
	UDFTime                 prometheus.Observer
	FilterTime              prometheus.Observer

	// histograms are the timing histograms above by metric name, in the
	// order of a message's way through the pipeline, for the status page.
	histograms []namedHistogram
}

type namedHistogram struct {
	name string
	h    prometheus.Histogram
}

// microsecondBuckets spans 100µs to 10 minutes, the range between a cheap
// in-process sink and a sink retrying through an outage.
var microsecondBuckets = prometheus.ExponentialBucketsRange(100, 600e6, 24)

// NewMetrics creates the engine's collectors, labelled with the mono vertex
// name and replica, and registers them with reg.
func NewMetrics(reg prometheus.Registerer, name string, replica int) (*Metrics, error) {
	labels := prometheus.Labels{LabelName: name, LabelReplica: strconv.Itoa(replica)}
	var collectors []prometheus.Collector
	counter := func(n, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: n, Help: help, ConstLabels: labels})
		collectors = append(collectors, c)
		return c
	}
	counterVec := func(n, help string, label string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: n, Help: help, ConstLabels: labels}, []string{label})
		collectors = append(collectors, c)
		return c
	}
	gauge := func(n, help string) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: n, Help: help, ConstLabels: labels})
		collectors = append(collectors, g)
		return g
	}
	var hists []namedHistogram
	histogram := func(n, help string) prometheus.Observer {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: n, Help: help, ConstLabels: labels, Buckets: microsecondBuckets})
		collectors = append(collectors, h)
		hists = append(hists, namedHistogram{n, h})
		return h
	}
	m := &Metrics{
		ReadTotal:               counterVec("monovtx_read_total", "Messages read from the source, by the partition they were read from.", LabelSourcePartition),
		ReadBytesTotal:          counter("monovtx_read_bytes_total", "Payload bytes read from the source."),
		AckTotal:                counter("monovtx_ack_total", "Messages acknowledged to the source."),
		NackTotal:               counter("monovtx_nack_total", "Messages handed back to the source unfinished."),
		DroppedTotal:            counter("monovtx_dropped_total", "Deliveries of a message already in flight, dropped, as numaflow-core counts them; each stage's drops have their own counter."),
		TransformerDropped:      counter("monovtx_transformer_dropped_total", "Input messages for which the transformer returned no output, or dropped after its retries (MV_ON_FAILURE=drop)."),
		TransformerErrors:       counter("monovtx_transformer_errors_total", "Failed transformer calls and per-message transformer errors."),
		SinkWriteTotal:          counter("monovtx_sink_write_total", "Messages written by the sink."),
		SinkWriteErrors:         counter("monovtx_sink_write_errors_total", "Failed sink writes (each retry counts)."),
		SinkDropped:             counter("monovtx_sink_dropped_total", "Messages dropped after the sink retries were spent (MV_ON_FAILURE=drop)."),
		FallbackSinkWriteTotal:  counter("monovtx_fallback_sink_write_total", "Messages written by the fallback sink."),
		FallbackSinkErrors:      counter("monovtx_fallback_sink_write_errors_total", "Failed fallback sink writes (each retry counts)."),
		OnSuccessSinkWriteTotal: counter("monovtx_onsuccess_sink_write_total", "Messages written by the onSuccess sink."),
		OnSuccessSinkErrors:     counter("monovtx_onsuccess_sink_write_errors_total", "Failed onSuccess sink writes (each retry counts)."),
		UDFErrors:               counter("monovtx_udf_error_total", "Failed map UDF calls and per-message map UDF errors."),
		UDFDropped:              counter("monovtx_udf_drop_total", "Messages the map UDF dropped (no output, or only dropped ones), or dropped after its retries (MV_ON_FAILURE=drop)."),
		FilterDropped:           counter("monovtx_filter_dropped_total", "Messages the in-process filter (MV_FILTER, MV_FILTERS) did not let through."),
		FilterErrors:            counter("monovtx_filter_errors_total", "Messages the in-process filter could not evaluate (not a valid CloudEvent)."),
		FilterTime:              histogram("monovtx_filter_time", "Time of one in-process filter call over a batch, in microseconds."),
		NackTime:                histogram("monovtx_nack_time", "Time of one source nack call, in microseconds."),
		OnSuccessSinkTime:       histogram("monovtx_onsuccess_sink_time", "Time of one onSuccess sink write call, in microseconds."),
		UDFTime:                 histogram("monovtx_udf_time", "Time of one map UDF call, in microseconds."),
		PendingRaw:              gauge("monovtx_pending_raw", "Messages pending at the source, as it last reported; -1 when unknown."),
		ReadBatchSize:           gauge("monovtx_read_batch_size", "Messages the last source read returned, as Numaflow sets it (at most MV_READ_BATCH_SIZE)."),
		ProcessingTime:          histogram("monovtx_processing_time", "Time from read to ack of a batch, in microseconds."),
		ReadTime:                histogram("monovtx_read_time", "Time of one source read, in microseconds."),
		AckTime:                 histogram("monovtx_ack_time", "Time of one source ack call, in microseconds."),
		TransformerTime:         histogram("monovtx_transformer_time", "Time of one transformer call, in microseconds."),
		SinkTime:                histogram("monovtx_sink_time", "Time of one sink write call, in microseconds."),
		FallbackSinkTime:        histogram("monovtx_fallback_sink_time", "Time of one fallback sink write call, in microseconds."),
	}
	m.histograms = sortHistograms(hists)
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func observeSince(o prometheus.Observer, start time.Time) {
	o.Observe(float64(time.Since(start).Nanoseconds()) / 1e3)
}
