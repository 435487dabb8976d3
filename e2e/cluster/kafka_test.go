package cluster_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKafkaExample: deploy/kafka-keda/ (kafka-keda.yaml and kafka-hpa.yaml,
// each a runner reading the topic orders with its own consumer group and
// writing to its own topic) against a Kafka in the cluster at kafka:9092
// (testdata/kafka.yaml). 10,000 records produced to orders reach both
// output topics, every one of them, counted by value. This cluster has no
// KEDA and no prometheus-adapter: the Services run at min-scale, and the
// scaling the example sets up is not exercised here.
func TestKafkaExample(t *testing.T) {
	c := newCluster(t)
	const ns, records = "default", 10_000
	c.deleteAtEnd("deploy/kafka-keda/", "e2e/cluster/testdata/kafka.yaml")
	t.Logf("ko apply -f e2e/cluster/testdata/kafka.yaml:\n%s", c.run(15*time.Minute, "ko", "apply", "-f", "e2e/cluster/testdata/kafka.yaml"))
	c.run(200*time.Second, "kubectl", "-n", ns, "rollout", "status", "deploy/kafka", "--timeout=190s")
	t.Logf("ko apply -f deploy/kafka-keda/:\n%s", c.run(15*time.Minute, "ko", "apply", "-f", "deploy/kafka-keda/"))
	c.waitReady(ns, "kafka-keda", "kafka-hpa")
	c.runnerPod(ns, "kafka-keda")
	c.runnerPod(ns, "kafka-hpa")

	// The test's client reaches the broker as the pods do: "kafka" is the
	// Service's name, which the broker advertises.
	dial := c.nodeDialer(map[string]string{"kafka": c.clusterIP(ns, "kafka")})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	prod, err := kgo.NewClient(kgo.SeedBrokers("kafka:9092"), kgo.Dialer(dial), kgo.DefaultProduceTopic("orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	recs := make([]*kgo.Record, records)
	for i := range recs {
		recs[i] = &kgo.Record{Key: fmt.Appendf(nil, "k%d", i%100), Value: fmt.Appendf(nil, "order-%d", i)}
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("producing %d records to orders: %v", records, err)
	}
	start := time.Now()
	for _, topic := range []string{"orders-processed", "orders-processed-hpa"} {
		cons, err := kgo.NewClient(kgo.SeedBrokers("kafka:9092"), kgo.Dialer(dial), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		total := 0
		for len(seen) < records && ctx.Err() == nil {
			pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
			fs := cons.PollFetches(pctx)
			pcancel()
			fs.EachRecord(func(r *kgo.Record) {
				seen[string(r.Value)]++
				total++
			})
		}
		cons.Close()
		missing, foreign := 0, 0
		for i := 0; i < records; i++ {
			if seen[fmt.Sprintf("order-%d", i)] == 0 {
				missing++
			}
		}
		for v := range seen {
			if !strings.HasPrefix(v, "order-") {
				foreign++
			}
		}
		t.Logf("%s: %d of %d produced records after %v (%d records in all: %d written more than once, at-least-once); missing %d",
			topic, len(seen), records, time.Since(start).Round(100*time.Millisecond), total, total-len(seen), missing)
		if missing != 0 || foreign != 0 {
			t.Fatalf("%s: %d produced records missing, %d values not produced by the test", topic, missing, foreign)
		}
	}
	for _, ksvc := range []string{"kafka-keda", "kafka-hpa"} {
		m := metrics(t, c.portForward(ns, c.runnerPod(ns, ksvc), 2469))
		t.Logf("%s: read %d, written %d, acked %d, nacked %d, errors %d", ksvc, m.read, m.written, m.acked, m.nacked, m.errors)
		if m.acked > m.written {
			t.Fatalf("%s: acked %d > written %d", ksvc, m.acked, m.written)
		}
	}
}
