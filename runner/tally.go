package runner

import (
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// count is one thing the engine counts: the total /status reports and,
// where Numaflow has a metric for it, the Prometheus counter of the same
// events, added to together so that the two never disagree.
type count struct {
	n      atomic.Int64
	metric prometheus.Counter // nil: counted for /status only
}

// add counts n more.
func (c *count) add(n int) {
	if n == 0 {
		return
	}
	c.n.Add(int64(n))
	if c.metric != nil {
		c.metric.Add(float64(n))
	}
}

// load is the total since start.
func (c *count) load() int64 { return c.n.Load() }

// tally is every count the engine keeps, the one place that feeds both
// /status (Totals) and the Prometheus counters of Metrics.
type tally struct {
	read, readBytes, acked, nacked               count
	written, fallbackWritten, dropped            count
	transformerDropped, sinkDropped, sinkErrors  count
	fallbackErrors, transformerErrors, ackErrors count
	onSuccessWritten, onSuccessErrors            count
	udfDropped, udfErrors, sinkNacked            count
	bypassed, bypassDropped, duplicates          count
	filterDropped, filterErrors                  count

	// readTotal is monovtx_read_total, labelled by partition, which read
	// counts beside read; readTotals caches its counters by partition key
	// (partitionKey). Only the read loop touches them.
	readTotal  *prometheus.CounterVec
	readTotals map[int32]prometheus.Counter
	replica    int
}

// newTally ties each count to its counter in m. dropped counts every drop
// for /status; monovtx_dropped_total counts only the duplicates, as
// numaflow-core's does, so it goes with duplicates.
func newTally(m *Metrics, replica int) *tally {
	t := &tally{readTotal: m.ReadTotal, replica: replica}
	for _, c := range []struct {
		c *count
		m prometheus.Counter
	}{
		{&t.readBytes, m.ReadBytesTotal}, {&t.acked, m.AckTotal}, {&t.nacked, m.NackTotal},
		{&t.duplicates, m.DroppedTotal},
		{&t.transformerDropped, m.TransformerDropped}, {&t.transformerErrors, m.TransformerErrors},
		{&t.udfDropped, m.UDFDropped}, {&t.udfErrors, m.UDFErrors},
		{&t.filterDropped, m.FilterDropped}, {&t.filterErrors, m.FilterErrors},
		{&t.written, m.SinkWriteTotal}, {&t.sinkErrors, m.SinkWriteErrors}, {&t.sinkDropped, m.SinkDropped},
		{&t.fallbackWritten, m.FallbackSinkWriteTotal}, {&t.fallbackErrors, m.FallbackSinkErrors},
		{&t.onSuccessWritten, m.OnSuccessSinkWriteTotal}, {&t.onSuccessErrors, m.OnSuccessSinkErrors},
	} {
		c.c.metric = c.m
	}
	return t
}

// countRead counts a read: messages, bytes, and monovtx_read_total by the
// partition each was read from, as ps says (nil: the source names none).
func (t *tally) countRead(msgs []*Message, ps PartitionedSource) {
	var n int
	// A read is mostly of one partition: add runs of equal partitions.
	run, part := 0, partitionKey(ps, msgs[0])
	for _, m := range msgs {
		n += len(m.Value)
		if p := partitionKey(ps, m); p != part {
			t.readCounter(part).Add(float64(run))
			run, part = 0, p
		}
		run++
	}
	t.readCounter(part).Add(float64(run))
	t.read.add(len(msgs))
	t.readBytes.add(n)
}

// partitionKey is the partition ps says m was read from, plus one, or 0
// when it names none (or ps is nil): the key of the message's read
// counter and of its lane under MV_ORDERING.
func partitionKey(ps PartitionedSource, m *Message) int32 {
	if ps == nil {
		return 0
	}
	if p, ok := ps.SourcePartition(m); ok {
		return int32(p) + 1
	}
	return 0
}

// readCounter is monovtx_read_total of a partition key (partitionKey: the
// partition + 1, or 0 for the replica), kept so that a read looks the
// label up once.
func (t *tally) readCounter(part int32) prometheus.Counter {
	if c, ok := t.readTotals[part]; ok {
		return c
	}
	label := int(part) - 1
	if part == 0 {
		label = t.replica
	}
	c := t.readTotal.WithLabelValues(strconv.Itoa(label))
	if t.readTotals == nil {
		t.readTotals = map[int32]prometheus.Counter{}
	}
	t.readTotals[part] = c
	return c
}

// totals is the snapshot /status reports.
func (t *tally) totals() Totals {
	tt := Totals{
		Read: t.read.load(), ReadBytes: t.readBytes.load(), Acked: t.acked.load(), Nacked: t.nacked.load(),
		Written: t.written.load(), FallbackWritten: t.fallbackWritten.load(), Dropped: t.dropped.load(),
		TransformerDropped: t.transformerDropped.load(), SinkDropped: t.sinkDropped.load(),
		SinkErrors: t.sinkErrors.load(), FallbackErrors: t.fallbackErrors.load(),
		TransformerErrors: t.transformerErrors.load(), AckErrors: t.ackErrors.load(),
		OnSuccessWritten: t.onSuccessWritten.load(), OnSuccessErrors: t.onSuccessErrors.load(),
		UDFDropped: t.udfDropped.load(), UDFErrors: t.udfErrors.load(), SinkNacked: t.sinkNacked.load(),
		FilterDropped: t.filterDropped.load(), FilterErrors: t.filterErrors.load(),
		Bypassed: t.bypassed.load(), BypassDropped: t.bypassDropped.load(), DuplicateDropped: t.duplicates.load(),
	}
	tt.Errors = tt.FilterErrors + tt.TransformerErrors + tt.UDFErrors + tt.SinkErrors + tt.FallbackErrors + tt.OnSuccessErrors + tt.AckErrors
	return tt
}
