package runner

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// offsetPartitions is a PartitionedSource whose messages keep their
// partition in their Offset, as Kafka's and udsource's handles do.
type offsetPartitions struct{}

func (offsetPartitions) SourcePartition(m *Message) (uint16, bool) {
	p, ok := m.Offset.(*uint16)
	if !ok {
		return 0, false
	}
	return *p, true
}

// TestCountingReadsByPartitionAllocatesNothing: asking the source for each
// message's partition and counting monovtx_read_total by it allocate
// nothing once a partition's counter is known, so a partitioned source
// costs the read loop no allocation per message.
func TestCountingReadsByPartitionAllocatesNothing(t *testing.T) {
	m, err := NewMetrics(prometheus.NewRegistry(), "mv", 5)
	if err != nil {
		t.Fatal(err)
	}
	tl := newTally(m, 5)
	msgs := make([]*Message, 64)
	parts := []uint16{0, 1, 2, 300}
	for i := range msgs {
		if i%16 == 15 {
			msgs[i] = &Message{} // names none: the replica's
			continue
		}
		msgs[i] = &Message{Offset: &parts[i/16]}
	}
	tl.countRead(msgs, offsetPartitions{}) // learns the counters
	allocs := testing.AllocsPerRun(100, func() {
		tl.countRead(msgs, offsetPartitions{})
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per read of %d messages, want 0", allocs, len(msgs))
	}
	// Once above, once as AllocsPerRun warms up, 100 runs.
	const reads = 102
	for label, want := range map[string]float64{"0": 15 * reads, "1": 15 * reads, "2": 15 * reads, "300": 15 * reads, "5": 4 * reads} {
		var c dto.Metric
		if err := m.ReadTotal.WithLabelValues(label).Write(&c); err != nil {
			t.Fatal(err)
		}
		if got := c.GetCounter().GetValue(); got != want {
			t.Errorf("monovtx_read_total{source_partition=%q} = %v, want %v", label, got, want)
		}
	}
}
