package kafka

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// partitionBases gives each topic the number of its partition 0 among all
// the partitions read, as numaflow-kafka's compute_topic_partition_offsets
// does (rust/extns/numaflow-kafka/src/source.rs): the topics sorted by
// name, topic i starts at i times the most partitions any of them has. So
// with "b" of 2 partitions and "a" of 3, a[0..2] are 0..2 and b[0..1] 3..4.
// numaflow-core prints that number after a Kafka message's offset
// (StringOffset's partition_idx, source/kafka.rs) and labels
// monovtx_read_total's source_partition with it, so the IDs under
// MV_MESSAGE_IDS=numaflow and that label need it.
//
// A MonoVertex computes it once, at start: numaflow-kafka refreshes it only
// in partitions_info, which numaflow-core calls only from the watermark
// task of a pipeline's source (source.rs, watermark_handle), and a
// MonoVertex creates its source without one (monovertex.rs). So, as there,
// partitions added to a topic later number on from its base, into the next
// topic's range, until the runner restarts.
func partitionBases(counts map[string]int) map[string]int {
	topics := make([]string, 0, len(counts))
	most := 0
	for t, n := range counts {
		topics = append(topics, t)
		most = max(most, n)
	}
	// Rust's sort of Strings and Go's of strings both order by bytes.
	slices.Sort(topics)
	bases := make(map[string]int, len(topics))
	for i, t := range topics {
		bases[t] = i * most
	}
	return bases
}

// partitionCounts asks the brokers how many partitions each topic has, as
// numaflow-kafka's fetch_metadata at start, and returns each topic's ID,
// by which watchTopics tells a recreated topic.
func partitionCounts(ctx context.Context, adm *kadm.Client, topics []string) (map[string]int, map[string]kadm.TopicID, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	details, err := adm.ListTopics(ctx, topics...)
	if err == nil {
		err = details.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("kafka source: metadata of topics %v, for their global partition numbers (message IDs, source_partition): %w", topics, err)
	}
	counts, ids := make(map[string]int, len(topics)), make(map[string]kadm.TopicID, len(topics))
	for _, t := range topics {
		counts[t], ids[t] = len(details[t].Partitions), details[t].ID
	}
	return counts, ids, nil
}
