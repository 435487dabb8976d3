// Package kafka is a sink producing to a Kafka topic (MV_SINK=kafka, and
// as MV_FALLBACK_SINK or MV_ON_SUCCESS_SINK), with github.com/twmb/franz-go.
//
// The producer is idempotent and waits for all in-sync replicas (acks=all),
// so a message counts as written only once the brokers stored it, and the
// client's own retries of a batch are not stored twice. The message's keys,
// joined with ":" as Numaflow's Kafka sink joins them, become the record
// key, and a key's partition is chosen as librdkafka (Numaflow's client)
// chooses it, CRC32 of the key; the keys also travel in the headers
// __key_len and __key_<i>, as Numaflow writes them; the message headers
// become record headers and the event time the record timestamp.
package kafka

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/monovertex/monovertex/internal/kafkaconn"
	"github.com/monovertex/monovertex/runner"
)

// Config holds the Kafka sink's settings.
type Config struct {
	Brokers string `envconfig:"MV_KAFKA_BROKERS" desc:"comma-separated bootstrap brokers, e.g. kafka-0:9092,kafka-1:9092"`
	// Roles is what each role reads: MV_KAFKA_SINK_*, and the fallback's
	// and onSuccess sink's MV_FALLBACK_KAFKA_* and MV_ON_SUCCESS_KAFKA_*.
	runner.Roles[Target]
	Partitioner     string        `envconfig:"MV_KAFKA_PARTITIONER" default:"consistent_random" desc:"how a keyed record's partition is chosen: consistent_random (CRC32 of the key, as librdkafka and so Numaflow's Kafka sink choose it), murmur2_random (the Java client's), or random; records without a key are spread in every case"`
	MaxMessageBytes int           `envconfig:"MV_KAFKA_MAX_MESSAGE_BYTES" default:"1000012" desc:"largest record batch the producer builds (key, value, headers and overhead); larger messages fail permanently and MV_ON_FAILURE decides; keep it at or below the topic's max.message.bytes"`
	Timestamp       string        `envconfig:"MV_KAFKA_SINK_TIMESTAMP" default:"event" desc:"the record timestamp: event (the message's event time) or write (the time the producer writes it, as Numaflow's Kafka sink leaves it)"`
	IDHeader        string        `envconfig:"MV_KAFKA_SINK_ID_HEADER" default:"Mv-Msg-Id" desc:"record header carrying the message ID (the same on every redelivery), so consumers can drop duplicates; empty sends none"`
	ProduceTimeout  time.Duration `envconfig:"MV_KAFKA_PRODUCE_TIMEOUT" default:"30s" desc:"how long a write may wait for the brokers (a broker away, a full buffer) before its unsent records count as failed and the runner retries them; records already sent wait for their ack"`
	kafkaconn.Auth  `envconfig:"MV_KAFKA"`
}

// Target is what the Kafka sink reads for each role (see runner.RoleVar).
type Target struct {
	Brokers string `envconfig:"BROKERS" desc:"brokers of the sink when they differ from the source's; defaults to MV_KAFKA_BROKERS; the fallback's and onSuccess sink's default to the sink's"`
	Topic   string `envconfig:"TOPIC" desc:"topic the sink produces to (must exist)"`
	SetKey  *bool  `envconfig:"SET_KEY" default:"true" desc:"use the message keys (joined with ':') as the record key, so partitioning follows them (Numaflow's setKey); false spreads records over the partitions; the fallback's and onSuccess sink's default to the sink's"`
}

// RoleKind is the KIND in the names of Target's variables.
func (Target) RoleKind() string { return "KAFKA" }

// target returns the brokers, topic and the variables they come from for role.
func (c *Config) target(role runner.Role) (brokers, brokersVar, topic, topicVar string) {
	brokers, brokersVar = c.Inherit(role, func(t *Target) *string { return &t.Brokers })
	if brokers == "" {
		brokers, brokersVar = c.Brokers, "MV_KAFKA_BROKERS"
	}
	t := c.Of(role)
	return brokers, brokersVar, t.Topic, c.Var(&t.Topic)
}

// setKey reports whether role's sink keys its records: its own setting,
// else the sink's, else true (the default of settings built in code).
func (c *Config) setKey(role runner.Role) bool {
	for _, t := range []*Target{c.Of(role), &c.Sink} {
		if t.SetKey != nil {
			return *t.SetKey
		}
	}
	return true
}

