package kafka

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap/zaptest"

	"github.com/monovertex/monovertex/adapters/internal/adaptertest"
	"github.com/monovertex/monovertex/internal/kafkatest"
	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/conformance"
)

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
		Brokers: brokers, Topic: topic, Group: topic + "-group", StartOffset: "earliest", Isolation: "read_committed",
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
	if err := s.Connect(context.Background()); err != nil {
		t.Fatalf("connect: %v", err)
	}
	return s
}

// A constructor dials nothing: brokers that are down fail Connect, which
// the engine retries, and a topic that does not exist fails it with
// MV_KAFKA_TOPIC named.
func TestConnectNeedsTheBrokersAndTheTopic(t *testing.T) {
	down, err := New(context.Background(), testConfig("127.0.0.1:1", "t"), "test", nil)
	if err != nil {
		t.Fatalf("new with the brokers down: %v, want no error before Connect", err)
	}
	defer down.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := down.Connect(ctx); err == nil || errors.As(err, new(*runner.ConfigError)) {
		t.Fatalf("connect with the brokers down: %v, want an error that is retried", err)
	}

	c := kafkatest.Start(t, 1, nil)
	missing, err := New(context.Background(), testConfig(c.Brokers(), "no-such-topic"), "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer missing.Close(context.Background())
	var ce *runner.ConfigError
	if err := missing.Connect(context.Background()); !errors.As(err, &ce) || ce.Var != "MV_KAFKA_TOPIC" {
		t.Fatalf("connect to a missing topic: %v, want a settings error naming MV_KAFKA_TOPIC", err)
	}
}

func TestConformance(t *testing.T) {
	c := kafkatest.Start(t, 1, nil)
	admin := c.Client()
	// A topic and a group per subtest.
	ensure := adaptertest.OncePerTest(adaptertest.SafeName, func(t *testing.T, name string) { createTopic(t, admin, name, 3) })
	var mu sync.Mutex
	counts := map[string]int{}
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

// produceNumbers produces the values "0" to "n-1" to the topic, unkeyed.
func produceNumbers(t *testing.T, cl *kgo.Client, topic string, n int) {
	t.Helper()
	values := make([][]byte, n)
	for i := range values {
		values[i] = []byte(fmt.Sprint(i))
	}
	kafkatest.Produce(t, cl, topic, values, nil)
}

// producePerPartition produces n records "p<partition>-<i>" to each of the
// topic's first partitions; cl must use the manual partitioner.
func producePerPartition(t *testing.T, cl *kgo.Client, topic string, partitions int32, n int) {
	t.Helper()
	ctx := context.Background()
	for p := int32(0); p < partitions; p++ {
		for i := 0; i < n; i++ {
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: p, Value: []byte(fmt.Sprintf("p%d-%d", p, i))}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// readAll reads n records within a minute; read errors (a rebalance) are
// logged and the read repeated.
func readAll(t *testing.T, s *Source, n int) []*runner.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return adaptertest.ReadN(t, ctx, s, n, true)
}

// A slow message in partition 0 holds back that partition's commit, and
// only that partition's: the others commit everything acked.
func TestOutOfOrderAcksHoldBackOnlyTheirPartition(t *testing.T) {
	c := kafkatest.Start(t, 1, map[string]int{"ooo": 3})
	cl := c.Client(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx := context.Background()
	producePerPartition(t, cl, "ooo", 3, 10)
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
	produceNumbers(t, cl, "nack", 10)
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
	_ = s.Nack(ctx, []*runner.Message{got[2]}, runner.Nack{})
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

// owned returns the partitions s tracks now.
func owned(s *Source) []tp {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []tp
	for p := range s.parts {
		out = append(out, p)
	}
	return out
}

// A second member joins while the first holds one record of each
// partition in flight. The revoke of the partition that moves waits for
// that record: acked within MV_KAFKA_REVOKE_TIMEOUT, it is committed and
// the new owner starts after it; not acked in time, the commit stops
// before it and the new owner reads it (and everything after) again, and
// the old owner's late ack changes nothing.
func TestRevokeWaitsForInFlightWithinItsBound(t *testing.T) {
	for _, tc := range []struct {
		name           string
		revoke         time.Duration
		ackAfter       time.Duration // after the revoke began
		wantAgain      int           // records of the moved partition the new owner reads
		wantUnfinished int
	}{
		{"acked within the bound", 10 * time.Second, 500 * time.Millisecond, 0, 0},
		{"not acked within the bound", 500 * time.Millisecond, 2 * time.Second, 5, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := kafkatest.Start(t, 1, map[string]int{"rv": 2})
			cl := c.Client(kgo.RecordPartitioner(kgo.ManualPartitioner()))
			ctx := context.Background()
			producePerPartition(t, cl, "rv", 2, 10)
			cfg := testConfig(c.Brokers(), "rv")
			cfg.RevokeTimeout = tc.revoke
			a := newSource(t, cfg)
			got := readAll(t, a, 20)
			var held, rest []*runner.Message
			for _, m := range got {
				if strings.HasSuffix(m.ID, ":5") {
					held = append(held, m)
				} else {
					rest = append(rest, m)
				}
			}
			if len(held) != 2 {
				t.Fatalf("held %v", ids(held))
			}
			_ = a.Ack(ctx, rest)
			type release struct {
				waited     time.Duration
				unfinished int
			}
			releases := make(chan release, 8)
			var once sync.Once
			// The first revoke begins once this fires: ack after ackAfter.
			a.mu.Lock()
			parts := len(a.parts)
			a.mu.Unlock()
			if parts != 2 {
				t.Fatalf("a tracks %d partitions, want 2", parts)
			}
			a.mu.Lock()
			a.released = func(_ []tp, revoked bool, waited time.Duration, unfinished int) {
				if revoked {
					releases <- release{waited, unfinished}
				}
			}
			startAck := func() {
				once.Do(func() {
					go func() {
						time.Sleep(tc.ackAfter)
						_ = a.Ack(ctx, held)
					}()
				})
			}
			a.revoking = func([]tp) { startAck() }
			a.mu.Unlock()
			b := newSource(t, cfg)
			// b must poll to take part; the revoke runs in a's client meanwhile.
			var again []*runner.Message
			deadline := time.Now().Add(30 * time.Second)
			for len(owned(a)) != 1 || time.Since(deadline) < -25*time.Second {
				if time.Now().After(deadline) {
					t.Fatalf("no rebalance: a owns %v", owned(a))
				}
				msgs, _ := b.Read(ctx, 20, 200*time.Millisecond)
				again = append(again, msgs...)
			}
			var r release
			select {
			case r = <-releases:
			case <-time.After(30 * time.Second):
				t.Fatal("no revoke reported")
			}
			if r.unfinished != tc.wantUnfinished {
				t.Fatalf("revoke left %d records unfinished, want %d", r.unfinished, tc.wantUnfinished)
			}
			if tc.wantUnfinished == 0 && r.waited < tc.ackAfter/2 {
				t.Fatalf("revoke waited %v; the held record was acked %v after it began", r.waited, tc.ackAfter)
			}
			if tc.wantUnfinished > 0 && r.waited < tc.revoke {
				t.Fatalf("revoke gave up after %v, before its bound %v", r.waited, tc.revoke)
			}
			for time.Now().Before(deadline) && len(again) < tc.wantAgain {
				msgs, _ := b.Read(ctx, 20, 200*time.Millisecond)
				again = append(again, msgs...)
			}
			// Nothing more arrives.
			msgs, _ := b.Read(ctx, 20, time.Second)
			again = append(again, msgs...)
			moved := 1 - owned(a)[0].p
			for _, m := range again {
				if !strings.HasPrefix(m.ID, fmt.Sprintf("rv:%d:", moved)) {
					t.Fatalf("b read %s, not of the moved partition %d", m.ID, moved)
				}
			}
			if len(again) != tc.wantAgain {
				t.Fatalf("b read %v from the moved partition %d, want %d records", ids(again), moved, tc.wantAgain)
			}
			if tc.wantAgain > 0 && again[0].ID != fmt.Sprintf("rv:%d:5", moved) {
				t.Fatalf("b starts at %s, want the unfinished rv:%d:5", again[0].ID, moved)
			}
			_ = b.Ack(ctx, again)
			testutilWait(t, 20*time.Second, func() bool {
				cm := kafkatest.Committed(t, cl, cfg.Group, "rv")
				return cm[0] == 10 && cm[1] == 10
			})
			for _, s := range []*Source{a, b} {
				if _, violations, first := s.check.summary(); violations != 0 {
					t.Fatalf("commit check: %v", first)
				}
			}
		})
	}
}

// Past MV_KAFKA_MAX_HELD records held behind an unacked one, reading the
// partition pauses, and resumes once acks bring it below half of that.
func TestMaxHeldPausesThePartition(t *testing.T) {
	c := kafkatest.Start(t, 1, map[string]int{"held": 1})
	cl := c.Client()
	produceNumbers(t, cl, "held", 20)
	cfg := testConfig(c.Brokers(), "held")
	cfg.MaxHeld = 5
	s := newSource(t, cfg)
	ctx := context.Background()
	var got []*runner.Message
	for deadline := time.Now().Add(20 * time.Second); len(got) <= cfg.MaxHeld; {
		if time.Now().After(deadline) {
			t.Fatalf("read %d", len(got))
		}
		msgs, _ := s.Read(ctx, 3, 200*time.Millisecond)
		got = append(got, msgs...)
	}
	paused := len(got)
	for i := 0; i < 5; i++ {
		msgs, _ := s.Read(ctx, 3, 200*time.Millisecond)
		got = append(got, msgs...)
	}
	if len(got) != paused {
		t.Fatalf("read %d more records while %d were held (max %d)", len(got)-paused, paused, cfg.MaxHeld)
	}
	_ = s.Ack(ctx, got)
	for deadline := time.Now().Add(20 * time.Second); len(got) < 20; {
		if time.Now().After(deadline) {
			t.Fatalf("read %d of 20 after the acks", len(got))
		}
		msgs, _ := s.Read(ctx, 3, 200*time.Millisecond)
		_ = s.Ack(ctx, msgs)
		got = append(got, msgs...)
	}
}

// TestReadsSeveralTopicsAsNumaflowDoes: MV_KAFKA_TOPIC "mt-a, mt-b" reads
// both topics, as Numaflow's comma-separated topic does. Partition 0 of
// one topic is not partition 0 of the other: a nack and an unacked record
// in mt-a[0] hold back mt-a[0] only, and mt-b[0] commits to its end. Every
// record is read once with its topic header, and Pending counts both
// topics.
func TestReadsSeveralTopicsAsNumaflowDoes(t *testing.T) {
	c := kafkatest.Start(t, 1, map[string]int{"mt-a": 2, "mt-b": 3})
	cl := c.Client(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx := context.Background()
	producePerPartition(t, cl, "mt-a", 2, 10)
	producePerPartition(t, cl, "mt-b", 3, 10)
	cfg := testConfig(c.Brokers(), "mt-a, mt-b")
	if err := cfg.Validate(runner.RoleSource); err != nil {
		t.Fatal(err)
	}
	s := newSource(t, cfg)
	if p, err := s.Pending(ctx); err != nil || p != 50 {
		t.Fatalf("pending %d (%v) before reading, want 50 (20 in mt-a, 30 in mt-b)", p, err)
	}
	got := readAll(t, s, 50)
	seen := map[string]bool{}
	var held, nacked *runner.Message
	var acks []*runner.Message
	for _, m := range got {
		topic, rest, _ := strings.Cut(m.ID, ":")
		part, off, _ := strings.Cut(rest, ":")
		if seen[m.ID] || m.Headers[TopicHeader] != topic || string(m.Value) != "p"+part+"-"+off {
			t.Fatalf("message %s (header %q, value %q) twice or not of its topic and partition", m.ID, m.Headers[TopicHeader], m.Value)
		}
		seen[m.ID] = true
		switch m.ID {
		case "mt-a:0:2":
			nacked = m
		case "mt-a:0:6":
			held = m
		default:
			acks = append(acks, m)
		}
	}
	if len(seen) != 50 || held == nil || nacked == nil {
		t.Fatalf("read %d distinct records, want 50 with mt-a:0:2 and mt-a:0:6", len(seen))
	}
	if err := s.Ack(ctx, acks); err != nil {
		t.Fatal(err)
	}
	if err := s.Nack(ctx, []*runner.Message{nacked}, runner.Nack{}); err != nil {
		t.Fatal(err)
	}
	again := readAll(t, s, 1)
	if len(again) != 1 || again[0].ID != "mt-a:0:2" {
		t.Fatalf("after the nack of mt-a:0:2 read %v, want only it (mt-b:0:2 was acked)", ids(again))
	}
	if extra, _ := s.Read(ctx, 10, 500*time.Millisecond); len(extra) != 0 {
		t.Fatalf("read %v after the redelivery, want nothing", ids(extra))
	}
	if err := s.Ack(ctx, again); err != nil {
		t.Fatal(err)
	}
	wantA, wantB := map[int32]int64{0: 6, 1: 10}, map[int32]int64{0: 10, 1: 10, 2: 10}
	testutilWait(t, 20*time.Second, func() bool {
		return fmt.Sprint(kafkatest.Committed(t, cl, cfg.Group, "mt-a")) == fmt.Sprint(wantA) &&
			fmt.Sprint(kafkatest.Committed(t, cl, cfg.Group, "mt-b")) == fmt.Sprint(wantB)
	})
	if err := s.Ack(ctx, []*runner.Message{held}); err != nil {
		t.Fatal(err)
	}
	wantA[0] = 10
	testutilWait(t, 20*time.Second, func() bool {
		return fmt.Sprint(kafkatest.Committed(t, cl, cfg.Group, "mt-a")) == fmt.Sprint(wantA)
	})
	time.Sleep(lagValidFor)
	if p, err := s.Pending(ctx); err != nil || p != 0 {
		t.Fatalf("pending %d (%v) with everything committed, want 0", p, err)
	}
	if _, violations, first := s.check.summary(); violations != 0 {
		t.Fatalf("commit check: %v", first)
	}
}

// TestSkipsAbortedTransactionsAsNumaflowDoes: by default the source reads
// only committed records, as librdkafka (Numaflow's Kafka client) does:
// the records of an aborted transaction are never handed out, those of a
// committed one and plain records are, each once. With read_uncommitted
// the aborted ones are read too. Pending follows the isolation level: an
// open transaction's records are not pending for read_committed.
func TestSkipsAbortedTransactionsAsNumaflowDoes(t *testing.T) {
	c := kafkatest.Start(t, 1, map[string]int{"tx": 1})
	ctx := context.Background()
	plain := c.Client()
	txp := c.Client(kgo.TransactionalID("tx-producer"))
	produceTx := func(prefix string, n int, commit kgo.TransactionEndTry) {
		t.Helper()
		if err := txp.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			if err := txp.ProduceSync(ctx, &kgo.Record{Topic: "tx", Value: []byte(fmt.Sprintf("%s-%d", prefix, i))}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := txp.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
	}
	// An open transaction is not pending for a read_committed consumer: it
	// cannot read those records until the transaction ends.
	if err := txp.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		if err := txp.ProduceSync(ctx, &kgo.Record{Topic: "tx", Value: []byte(fmt.Sprintf("open-%d", i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	for isolation, want := range map[string]int64{"read_committed": 0, "read_uncommitted": 4} {
		cfg := testConfig(c.Brokers(), "tx")
		cfg.Group, cfg.Isolation = "pending-"+isolation, isolation
		s := newSource(t, cfg)
		if p, err := s.Pending(ctx); err != nil || p != want {
			t.Fatalf("%s: pending %d (%v) with only an open transaction of 4 records, want %d", isolation, p, err, want)
		}
		_ = s.Close(ctx)
	}
	if err := txp.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	produceTx("aborted", 5, kgo.TryAbort)
	if err := plain.ProduceSync(ctx, &kgo.Record{Topic: "tx", Value: []byte("plain-0")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	produceTx("committed", 5, kgo.TryCommit)
	produceTx("aborted-again", 3, kgo.TryAbort)
	if err := plain.ProduceSync(ctx, &kgo.Record{Topic: "tx", Value: []byte("plain-1")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	values := func(msgs []*runner.Message) map[string]int {
		out := map[string]int{}
		for _, m := range msgs {
			out[string(m.Value)]++
		}
		return out
	}
	for _, tc := range []struct {
		isolation string
		want      int
		aborted   int
	}{
		{"read_committed", 7, 0},
		{"read_uncommitted", 19, 12},
	} {
		t.Run(tc.isolation, func(t *testing.T) {
			cfg := testConfig(c.Brokers(), "tx")
			cfg.Group = "tx-" + tc.isolation
			cfg.Isolation = tc.isolation
			s := newSource(t, cfg)
			got := readAll(t, s, tc.want)
			if extra, _ := s.Read(ctx, 20, time.Second); len(extra) != 0 {
				got = append(got, extra...)
			}
			v := values(got)
			aborted := 0
			for k, n := range v {
				if n != 1 {
					t.Fatalf("%s read %d times", k, n)
				}
				if strings.HasPrefix(k, "aborted") || strings.HasPrefix(k, "open") {
					aborted++
				}
			}
			if len(got) != tc.want || aborted != tc.aborted || v["plain-0"] != 1 || v["plain-1"] != 1 || v["committed-4"] != 1 {
				t.Fatalf("read %d records (%d of aborted transactions): %v; want %d with %d aborted", len(got), aborted, v, tc.want, tc.aborted)
			}
			if err := s.Ack(ctx, got); err != nil {
				t.Fatal(err)
			}
		})
	}
}
