package kafka

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/monovertex/monovertex/internal/kafkatest"
	"github.com/monovertex/monovertex/runner"
)

// The global partition numbers are numaflow-kafka's
// compute_topic_partition_offsets: topics sorted by name, each starting at
// its index times the most partitions of any topic (not the sum of the
// partitions before it, nor in the order MV_KAFKA_TOPIC names them).
func TestPartitionBasesAsNumaflowKafka(t *testing.T) {
	for _, tc := range []struct {
		name   string
		counts map[string]int
		want   map[string]int
	}{
		{"one topic", map[string]int{"t": 5}, map[string]int{"t": 0}},
		// The example of numaflow-kafka's doc comment.
		{"equal topics", map[string]int{"topic2": 12, "topic1": 12}, map[string]int{"topic1": 0, "topic2": 12}},
		{"the larger topic sets the stride", map[string]int{"b": 2, "a": 3}, map[string]int{"a": 0, "b": 3}},
		{"sorted by bytes", map[string]int{"b": 3, "B": 1, "a": 2}, map[string]int{"B": 0, "a": 3, "b": 6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := partitionBases(tc.counts); !maps.Equal(got, tc.want) {
				t.Fatalf("bases %v, want %v", got, tc.want)
			}
		})
	}
}

// Under MV_MESSAGE_IDS=numaflow a record's ID is numaflow-core's offset
// string, "<topic>:<partition>:<offset>-<global partition>", the global
// partitions counted from the brokers' metadata at start. Acks go by the
// message's handle, so they commit even after the engine renamed the IDs.
func TestNumaflowIDsCarryTheGlobalPartition(t *testing.T) {
	c := kafkatest.Start(t, 1, map[string]int{"nid-c": 1, "nid-a": 2, "nid-b": 3})
	cl := c.Client(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	producePerPartition(t, cl, "nid-c", 1, 2)
	producePerPartition(t, cl, "nid-a", 2, 2)
	producePerPartition(t, cl, "nid-b", 3, 2)
	cfg := testConfig(c.Brokers(), "nid-c, nid-a, nid-b")
	cfg.MessageIDs = runner.NumaflowIDs
	s := newSource(t, cfg)
	got := ids(readAll(t, s, 12))
	// Sorted: nid-a from 0, nid-b from 1*3, nid-c from 2*3.
	var want []string
	for _, p := range []struct {
		topic     string
		partition int
		global    int
	}{{"nid-a", 0, 0}, {"nid-a", 1, 1}, {"nid-b", 0, 3}, {"nid-b", 1, 4}, {"nid-b", 2, 5}, {"nid-c", 0, 6}} {
		for off := range 2 {
			want = append(want, fmt.Sprintf("%s:%d:%d-%d", p.topic, p.partition, off, p.global))
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("IDs\n%v\nwant\n%v", got, want)
	}
}

// Under MV_MESSAGE_IDS=numaflow the engine renames every message after
// Read; the acks still commit each partition to its end.
func TestNumaflowIDsAckAfterTheEngineRenamed(t *testing.T) {
	c := kafkatest.Start(t, 1, map[string]int{"nid-ack": 2})
	cl := c.Client(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	producePerPartition(t, cl, "nid-ack", 2, 3)
	cfg := testConfig(c.Brokers(), "nid-ack")
	cfg.MessageIDs = runner.NumaflowIDs
	s := newSource(t, cfg)
	got := readAll(t, s, 6)
	for _, m := range got {
		m.ID = "mv-" + m.ID + "-0" // what runner.Engine does after Read
	}
	if err := s.Ack(context.Background(), got); err != nil {
		t.Fatal(err)
	}
	testutilWait(t, 20*time.Second, func() bool {
		return fmt.Sprint(kafkatest.Committed(t, cl, cfg.Group, "nid-ack")) == fmt.Sprint(map[int32]int64{0: 3, 1: 3})
	})
}

// Whatever MV_MESSAGE_IDS says, each record carries its global partition
// as its source partition, monovtx_read_total's source_partition label
// as numaflow-core sets it (the partition index of its offset); the IDs
// keep the source's form.
func TestRecordsCarryTheirGlobalPartition(t *testing.T) {
	c := kafkatest.Start(t, 1, map[string]int{"gp-b": 1, "gp-a": 2})
	cl := c.Client(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	producePerPartition(t, cl, "gp-b", 1, 2)
	producePerPartition(t, cl, "gp-a", 2, 2)
	s := newSource(t, testConfig(c.Brokers(), "gp-b,gp-a"))
	var got []string
	for _, m := range readAll(t, s, 6) {
		p, ok := s.SourcePartition(m)
		got = append(got, fmt.Sprintf("%s %d %v", m.ID, p, ok))
	}
	slices.Sort(got)
	// Sorted by name: gp-a from 0, gp-b from 1*2.
	want := []string{
		"gp-a:0:0 0 true", "gp-a:0:1 0 true", "gp-a:1:0 1 true", "gp-a:1:1 1 true",
		"gp-b:0:0 2 true", "gp-b:0:1 2 true",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("ID, source partition:\n%v\nwant\n%v", got, want)
	}
}