// Validate checks the values that parse but cannot be used in role.
func (c *Config) Validate(role runner.Role) error {
	brokers, brokersVar, topic, topicVar := c.target(role)
	if strings.TrimSpace(brokers) == "" {
		return &runner.ConfigError{Var: brokersVar, Value: brokers, Reason: "is required for the kafka sink, e.g. kafka:9092"}
	}
	if _, err := kafkaconn.Brokers(brokersVar, brokers); err != nil {
		return err
	}
	switch {
	case !kafkaconn.ValidTopic(topic):
		return &runner.ConfigError{Var: topicVar, Value: topic, Reason: "must name a topic: 1 to 249 of a-z A-Z 0-9 . _ -"}
	case c.MaxMessageBytes < 1024 || c.MaxMessageBytes > 1<<30:
		return &runner.ConfigError{Var: "MV_KAFKA_MAX_MESSAGE_BYTES", Value: strconv.Itoa(c.MaxMessageBytes), Reason: "must be between 1024 and 1073741824"}
	case c.ProduceTimeout < time.Second:
		return &runner.ConfigError{Var: "MV_KAFKA_PRODUCE_TIMEOUT", Value: c.ProduceTimeout.String(), Reason: "must be at least 1s"}
	case c.Timestamp != "event" && c.Timestamp != "write":
		return &runner.ConfigError{Var: "MV_KAFKA_SINK_TIMESTAMP", Value: c.Timestamp, Reason: "must be event or write"}
	case partitioner(c.Partitioner) == nil:
		return &runner.ConfigError{Var: "MV_KAFKA_PARTITIONER", Value: c.Partitioner, Reason: "must be consistent_random, murmur2_random or random"}
	}
	return c.Auth.Validate()
}

// partitioner is the kgo partitioner librdkafka's partitioner setting
// names, nil for one the runner does not offer. Numaflow's Kafka sink uses
// librdkafka's default, consistent_random: a non-empty key goes to
// partition CRC32(key) mod partitions (librdkafka's rd_crc32 is the IEEE
// CRC-32), so a migrated pipeline keeps each key in the partition it had;
// records without a key or with an empty one go to a sticky partition.
// murmur2_random hashes an empty key too and spreads only records without
// one, as librdkafka's does (and kgo's default sticky key partitioner).
func partitioner(name string) kgo.Partitioner {
	switch name {
	case "consistent_random":
		return crcPartitioner{}
	case "murmur2_random":
		return kgo.StickyKeyPartitioner(nil) // kgo's default hasher is the Java client's murmur2
	case "random":
		return kgo.StickyPartitioner()
	}
	return nil
}

// crcPartitioner is librdkafka's consistent_random.
type crcPartitioner struct{}

func (crcPartitioner) ForTopic(t string) kgo.TopicPartitioner {
	return &crcTopicPartitioner{sticky: kgo.StickyPartitioner().ForTopic(t)}
}

type crcTopicPartitioner struct {
	sticky kgo.TopicPartitioner
}

// RequiresConsistency: only a keyed record must go to its key's partition;
// the others may move to a partition whose leader is up.
func (*crcTopicPartitioner) RequiresConsistency(r *kgo.Record) bool { return len(r.Key) > 0 }

func (p *crcTopicPartitioner) Partition(r *kgo.Record, n int) int {
	if len(r.Key) == 0 {
		return p.sticky.Partition(r, n)
	}
	return int(crc32.ChecksumIEEE(r.Key) % uint32(n))
}

// OnNewBatch moves the sticky partition on, as kgo's sticky partitioner
// does between batches.
func (p *crcTopicPartitioner) OnNewBatch() {
	if nb, ok := p.sticky.(kgo.TopicPartitionerOnNewBatch); ok {
		nb.OnNewBatch()
	}
}

func init() {
	runner.RegisterSink("kafka", func(ctx context.Context, env runner.Env, cfg *Config) (runner.Sink, error) {
		return New(ctx, *cfg, env.Role, fmt.Sprintf("monovertex-%s-%d-%s", env.Name, env.Replica, env.Role), env.Logger)
	})
}

// Sink produces messages to one topic.
type Sink struct {
	topic     string
	setKey    bool
	eventTime bool // the record timestamp is the event time, not the write's
	idHeader  string
	timeout   time.Duration
	cl        *kgo.Client
	closeOnce sync.Once
	// topicVar names the variable of the topic, for Connect's check;
	// connected is set once it passed.
	topicVar  string
	connected bool
}

var (
	_ runner.Sink      = (*Sink)(nil)
	_ runner.Connector = (*Sink)(nil)
	_ runner.Readier   = (*Sink)(nil)
)

