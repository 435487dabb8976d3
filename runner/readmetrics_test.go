package runner_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/runnertest"
)

// TestReadMetricsAreNumaflows: monovtx_read_total is counted by the
// partition each message was read from (numaflow-core's source_partition
// label, the replica for a source that names none), and
// monovtx_read_batch_size is what the last read returned; as there, a
// read that failed is neither timed nor sets the batch size.
func TestReadMetricsAreNumaflows(t *testing.T) {
	msgs := runnertest.Messages(7)
	// Partitions in runs and out of order, one beyond 255, two unnamed.
	for i, p := range []int{1, 1, 2, -1, 1, -1, 300} {
		if p >= 0 {
			msgs[i].Offset = runnertest.Partition(p)
		}
	}
	src := runnertest.NewSource(msgs)
	src.ReadError = func(reads int) error { // the first read fails
		if reads == 1 {
			return errors.New("source not ready")
		}
		return nil
	}
	reg := prometheus.NewRegistry()
	opts := runner.Options{Name: "mv", Replica: 5, BatchSize: 4, ReadTimeout: time.Minute, Registerer: reg}
	run(t, opts, src, nil, runnertest.NewSink(nil), nil)
	if len(src.Acked()) != 7 {
		t.Fatalf("acked %d of 7", len(src.Acked()))
	}
	reads, batch, timed := readMetrics(t, reg)
	want := map[string]float64{"1": 3, "2": 1, "5": 2, "300": 1}
	if len(reads) != len(want) {
		t.Errorf("monovtx_read_total by source_partition %v, want %v", reads, want)
	}
	for p, n := range want {
		if reads[p] != n {
			t.Errorf("monovtx_read_total{source_partition=%q} = %v, want %v (all: %v)", p, reads[p], n, reads)
		}
	}
	// A failed read, reads of 4 and 3, and one that waits until everything
	// is acked and ends the run (io.EOF): only the two that returned are
	// timed and set the gauge.
	if batch != 3 {
		t.Errorf("monovtx_read_batch_size = %v, want 3, the last read's", batch)
	}
	if timed != 2 {
		t.Errorf("monovtx_read_time has %d observations, want 2, the reads that returned", timed)
	}
}

// readMetrics gathers monovtx_read_total by source partition, the last
// monovtx_read_batch_size and the number of reads monovtx_read_time timed.
func readMetrics(t *testing.T, reg *prometheus.Registry) (reads map[string]float64, batch float64, timed uint64) {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	reads, batch = map[string]float64{}, -1
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			switch f.GetName() {
			case "monovtx_read_total":
				for _, l := range m.GetLabel() {
					if l.GetName() == runner.LabelSourcePartition {
						reads[l.GetValue()] += m.GetCounter().GetValue()
					}
				}
			case "monovtx_read_batch_size":
				batch = m.GetGauge().GetValue()
			case "monovtx_read_time":
				timed = m.GetHistogram().GetSampleCount()
			}
		}
	}
	return reads, batch, timed
}

// partialSource answers its first read with the messages it read and an
// error, as a user-defined source's stream that broke after part of its
// answer.
type partialSource struct {
	*runnertest.Source
	reads int
}

func (s *partialSource) Read(ctx context.Context, max int, timeout time.Duration) ([]*runner.Message, error) {
	msgs, err := s.Source.Read(ctx, max, timeout)
	if s.reads++; s.reads == 1 && err == nil {
		err = errors.New("the read stream broke")
	}
	return msgs, err
}

// TestAPartialReadIsProcessedAndTimed: the messages of a read that came
// back with an error are processed and acked, and the read is timed and
// sets the batch size, as numaflow-core records a read that returned; the
// error is reported and the next read follows.
func TestAPartialReadIsProcessedAndTimed(t *testing.T) {
	src := &partialSource{Source: runnertest.NewSource(runnertest.Messages(7))}
	sink := runnertest.NewSink(nil)
	reg := prometheus.NewRegistry()
	e := run(t, runner.Options{Name: "mv", BatchSize: 4, ReadTimeout: time.Minute, Registerer: reg}, src, nil, sink, nil)
	if len(src.Acked()) != 7 || len(sink.WrittenIDs()) != 7 {
		t.Fatalf("acked %d, written %d, want 7 each", len(src.Acked()), len(sink.WrittenIDs()))
	}
	reads, batch, timed := readMetrics(t, reg)
	if reads["0"] != 7 {
		t.Errorf("monovtx_read_total = %v, want 7 on partition 0", reads)
	}
	// The partial read of 4, a read of 3, and the one that ends the run.
	if timed != 2 || batch != 3 {
		t.Errorf("monovtx_read_time observed %d reads, monovtx_read_batch_size %v; want 2 and 3", timed, batch)
	}
	if st := e.Status(); st.LastError == nil || !strings.Contains(st.LastError.Error, "the read stream broke") {
		t.Errorf("last error %+v, want the source's", st.LastError)
	}
}

// TestDropMetricsAreNumaflows: numaflow-core adds to monovtx_dropped_total
// only for a delivery of a message already in flight (source.rs); a
// transformer's drops, tagged or after its retries, go to
// monovtx_transformer_dropped_total (transformer.rs), a sink's to
// monovtx_sink_dropped_total (sinker/sink.rs). /status still counts
// every drop in its total.
func TestDropMetricsAreNumaflows(t *testing.T) {
	src := runnertest.NewSource(runnertest.Messages(6))
	tr := runnertest.NewTransformer(func(m *runner.Message, _ int) runner.TransformResult {
		switch m.ID {
		case "m-0":
			return runner.TransformResult{} // dropped on purpose
		case "m-1":
			return runner.TransformResult{Err: runner.Permanent(errors.New("cannot transform"))}
		}
		out := *m
		return runner.TransformResult{Outputs: []*runner.Message{&out}}
	})
	sink := runnertest.NewSink(func(m *runner.Message, _ int) runner.WriteResult {
		if m.ID == "m-2" {
			return runner.WriteResult{Status: runner.WriteFailed, Err: runner.Permanent(errors.New("refused"))}
		}
		return runner.WriteResult{}
	})
	reg := prometheus.NewRegistry()
	opts := runner.Options{Name: "mv", BatchSize: 6, ReadTimeout: time.Minute, Registerer: reg,
		OnFailure: runner.OnFailureDrop, Retry: runner.RetryPolicy{Interval: time.Millisecond, Steps: 1}}
	e := run(t, opts, src, tr, sink, nil)
	if len(src.Acked()) != 6 || len(sink.WrittenIDs()) != 3 {
		t.Fatalf("acked %d, written %v; want 6 and m-3..m-5", len(src.Acked()), sink.WrittenIDs())
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			got[f.GetName()] += m.GetCounter().GetValue()
		}
	}
	for name, want := range map[string]float64{
		"monovtx_dropped_total":             0,
		"monovtx_transformer_dropped_total": 2,
		"monovtx_sink_dropped_total":        1,
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
	if st := e.Status().Totals; st.Dropped != 3 || st.TransformerDropped != 2 || st.SinkDropped != 1 {
		t.Errorf("/status dropped %d, transformer %d, sink %d; want 3, 2, 1", st.Dropped, st.TransformerDropped, st.SinkDropped)
	}
}
