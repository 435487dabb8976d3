package kafka

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap/zaptest"

	"github.com/monovertex/monovertex/adapters/internal/adaptertest"
	"github.com/monovertex/monovertex/internal/kafkatest"
	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/conformance"
)

func testConfig(brokers, topic string) Config {
	return Config{Brokers: brokers, Roles: runner.Roles[Target]{Sink: Target{Topic: topic}, Fallback: Target{Topic: topic + "-fb"}}, IDHeader: "Mv-Msg-Id", Partitioner: "consistent_random", Timestamp: "event",
		MaxMessageBytes: 2 << 20, ProduceTimeout: 3 * time.Second}
}

func newSink(t *testing.T, cfg Config, role runner.Role) *Sink {
	t.Helper()
	s, err := New(context.Background(), cfg, role, "test", zaptest.NewLogger(t).Sugar())
	if err != nil {
		t.Fatalf("new sink: %v", err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	if err := s.Connect(context.Background()); err != nil {
		t.Fatalf("connect: %v", err)
	}
	return s
}

// A constructor dials nothing: a broker that is down fails Connect (and
// Ready), which the engine retries, and a topic that does not exist
// fails it with the variable named.
func TestConnectNeedsTheBrokersAndTheTopic(t *testing.T) {
	down, err := New(context.Background(), testConfig("127.0.0.1:1", "t"), runner.RoleSink, "test", nil)
	if err != nil {
		t.Fatalf("new with the brokers down: %v, want no error before Connect", err)
	}
	defer down.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := down.Connect(ctx); err == nil || errors.As(err, new(*runner.ConfigError)) {
		t.Fatalf("connect with the brokers down: %v, want an error that is retried", err)
	}
	if err := down.Ready(ctx); err == nil {
		t.Fatal("ready with the brokers down")
	}

	c := kafkatest.Start(t, 1, nil)
	missing := newUnconnected(t, testConfig(c.Brokers(), "no-such-topic"), runner.RoleFallbackSink)
	var ce *runner.ConfigError
	if err := missing.Connect(context.Background()); !errors.As(err, &ce) || ce.Var != "MV_FALLBACK_KAFKA_TOPIC" {
		t.Fatalf("connect to a missing topic: %v, want a settings error naming MV_FALLBACK_KAFKA_TOPIC", err)
	}
	if err := missing.Ready(context.Background()); err != nil {
		t.Fatalf("ready with the brokers up: %v", err)
	}
}

func newUnconnected(t *testing.T, cfg Config, role runner.Role) *Sink {
	t.Helper()
	s, err := New(context.Background(), cfg, role, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// received maps the topic's records back to messages, with the ID from
// Mv-Msg-Id and the keys from Numaflow's __key_len and __key_<i> headers
// (checked against the record key, their join).
func received(t *testing.T, c *kafkatest.Cluster, topic string) []*runner.Message {
	var out []*runner.Message
	for _, r := range kafkatest.ReadAll(t, c, topic) {
		m := &runner.Message{Value: r.Value, EventTime: r.Timestamp, Headers: map[string]string{}}
		for _, h := range r.Headers {
			if h.Key == "Mv-Msg-Id" {
				m.ID = string(h.Value)
				continue
			}
			m.Headers[h.Key] = string(h.Value)
		}
		n, err := strconv.Atoi(m.Headers[KeyLenHeader])
		if err != nil {
			t.Fatalf("record %s: %s header %q", m.ID, KeyLenHeader, m.Headers[KeyLenHeader])
		}
		delete(m.Headers, KeyLenHeader)
		for i := 0; i < n; i++ {
			k, ok := m.Headers[fmt.Sprintf("__key_%d", i)]
			if !ok {
				t.Fatalf("record %s: %d keys but no __key_%d header", m.ID, n, i)
			}
			m.Keys = append(m.Keys, k)
			delete(m.Headers, fmt.Sprintf("__key_%d", i))
		}
		if want := strings.Join(m.Keys, ":"); n > 0 && string(r.Key) != want {
			t.Fatalf("record %s: key %q, want the keys joined, %q", m.ID, r.Key, want)
		}
		out = append(out, m)
	}
	return out
}

func TestConformance(t *testing.T) {
	c := kafkatest.Start(t, 1, nil)
	admin := kadm.NewClient(c.Client())
	ensure := adaptertest.OncePerTest(adaptertest.SafeName, func(t *testing.T, name string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.CreateTopic(ctx, 3, 1, nil, name); err != nil && !strings.Contains(err.Error(), "ALREADY") {
			t.Fatalf("create topic: %v", err)
		}
	})
	conformance.RunSink(t, conformance.SinkCase{
		New:      func(t *testing.T) runner.Sink { return newSink(t, testConfig(c.Brokers(), ensure(t)), runner.RoleSink) },
		Received: func(t *testing.T) []*runner.Message { return received(t, c, ensure(t)) },
		Peer:     conformance.Peer{Stop: func(*testing.T) { c.Stop() }, Start: func(*testing.T) { c.Restart() }},
		Features: conformance.SinkFeatures{
			Lifecycle: conformance.Lifecycle{CloseTwice: true, ConcurrentClose: true, ContinuesAfterErrors: true, BadInput: true, Reconnects: true},
			KeepsKeys: true, KeepsEventTime: true, KeepsHeaders: true,
		},
	})
}

func ptr(s string) *string { return &s }

// A message larger than MV_KAFKA_MAX_MESSAGE_BYTES fails permanently (no
// retry can fix it) while the others of its batch are written.
func TestTooLargeIsPermanentAndAlone(t *testing.T) {
	c := kafkatest.Start(t, 1, map[string]int{"big": 1})
	cfg := testConfig(c.Brokers(), "big")
	cfg.MaxMessageBytes = 4096
	s := newSink(t, cfg, runner.RoleSink)
	msgs := []*runner.Message{
		{ID: "a", Value: []byte("small")},
		{ID: "b", Value: make([]byte, 8192)},
		{ID: "c", Value: []byte("small too")},
	}
	res, err := s.Write(context.Background(), msgs)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Status != runner.WriteOK || res[2].Status != runner.WriteOK {
		t.Fatalf("small messages: %v, %v", res[0], res[2])
	}
	if res[1].Status != runner.WriteFailed || !runner.IsPermanent(res[1].Err) || !errors.Is(res[1].Err, kerr.MessageTooLarge) {
		t.Fatalf("8 KiB message with a 4 KiB limit: %v (%v), want a permanent MESSAGE_TOO_LARGE failure", res[1].Status, res[1].Err)
	}
	if got := received(t, c, "big"); len(got) != 2 {
		t.Fatalf("%d records in the topic, want the 2 small ones", len(got))
	}
}

// The fallback role writes to MV_FALLBACK_KAFKA_TOPIC, with keys as the
// record key so that equal keys land in one partition.
func TestFallbackRoleAndKeyPartitioning(t *testing.T) {
	c := kafkatest.Start(t, 1, map[string]int{"t": 1, "t-fb": 4})
	s := newSink(t, testConfig(c.Brokers(), "t"), runner.RoleFallbackSink)
	var msgs []*runner.Message
	for i := 0; i < 40; i++ {
		msgs = append(msgs, &runner.Message{ID: fmt.Sprint(i), Value: []byte(fmt.Sprint(i)), Keys: []string{fmt.Sprintf("k%d", i%4)}})
	}
	res, err := s.Write(context.Background(), msgs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Status != runner.WriteOK {
			t.Fatalf("message %d: %v", i, r)
		}
	}
	recs := kafkatest.ReadAll(t, c, "t-fb")
	if len(recs) != 40 {
		t.Fatalf("%d records in the fallback topic, want 40", len(recs))
	}
	part := map[string]int32{}
	for _, r := range recs {
		if p, ok := part[string(r.Key)]; ok && p != r.Partition {
			t.Fatalf("key %s in partitions %d and %d", r.Key, p, r.Partition)
		}
		part[string(r.Key)] = r.Partition
	}
	if n := len(kafkatest.ReadAll(t, c, "t")); n != 0 {
		t.Fatalf("%d records in the primary topic, want 0", n)
	}
}

// TestEachSinkKeysAsItsSetKeySays: MV_FALLBACK_KAFKA_SET_KEY=false (Numaflow's
// setKey left out of the fallback) sends no record key from the fallback
// while the sink keys its records; unset, the fallback follows the sink.
func TestEachSinkKeysAsItsSetKeySays(t *testing.T) {
	c := kafkatest.Start(t, 1, map[string]int{"k": 1, "k-fb": 1})
	msgs := func(prefix string) []*runner.Message {
		var out []*runner.Message
		for i := 0; i < 10; i++ {
			out = append(out, &runner.Message{ID: prefix + fmt.Sprint(i), Value: []byte(prefix + fmt.Sprint(i)), Keys: []string{"a", fmt.Sprint(i)}})
		}
		return out
	}
	cfg := testConfig(c.Brokers(), "k")
	unkeyed := false
	cfg.Fallback.SetKey = &unkeyed
	for role, prefix := range map[runner.Role]string{runner.RoleSink: "s", runner.RoleFallbackSink: "f"} {
		if err := cfg.Validate(role); err != nil {
			t.Fatal(err)
		}
		res, err := newSink(t, cfg, role).Write(context.Background(), msgs(prefix))
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			if r.Status != runner.WriteOK {
				t.Fatalf("%s message %d: %v", role, i, r)
			}
		}
	}
	for topic, keyed := range map[string]bool{"k": true, "k-fb": false} {
		recs := kafkatest.ReadAll(t, c, topic)
		if len(recs) != 10 {
			t.Fatalf("%d records in %s, want 10", len(recs), topic)
		}
		for _, r := range recs {
			want := ""
			if keyed {
				want = "a:" + strings.TrimLeft(string(r.Value), "sf")
			}
			if string(r.Key) != want || (r.Key == nil) == keyed {
				t.Fatalf("%s: record %s has key %q (nil %v), want %q", topic, r.Value, r.Key, r.Key == nil, want)
			}
		}
	}
}

func TestValidate(t *testing.T) {
	ok := testConfig("k:9092", "t")
	cases := []struct {
		name   string
		mutate func(*Config)
		role   runner.Role
		want   string
	}{
		{"no brokers", func(c *Config) { c.Brokers = "" }, runner.RoleSink, "MV_KAFKA_BROKERS"},
		{"sink brokers win", func(c *Config) { c.Sink.Brokers = "nope" }, runner.RoleSink, "MV_KAFKA_SINK_BROKERS"},
		{"bad topic", func(c *Config) { c.Sink.Topic = "a b" }, runner.RoleSink, "MV_KAFKA_SINK_TOPIC"},
		{"no fallback topic", func(c *Config) { c.Fallback.Topic = "" }, runner.RoleFallbackSink, "MV_FALLBACK_KAFKA_TOPIC"},
		{"no onSuccess topic", func(c *Config) {}, runner.RoleOnSuccessSink, "MV_ON_SUCCESS_KAFKA_TOPIC"},
		{"tiny limit", func(c *Config) { c.MaxMessageBytes = 10 }, runner.RoleSink, "MV_KAFKA_MAX_MESSAGE_BYTES"},
		{"sasl", func(c *Config) { c.SASLMechanism = "GSSAPI" }, runner.RoleSink, "MV_KAFKA_SASL_MECHANISM"},
		{"sasl user", func(c *Config) { c.SASLMechanism = "PLAIN" }, runner.RoleSink, "MV_KAFKA_SASL_USER"},
		{"half a key pair", func(c *Config) { c.TLSCertFile = "/x" }, runner.RoleSink, "MV_KAFKA_TLS_KEY_FILE"},
		{"missing CA", func(c *Config) { c.TLSCAFile = "/nonexistent/ca.pem" }, runner.RoleSink, "MV_KAFKA_TLS_CA_FILE"},
		{"onSuccess topic given", func(c *Config) { c.OnSuccess.Topic = "ok" }, runner.RoleOnSuccessSink, ""},
		{"onSuccess brokers", func(c *Config) { c.OnSuccess.Topic, c.OnSuccess.Brokers = "ok", "nope" }, runner.RoleOnSuccessSink, "MV_ON_SUCCESS_KAFKA_BROKERS"},
		{"fallback inherits the sink's brokers", func(c *Config) { c.Sink.Brokers = "nope" }, runner.RoleFallbackSink, "MV_KAFKA_SINK_BROKERS"},
	}
	for _, tc := range cases {
		adaptertest.ValidateRow(t, tc.name, ok, tc.role, tc.mutate, tc.want)
	}
	adaptertest.WantConfigError(t, ok.Validate(runner.RoleSink), "")
}

// TestPartitionsAsNumaflowsClient: with the default consistent_random a
// keyed record lands in partition CRC32(key) mod partitions, where
// librdkafka, Numaflow's Kafka client, puts it (the hash itself is pinned
// by TestEmptyAndMissingKeysAsLibrdkafka); murmur2_random puts it where
// the Java client would (franz-go's own hasher).
func TestPartitionsAsNumaflowsClient(t *testing.T) {
	const parts = 8
	c := kafkatest.Start(t, 1, map[string]int{"crc": parts, "mm": parts})
	java := kgo.StickyKeyPartitioner(nil).ForTopic("mm")
	for topic, name := range map[string]string{"crc": "consistent_random", "mm": "murmur2_random"} {
		cfg := testConfig(c.Brokers(), topic)
		cfg.Partitioner = name
		if err := cfg.Validate(runner.RoleSink); err != nil {
			t.Fatal(err)
		}
		var msgs []*runner.Message
		for i := 0; i < 200; i++ {
			msgs = append(msgs, &runner.Message{ID: fmt.Sprint(i), Value: []byte(fmt.Sprint(i)), Keys: []string{"user", fmt.Sprint(i * 7919)}})
		}
		res, err := newSink(t, cfg, runner.RoleSink).Write(context.Background(), msgs)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			if r.Status != runner.WriteOK {
				t.Fatalf("message %d: %v", i, r)
			}
		}
		recs := kafkatest.ReadAll(t, c, topic)
		used := map[int32]bool{}
		for _, r := range recs {
			want := int32(crc32.ChecksumIEEE(r.Key) % parts)
			if name == "murmur2_random" {
				want = int32(java.Partition(&kgo.Record{Key: r.Key}, parts))
			}
			if r.Partition != want {
				t.Fatalf("%s: key %q in partition %d, want %d", name, r.Key, r.Partition, want)
			}
			used[r.Partition] = true
		}
		if len(recs) != 200 || len(used) < parts/2 {
			t.Fatalf("%s: %d records over %d partitions, want 200 spread over most of %d", name, len(recs), len(used), parts)
		}
	}
	bad := testConfig(c.Brokers(), "crc")
	bad.Partitioner = "fnv1a"
	adaptertest.WantConfigError(t, bad.Validate(runner.RoleSink), "MV_KAFKA_PARTITIONER")
}

// TestEmptyAndMissingKeysAsLibrdkafka: under consistent_random a record
// without a key or with an empty one goes to a sticky partition, any of
// them; under murmur2_random an empty key is hashed like any other (one
// partition, kgo's and librdkafka's), and only a missing one is spread.
// The standard CRC-32 check value pins the hash: CRC32("123456789") is
// 0xCBF43926, so that key is partition 6 of 8 (0xCBF43926 mod 8).
func TestEmptyAndMissingKeysAsLibrdkafka(t *testing.T) {
	if crc32.ChecksumIEEE([]byte("123456789")) != 0xCBF43926 {
		t.Fatal("not the IEEE CRC-32 librdkafka's rd_crc32 computes")
	}
	crc := partitioner("consistent_random").ForTopic("t")
	if p := crc.Partition(&kgo.Record{Key: []byte("123456789")}, 8); p != 6 || !crc.RequiresConsistency(&kgo.Record{Key: []byte("k")}) {
		t.Fatalf("key 123456789 over 8 partitions: %d, want 6 (and consistency for keys)", p)
	}
	for _, key := range [][]byte{nil, {}} {
		if crc.RequiresConsistency(&kgo.Record{Key: key}) {
			t.Fatalf("consistent_random requires consistency for key %q (nil %v): it may go anywhere", key, key == nil)
		}
		seen := map[int]bool{}
		for i := 0; i < 200; i++ {
			seen[crc.Partition(&kgo.Record{Key: key}, 8)] = true
			crc.(kgo.TopicPartitionerOnNewBatch).OnNewBatch()
		}
		if len(seen) < 2 {
			t.Fatalf("consistent_random put every record with key %q (nil %v) in %v across 200 batches, want them spread", key, key == nil, seen)
		}
	}
	mm := partitioner("murmur2_random").ForTopic("t")
	first := mm.Partition(&kgo.Record{Key: []byte{}}, 8)
	for i := 0; i < 50; i++ {
		if p := mm.Partition(&kgo.Record{Key: []byte{}}, 8); p != first || !mm.RequiresConsistency(&kgo.Record{Key: []byte{}}) {
			t.Fatalf("murmur2_random put an empty key in %d and %d: librdkafka hashes it to one partition", first, p)
		}
	}
	s := &Sink{setKey: true}
	if rec := s.record(&runner.Message{Keys: []string{""}}); rec.Key == nil || len(rec.Key) != 0 {
		t.Fatalf("keys [\"\"]: record key %q (nil %v), want empty and present, as Numaflow's Some(\"\")", rec.Key, rec.Key == nil)
	}
}

// TestKeysTravelInNumaflowsHeaders: __key_len and __key_<i> carry the keys
// whatever setKey says, in place of message headers of the same names; a
// message header past the keys is kept.
func TestKeysTravelInNumaflowsHeaders(t *testing.T) {
	s := &Sink{topic: "t", setKey: false, idHeader: "Mv-Msg-Id"}
	rec := s.record(&runner.Message{ID: "m1", Value: []byte("v"), Keys: []string{"a", "b"},
		Headers: map[string]string{"__key_0": "x", "__key_len": "9", "__key_7": "y", "h": "1"}})
	got := map[string]string{}
	for _, h := range rec.Headers {
		if _, dup := got[h.Key]; dup {
			t.Fatalf("header %s twice in %v", h.Key, rec.Headers)
		}
		got[h.Key] = string(h.Value)
	}
	want := map[string]string{"__key_len": "2", "__key_0": "a", "__key_1": "b", "__key_7": "y", "h": "1", "Mv-Msg-Id": "m1"}
	if fmt.Sprint(got) != fmt.Sprint(want) || rec.Key != nil {
		t.Fatalf("headers %v key %q, want %v and no key (setKey false)", got, rec.Key, want)
	}
	if rec := s.record(&runner.Message{ID: "m2"}); len(rec.Headers) != 2 || string(rec.Headers[0].Value) != "0" {
		t.Fatalf("a message without keys: headers %v, want __key_len 0 and the ID", rec.Headers)
	}
}

// TestRecordTimestampAsConfigured: event stamps a record with the message's
// event time; write leaves it to the producer, the time of the write, as
// Numaflow's Kafka sink does (mvctl's choice).
func TestRecordTimestampAsConfigured(t *testing.T) {
	c := kafkatest.Start(t, 1, map[string]int{"ts-event": 1, "ts-write": 1})
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	for topic, mode := range map[string]string{"ts-event": "event", "ts-write": "write"} {
		cfg := testConfig(c.Brokers(), topic)
		cfg.Timestamp = mode
		if err := cfg.Validate(runner.RoleSink); err != nil {
			t.Fatal(err)
		}
		before := time.Now().Add(-time.Second)
		res, err := newSink(t, cfg, runner.RoleSink).Write(context.Background(), []*runner.Message{{ID: "m", Value: []byte("v"), EventTime: old}})
		if err != nil || res[0].Status != runner.WriteOK {
			t.Fatalf("%s: %v %v", mode, res, err)
		}
		recs := kafkatest.ReadAll(t, c, topic)
		if len(recs) != 1 {
			t.Fatalf("%s: %d records", mode, len(recs))
		}
		ts := recs[0].Timestamp
		if mode == "event" && !ts.Equal(old) || mode == "write" && (ts.Before(before) || ts.After(time.Now().Add(time.Second))) {
			t.Fatalf("%s: record timestamp %v (event time %v)", mode, ts, old)
		}
	}
	bad := testConfig(c.Brokers(), "ts-event")
	bad.Timestamp = "now"
	adaptertest.WantConfigError(t, bad.Validate(runner.RoleSink), "MV_KAFKA_SINK_TIMESTAMP")
}