// New checks the settings and builds the client for role, which dials no
// broker until Connect.
func New(ctx context.Context, cfg Config, role runner.Role, clientID string, log *zap.SugaredLogger) (*Sink, error) {
	if log == nil {
		log = zap.NewNop().Sugar()
	}
	list, brokersVar, topic, topicVar := cfg.target(role)
	brokers, err := kafkaconn.Brokers(brokersVar, list)
	if err != nil {
		return nil, err
	}
	opts, err := cfg.Auth.Opts(brokers)
	if err != nil {
		return nil, err
	}
	opts = append(opts,
		kgo.ClientID(clientID),
		kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()), // with idempotence, which is kgo's default
		kgo.ProducerBatchMaxBytes(int32(cfg.MaxMessageBytes)),
		kgo.ProducerLinger(0),
		kgo.RecordPartitioner(partitioner(cfg.Partitioner)),
		kgo.WithLogger(kafkaconn.Logger(log)),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka sink: client: %w", err)
	}
	return &Sink{topic: topic, setKey: cfg.setKey(role), eventTime: cfg.Timestamp != "write", idHeader: cfg.IDHeader, timeout: cfg.ProduceTimeout, cl: cl, topicVar: topicVar}, nil
}

// Connect asks the brokers for the topic, which must exist (a
// *runner.ConfigError naming its variable otherwise). A broker that does
// not answer fails the attempt, and the engine tries again.
func (s *Sink) Connect(ctx context.Context) error {
	if s.connected {
		return nil
	}
	if err := kafkaconn.CheckTopic(ctx, kadm.NewClient(s.cl), s.topic, s.topicVar); err != nil {
		return err
	}
	s.connected = true
	return nil
}

// Ready asks the brokers for the cluster's metadata: nil once one of them
// answered within ctx (the runner's probes give it 2s).
func (s *Sink) Ready(ctx context.Context) error {
	if err := s.cl.Ping(ctx); err != nil {
		return fmt.Errorf("kafka sink: no broker answers a metadata request: %w", err)
	}
	return nil
}

