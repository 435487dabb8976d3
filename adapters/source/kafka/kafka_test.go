package kafka

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap/zaptest"

	"github.com/monovertex/monovertex/internal/kafkatest"
	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/conformance"
)

var nonName = regexp.MustCompile(`[^a-zA-Z0-9._-]+`)

// nameFor is a topic and group name per test.
func nameFor(t *testing.T) string {
	n := nonName.ReplaceAllString(t.Name(), "_")
	if len(n) > 200 {
		n = n[len(n)-200:]
	}
	return n
}

func createTopic(t *testing.T, cl *kgo.Client, topic string, partitions int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, 1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !strings.Contains(err.Error(), "TOPIC_ALREADY_EXISTS") {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

func testConfig(brokers, topic string) Config {
	return Config{
		Brokers: brokers, Topic: topic, Group: topic + "-group", StartOffset: "earliest",
		CommitInterval: 100 * time.Millisecond, RevokeTimeout: 5 * time.Second, SessionTimeout: 6 * time.Second,
		MaxHeld: 100000, CheckCommits: true,
	}
}

func newSource(t *testing.T, cfg Config) *Source {
	t.Helper()
	s, err := New(context.Background(), cfg, "test", zaptest.NewLogger(t).Sugar())
	if err != nil {
		t.Fatalf("new source: %v", err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func TestConformance(t *testing.T) {
	c := kafkatest.Start(t, 1, nil)
	admin := c.Client()
	var mu sync.Mutex
	created := map[string]bool{}
	counts := map[string]int{}
	ensure := func(t *testing.T) string {
		name := nameFor(t)
		mu.Lock()
		defer mu.Unlock()
		if !created[name] {
			createTopic(t, admin, name, 3)
			created[name] = true
		}
		return name
	}
	producer := c.Client(kgo.RecordRetries(100))
	conformance.RunSource(t, conformance.SourceCase{
		New: func(t *testing.T) runner.Source { return newSource(t, testConfig(c.Brokers(), ensure(t))) },
		Produce: func(t *testing.T, n int) [][]byte {
			name := ensure(t)
			mu.Lock()
			start := counts[name]
			counts[name] += n
			mu.Unlock()
			values := make([][]byte, n)
			for i := range values {
				values[i] = []byte(fmt.Sprintf("v%d", start+i))
			}
			kafkatest.Produce(t, producer, name, values, func(i int) []byte { return []byte(fmt.Sprintf("k%d", i)) })
			return values
		},
		Peer: conformance.Peer{Stop: func(*testing.T) { c.Stop() }, Start: func(*testing.T) { c.Restart() }},
		Features: conformance.SourceFeatures{
			Lifecycle: conformance.Lifecycle{CloseTwice: true, ConcurrentClose: true, ContinuesAfterErrors: true, BadInput: true, Reconnects: true},
			Nack:      true, RedeliverAfterClose: true, Pending: true, KeepsValues: true,
			RedeliveryWait: 30 * time.Second,
		},
	})
}

func readAll(t *testing.T, s *Source, n int) []*runner.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var got []*runner.Message
	for len(got) < n {
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d", len(got), n)
		}
		msgs, err := s.Read(ctx, n-len(got), 200*time.Millisecond)
		if err != nil {
			t.Logf("read: %v", err)
		}
		got = append(got, msgs...)
	}
	return got
}

// A slow message in partition 0 holds back that partition's commit, and
// only that partition's: the others commit everything acked.
func TestOutOfOrderAcksHoldBackOnlyTheirPartition(t *testing.T) {
	c := kafkatest.Start(t, 1, map[string]int{"ooo": 3})
	cl := c.Client(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx := context.Background()
	for p := int32(0); p < 3; p++ {
		for i := 0; i < 10; i++ {
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "ooo", Partition: p, Value: []byte(fmt.Sprintf("p%d-%d", p, i))}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	s := newSource(t, testConfig(c.Brokers(), "ooo"))
	got := readAll(t, s, 30)
	var slow *runner.Message
	var rest []*runner.Message
	for _, m := range got {
		if m.ID == "ooo:0:3" {
			slow = m
			continue
		}
		rest = append(rest, m)
	}
	if slow == nil {
		t.Fatalf("no message ooo:0:3 among %d", len(got))
	}
	// Ack in reverse order, so every partition sees acks out of order too.
	for i := len(rest) - 1; i >= 0; i-- {
		if err := s.Ack(ctx, rest[i:i+1]); err != nil {
			t.Fatal(err)
		}
	}
	want := map[int32]int64{0: 3, 1: 10, 2: 10}
	var committed map[int32]int64
	deadline := time.Now().Add(20 * time.Second)
	for {
		committed = kafkatest.Committed(t, cl, "ooo-group", "ooo")
		if fmt.Sprint(committed) == fmt.Sprint(want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if fmt.Sprint(committed) != fmt.Sprint(want) {
		t.Fatalf("committed %v with 0:3 unacked, want %v", committed, want)
	}
	// Still held a while later: nothing passes the unacked record.
	time.Sleep(500 * time.Millisecond)
	if got := kafkatest.Committed(t, cl, "ooo-group", "ooo"); got[0] != 3 {
		t.Fatalf("partition 0 committed %d past the unacked offset 3", got[0])
	}
	if p, err := s.Pending(ctx); err != nil || p < 7 {
		t.Fatalf("pending %d (%v), want at least the 7 records of partition 0 from offset 3", p, err)
	}
	if err := s.Ack(ctx, []*runner.Message{slow}); err != nil {
		t.Fatal(err)
	}
	want[0] = 10
	testutilWait(t, 20*time.Second, func() bool {
		return fmt.Sprint(kafkatest.Committed(t, cl, "ooo-group", "ooo")) == fmt.Sprint(want)
	})
	commits, violations, _ := s.check.summary()
	if commits == 0 || violations != 0 {
		t.Fatalf("commit check: %d commits, %d violations", commits, violations)
	}
}

// A nacked record is read again by seeking back; the records after it
// that were acked or are in flight are not handed out again.
func TestNackSeeksBackWithoutRepeatingAckedRecords(t *testing.T) {
	c := kafkatest.Start(t, 1, map[string]int{"nack": 1})
	cl := c.Client()
	values := make([][]byte, 10)
	for i := range values {
		values[i] = []byte(fmt.Sprint(i))
	}
	kafkatest.Produce(t, cl, "nack", values, nil)
	s := newSource(t, testConfig(c.Brokers(), "nack"))
	ctx := context.Background()
	got := readAll(t, s, 10)
	// 2 is nacked, 5 stays in flight, the rest is acked.
	var acks []*runner.Message
	for _, m := range got {
		if m.ID != "nack:0:2" && m.ID != "nack:0:5" {
			acks = append(acks, m)
		}
	}
	_ = s.Ack(ctx, acks)
	_ = s.Nack(ctx, []*runner.Message{got[2]}, 0)
	again := readAll(t, s, 1)
	if len(again) != 1 || again[0].ID != "nack:0:2" || string(again[0].Value) != "2" {
		t.Fatalf("after the nack read %v, want only nack:0:2", ids(again))
	}
	extra, _ := s.Read(ctx, 10, 500*time.Millisecond)
	if len(extra) != 0 {
		t.Fatalf("read %v after the redelivery, want nothing (5 is still in flight)", ids(extra))
	}
	_ = s.Ack(ctx, []*runner.Message{again[0]})
	testutilWait(t, 10*time.Second, func() bool { return kafkatest.Committed(t, cl, "nack-group", "nack")[0] == 5 })
	_ = s.Ack(ctx, []*runner.Message{got[5]})
	testutilWait(t, 10*time.Second, func() bool { return kafkatest.Committed(t, cl, "nack-group", "nack")[0] == 10 })
}

func ids(msgs []*runner.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

func testutilWait(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