// Write produces every message and waits for each record's ack. A record
// the brokers refused or did not ack in time is reported failed, and the
// runner retries it; one that can never be stored (too large, invalid) is
// failed permanently, and MV_ON_FAILURE decides.
func (s *Sink) Write(ctx context.Context, msgs []*runner.Message) ([]runner.WriteResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(msgs) == 0 {
		return nil, nil
	}
	// Not kgo.RecordDeliveryTimeout: the client measures it from the
	// record's timestamp, which here is the event time and may be old.
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	results := make([]runner.WriteResult, len(msgs))
	// The records and their headers are made in slices of the whole
	// batch, and one promise serves them all, finding a record's message
	// by its place in recs: at 1 KiB, allocations per record were most of
	// the sink's CPU.
	recs := make([]kgo.Record, len(msgs))
	headers := 0
	for _, m := range msgs {
		headers += len(m.Headers) + 2 + len(m.Keys)
	}
	b := recordBuilder{s: s, headers: make([]kgo.RecordHeader, 0, headers)}
	for i, m := range msgs {
		b.fill(&recs[i], m)
	}
	base := uintptr(unsafe.Pointer(&recs[0]))
	// A record already sent to a broker that went away is retried by the
	// client until a broker acks it, past any context: the write stops
	// waiting at the deadline and reports it failed (the runner retries;
	// a late ack only makes a duplicate).
	var mu sync.Mutex
	acked, left, returned := make([]bool, len(msgs)), len(msgs), false
	all := make(chan struct{})
	promise := func(r *kgo.Record, err error) {
		i := int((uintptr(unsafe.Pointer(r)) - base) / unsafe.Sizeof(kgo.Record{}))
		mu.Lock()
		defer mu.Unlock()
		if returned {
			return
		}
		if err != nil {
			results[i] = failed(msgs[i], s.topic, err)
		}
		acked[i] = true
		if left--; left == 0 {
			close(all)
		}
	}
	for i := range recs {
		s.cl.Produce(ctx, &recs[i], promise)
	}
	select {
	case <-all:
	case <-ctx.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	returned = true
	for i, a := range acked {
		if !a {
			results[i] = runner.WriteResult{Status: runner.WriteFailed, Err: fmt.Errorf("kafka sink: produce %s to %s: no ack within %v (MV_KAFKA_PRODUCE_TIMEOUT): %w", msgs[i].ID, s.topic, s.timeout, ctx.Err())}
		}
	}
	return results, nil
}

// record makes m's record on its own (tests; Write makes a batch's at once).
func (s *Sink) record(m *runner.Message) *kgo.Record {
	rec := &kgo.Record{}
	b := recordBuilder{s: s}
	b.fill(rec, m)
	return rec
}

// recordBuilder fills the records of one write. Their headers come from
// one slice that grows by whole chunks, and header values and keys are the
// bytes of the message's strings, not copies: franz-go only reads them,
// and strings never change. A record's value is the message's own bytes:
// a write that ends at MV_KAFKA_PRODUCE_TIMEOUT leaves records already
// sent with franz-go, which retries them later with those bytes.
type recordBuilder struct {
	s       *Sink
	headers []kgo.RecordHeader
	names   []string
}

func (b *recordBuilder) fill(rec *kgo.Record, m *runner.Message) {
	s := b.s
	value := m.Value
	if value == nil {
		value = []byte{} // a null value is a tombstone on compacted topics
	}
	rec.Topic, rec.Value = s.topic, value
	if s.eventTime && !m.EventTime.IsZero() && m.EventTime.UnixMilli() > 0 {
		rec.Timestamp = m.EventTime
	}
	if s.setKey && len(m.Keys) > 0 {
		if len(m.Keys) == 1 {
			rec.Key = bytesOf(m.Keys[0])
		} else {
			rec.Key = []byte(strings.Join(m.Keys, ":"))
		}
	}
	names := b.names[:0]
	for k := range m.Headers {
		if (k != s.idHeader || s.idHeader == "") && !isKeyHeader(k, len(m.Keys)) {
			names = append(names, k)
		}
	}
	if len(names) > 1 {
		slices.Sort(names)
	}
	b.names = names
	need := len(names) + 2 + len(m.Keys)
	if cap(b.headers)-len(b.headers) < need {
		b.headers = make([]kgo.RecordHeader, 0, max(need, 2*cap(b.headers), 64))
	}
	start := len(b.headers)
	h := b.headers
	for _, k := range names {
		h = append(h, kgo.RecordHeader{Key: k, Value: bytesOf(m.Headers[k])})
	}
	// Numaflow's Kafka sink carries every key in headers, whatever setKey
	// says: __key_len and __key_0 .. __key_<len-1>, in place of message
	// headers of those names.
	h = append(h, kgo.RecordHeader{Key: KeyLenHeader, Value: smallInt(len(m.Keys))})
	for i, k := range m.Keys {
		h = append(h, kgo.RecordHeader{Key: keyHeader(i), Value: bytesOf(k)})
	}
	if s.idHeader != "" {
		h = append(h, kgo.RecordHeader{Key: s.idHeader, Value: bytesOf(m.ID)})
	}
	b.headers = h
	rec.Headers = h[start:len(h):len(h)]
}

// bytesOf is s's bytes without a copy, for franz-go to read; never nil, so
// an empty key stays a key (Numaflow's Some("")).
func bytesOf(s string) []byte {
	if s == "" {
		return []byte{}
	}
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// smallInts and keyHeaders are the __key_len values and __key_<i> names of
// the first keys, made once.
var (
	smallInts  [16][]byte
	keyHeaders [16]string
)

func init() {
	for i := range smallInts {
		smallInts[i] = []byte(strconv.Itoa(i))
		keyHeaders[i] = keyHeaderPrefix + strconv.Itoa(i)
	}
}

func smallInt(n int) []byte {
	if n < len(smallInts) {
		return smallInts[n]
	}
	return strconv.AppendInt(nil, int64(n), 10)
}

func keyHeader(i int) string {
	if i < len(keyHeaders) {
		return keyHeaders[i]
	}
	return keyHeaderPrefix + strconv.Itoa(i)
}

// KeyLenHeader and the __key_<i> headers carry a message's keys, as
// Numaflow's Kafka sink writes them.
const (
	KeyLenHeader    = "__key_len"
	keyHeaderPrefix = "__key_"
)

// isKeyHeader reports whether a message header of name k is replaced by
// one of the key headers of a message with n keys.
func isKeyHeader(k string, n int) bool {
	if k == KeyLenHeader {
		return true
	}
	rest, ok := strings.CutPrefix(k, keyHeaderPrefix)
	if !ok {
		return false // most headers: no Atoi, whose error allocates
	}
	i, err := strconv.Atoi(rest)
	return err == nil && i >= 0 && i < n && keyHeader(i) == k
}

// permanent are the produce errors retrying cannot fix.
var permanent = []error{kerr.MessageTooLarge, kerr.RecordListTooLarge, kerr.InvalidRecord, kerr.InvalidTopicException, kerr.CorruptMessage}

func failed(m *runner.Message, topic string, err error) runner.WriteResult {
	err = fmt.Errorf("kafka sink: produce %s to %s: %w", m.ID, topic, err)
	for _, p := range permanent {
		if errors.Is(err, p) {
			hint := ""
			if errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge) {
				hint = " (raise MV_KAFKA_MAX_MESSAGE_BYTES and the topic's max.message.bytes, or send smaller messages)"
			}
			return runner.WriteResult{Status: runner.WriteFailed, Err: runner.Permanent(fmt.Errorf("%w%s", err, hint))}
		}
	}
	return runner.WriteResult{Status: runner.WriteFailed, Err: err}
}

// Close waits (bounded by ctx) for records still unacked, then closes the
// client.
func (s *Sink) Close(ctx context.Context) error {
	var err error
	s.closeOnce.Do(func() {
		if ferr := s.cl.Flush(ctx); ferr != nil {
			err = fmt.Errorf("kafka sink: %d records unacknowledged at close: %w", s.cl.BufferedProduceRecords(), ferr)
		}
		s.cl.Close()
	})
	return err
}
