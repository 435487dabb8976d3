// Package kafka is a source reading Kafka topics as a member of a consumer
// group (MV_SOURCE=kafka), with github.com/twmb/franz-go.
//
// Offsets are committed only for what is final: per partition, the end of
// the longest prefix of acked records, so an ack that arrives out of order
// waits until the records before it are acked too (Knative's Kafka
// dispatcher commits the same way). When a rebalance takes a partition away,
// reading it stops, its records in flight get MV_KAFKA_REVOKE_TIMEOUT to
// finish, what is final is committed and the rest is left to the new owner.
// A nacked record is read again by seeking the partition back to it;
// records after it that are in flight or acked are not handed out twice.
//
// Each message's ID is "<topic>:<partition>:<offset>", the same on every
// redelivery (under MV_MESSAGE_IDS=numaflow, numaflow-core's offset string
// "<topic>:<partition>:<offset>-<global partition>", see partitionBases);
// the record key becomes the one key, the record headers the
// headers (plus X-NF-Kafka-TopicName, as Numaflow's Kafka source adds),
// and the record timestamp the event time.
package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"github.com/monovertex/monovertex/internal/kafkaconn"
	"github.com/monovertex/monovertex/runner"
)

// TopicHeader is the header Numaflow's Kafka source adds with the topic name.
const TopicHeader = "X-NF-Kafka-TopicName"

// Config holds the Kafka source's settings.
type Config struct {
	Brokers        string        `envconfig:"MV_KAFKA_BROKERS" desc:"comma-separated bootstrap brokers, e.g. kafka-0:9092,kafka-1:9092"`
	Topic          string        `envconfig:"MV_KAFKA_TOPIC" desc:"topic to read (must exist), or comma-separated topics, as Numaflow's topic"`
	Group          string        `envconfig:"MV_KAFKA_GROUP" desc:"consumer group shared by all replicas; offsets are committed for it"`
	StartOffset    string        `envconfig:"MV_KAFKA_START_OFFSET" default:"earliest" desc:"where a group without a committed offset starts: earliest or latest (Numaflow's default is earliest)"`
	Isolation      string        `envconfig:"MV_KAFKA_ISOLATION_LEVEL" default:"read_committed" desc:"read_committed skips records of aborted transactions and waits for open ones to end, as Numaflow's Kafka source (librdkafka's default) does; read_uncommitted reads every record"`
	CommitInterval time.Duration `envconfig:"MV_KAFKA_COMMIT_INTERVAL" default:"1s" desc:"how often the final offsets are committed"`
	RevokeTimeout  time.Duration `envconfig:"MV_KAFKA_REVOKE_TIMEOUT" default:"10s" desc:"how long a rebalance waits for the in-flight records of a partition taken away before committing what is final; keep it below the rebalance timeout (60s)"`
	SessionTimeout time.Duration `envconfig:"MV_KAFKA_SESSION_TIMEOUT" default:"45s" desc:"group session timeout: a replica that stops heartbeating loses its partitions after it"`
	NackDelay      time.Duration `envconfig:"MV_KAFKA_NACK_DELAY" default:"0s" desc:"delay before a nacked record is read again when the nack asks for none"`
	MaxHeld        int           `envconfig:"MV_KAFKA_MAX_HELD" default:"100000" desc:"most records of one partition tracked while an unacked record holds its commit back; reading that partition pauses beyond it"`
	CheckCommits   bool          `envconfig:"MV_KAFKA_CHECK_COMMITS" default:"false" desc:"test hook: check every commit against a separate account of unacked records and stop (exit 1) if one is beyond them"`
	CEMode         string        `envconfig:"MV_KAFKA_CE_MODE" default:"none" desc:"none, or knative: each record becomes the CloudEvent a Knative KafkaSource delivers (type dev.knative.kafka.event, id partition:<p>/offset:<o>, kafkaheader<name> extensions), so Triggers filtering on them keep working"`
	CESourceName   string        `envconfig:"MV_KAFKA_CE_SOURCE_NAME" desc:"the KafkaSource's name in the events' source under MV_KAFKA_CE_MODE=knative (/apis/v1/namespaces/<NAMESPACE>/kafkasources/<name>#<topic>); default MV_NAME"`
	Namespace      string        `envconfig:"NAMESPACE" desc:"the KafkaSource's namespace in the events' source under MV_KAFKA_CE_MODE=knative"`
	kafkaconn.Auth
	// Name is MV_NAME (set from runner.Env, not from the environment).
	Name string `ignored:"true"`
	// MessageIDs is how the runner forms message IDs (set from
	// runner.Env, not from the environment).
	MessageIDs runner.MessageIDs `ignored:"true"`
}

// Validate checks the values that parse but cannot be used.
func (c *Config) Validate(runner.Role) error {
	if strings.TrimSpace(c.Brokers) == "" {
		return &runner.ConfigError{Var: "MV_KAFKA_BROKERS", Value: c.Brokers, Reason: "is required for MV_SOURCE=kafka, e.g. kafka:9092"}
	}
	if _, err := kafkaconn.Brokers("MV_KAFKA_BROKERS", c.Brokers); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, t := range c.topics() {
		switch {
		case !kafkaconn.ValidTopic(t):
			return &runner.ConfigError{Var: "MV_KAFKA_TOPIC", Value: c.Topic, Reason: fmt.Sprintf("%q: must name a topic, 1 to 249 of a-z A-Z 0-9 . _ - (several: comma-separated)", t)}
		case seen[t]:
			return &runner.ConfigError{Var: "MV_KAFKA_TOPIC", Value: c.Topic, Reason: fmt.Sprintf("names %q twice", t)}
		}
		seen[t] = true
	}
	switch {
	case strings.TrimSpace(c.Group) == "" || len(c.Group) > 255:
		return &runner.ConfigError{Var: "MV_KAFKA_GROUP", Value: c.Group, Reason: "must name the consumer group (Numaflow's consumerGroup), 1 to 255 bytes"}
	case c.StartOffset != "earliest" && c.StartOffset != "latest":
		return &runner.ConfigError{Var: "MV_KAFKA_START_OFFSET", Value: c.StartOffset, Reason: "must be earliest or latest"}
	case c.Isolation != "read_committed" && c.Isolation != "read_uncommitted":
		return &runner.ConfigError{Var: "MV_KAFKA_ISOLATION_LEVEL", Value: c.Isolation, Reason: "must be read_committed or read_uncommitted"}
	case c.CommitInterval <= 0:
		return &runner.ConfigError{Var: "MV_KAFKA_COMMIT_INTERVAL", Value: c.CommitInterval.String(), Reason: "must be a positive duration such as 1s"}
	case c.RevokeTimeout < 0:
		return &runner.ConfigError{Var: "MV_KAFKA_REVOKE_TIMEOUT", Value: c.RevokeTimeout.String(), Reason: "must be 0 (do not wait) or a positive duration such as 10s"}
	case c.SessionTimeout < time.Second:
		return &runner.ConfigError{Var: "MV_KAFKA_SESSION_TIMEOUT", Value: c.SessionTimeout.String(), Reason: "must be at least 1s (brokers allow 6s..300s by default)"}
	case c.NackDelay < 0:
		return &runner.ConfigError{Var: "MV_KAFKA_NACK_DELAY", Value: c.NackDelay.String(), Reason: "must be 0 or a positive duration"}
	case c.MaxHeld < 1:
		return &runner.ConfigError{Var: "MV_KAFKA_MAX_HELD", Value: strconv.Itoa(c.MaxHeld), Reason: "must be a positive whole number"}
	case c.CEMode != "" && c.CEMode != ceModeNone && c.CEMode != ceModeKnative:
		return &runner.ConfigError{Var: "MV_KAFKA_CE_MODE", Value: c.CEMode, Reason: "must be none or knative"}
	case c.CEMode == ceModeKnative && strings.TrimSpace(c.Namespace) == "":
		return &runner.ConfigError{Var: "NAMESPACE", Value: c.Namespace, Reason: "is required with MV_KAFKA_CE_MODE=knative: the namespace of the KafkaSource whose events the runner's replace (its events' source names it)"}
	}
	return c.Auth.Validate()
}

// topics splits MV_KAFKA_TOPIC at commas and trims each name, as
// numaflow-core reads its Kafka source's topic.
func (c *Config) topics() []string {
	ts := strings.Split(c.Topic, ",")
	for i := range ts {
		ts[i] = strings.TrimSpace(ts[i])
	}
	return ts
}

func init() {
	runner.RegisterSource("kafka", func(ctx context.Context, env runner.Env, cfg *Config) (runner.Source, error) {
		cfg.MessageIDs, cfg.Name = env.MessageIDs, env.Name
		return New(ctx, *cfg, fmt.Sprintf("monovertex-%s-%d", env.Name, env.Replica), env.Logger)
	})
}

// tp names one partition of one of the topics read.
type tp struct {
	topic string
	p     int32
}

// byTopic groups partitions as franz-go's pause, resume and commit calls
// take them.
func byTopic[V any](m map[tp]V) map[string]map[int32]V {
	out := map[string]map[int32]V{}
	for k, v := range m {
		if out[k.topic] == nil {
			out[k.topic] = map[int32]V{}
		}
		out[k.topic][k.p] = v
	}
	return out
}

// partitionLists is byTopic for a list of partitions.
func partitionLists(parts []tp) map[string][]int32 {
	out := map[string][]int32{}
	for _, k := range parts {
		out[k.topic] = append(out[k.topic], k.p)
	}
	return out
}

// partitionsOf flattens a rebalance callback's map, keeping only the
// topics read.
func (s *Source) partitionsOf(m map[string][]int32) []tp {
	var out []tp
	for t, ps := range m {
		if !s.topics[t] {
			continue
		}
		for _, p := range ps {
			out = append(out, tp{t, p})
		}
	}
	return out
}

// handle is a message's Offset: the tracker of the partition assignment it
// was read under, so an ack that arrives after the partition was taken
// away is ignored rather than counted for a later assignment.
type handle struct {
	pt  *partTracker
	k   tp
	off int64
}

// seek is a pending seek back to a nacked record.
type seek struct {
	pt  *partTracker
	off int64
	due time.Time
}

// Source reads its topics as a member of a consumer group.
type Source struct {
	cfg    Config
	topics map[string]bool
	// topicHeaders is, per topic, the headers of its records that carry
	// none: only X-NF-Kafka-TopicName, one map shared by all of them.
	topicHeaders map[string]map[string]string
	log          *zap.SugaredLogger
	// nacked counts, per partition (its tracker) and offset, the deliveries
	// of a record that ended in a nack, for a nack's MaxDeliveries; an
	// entry goes once the record is acked or given up. Guarded by mu.
	nacked map[*partTracker]map[int64]uint32
	cl     *kgo.Client
	adm    *kadm.Client
	check  *commitCheck
	// bases is each topic's first global partition number (see
	// partitionBases): the partition index of numaflow-core's offsets,
	// in the IDs under MV_MESSAGE_IDS=numaflow and in monovtx_read_total's
	// source_partition label.
	bases       map[string]int
	numaflowIDs bool
	// knative, under MV_KAFKA_CE_MODE=knative, makes each message the
	// event a Knative KafkaSource delivers.
	knative *knativeEvents

	readMu sync.Mutex // one poll at a time: AllowRebalance ends every poll

	mu      sync.Mutex
	cond    *sync.Cond // acks and closing wake a rebalance waiting for in-flight records
	parts   map[tp]*partTracker
	seeks   map[tp]seek
	paused  map[tp]bool
	closing bool

	// commitMu keeps commits in order: a later snapshot is never
	// overtaken by an earlier one.
	commitMu sync.Mutex
	fatal    atomic.Pointer[error]

	stop, done chan struct{}
	closeOnce  sync.Once
	closeErr   error

	// topicMu guards ids, the ID each topic is read under, and gone, the
	// topics deleted (or deleted and created again) and not yet read
	// again, with why; see watchTopics.
	topicMu sync.Mutex
	ids     map[string]kadm.TopicID
	gone    map[string]string

	lagMu sync.Mutex
	lag   lagInfo
	// lagErr is the last lag query's failure, nil after a success: the
	// brokers' reachability as Ready reports it.
	lagErr atomic.Pointer[error]

	// revoking and released, when set (tests, under mu), are told when a
	// revoke or loss begins and how it ended.
	revoking func(parts []tp)
	released func(parts []tp, revoked bool, waited time.Duration, unfinished int)
}

type lagInfo struct {
	at        time.Time
	lag       int64
	processed int64
}

var (
	_ runner.Source              = (*Source)(nil)
	_ runner.Nacker              = (*Source)(nil)
	_ runner.PendingReader       = (*Source)(nil)
	_ runner.GroupProgressReader = (*Source)(nil)
)

// New joins the group and returns the source. A broker must answer now and
// every topic must exist; later outages are ridden out by the client.
func New(ctx context.Context, cfg Config, clientID string, log *zap.SugaredLogger) (*Source, error) {
	if log == nil {
		log = zap.NewNop().Sugar()
	}
	if cfg.CEMode == ceModeKnative && cfg.MessageIDs == runner.NumaflowIDs {
		return nil, &runner.ConfigError{Var: "MV_KAFKA_CE_MODE", Value: cfg.CEMode, Reason: "cannot be knative with MV_MESSAGE_IDS=numaflow: a KafkaSource's event IDs are partition:<p>/offset:<o>"}
	}
	brokers, err := kafkaconn.Brokers("MV_KAFKA_BROKERS", cfg.Brokers)
	if err != nil {
		return nil, err
	}
	opts, err := cfg.Auth.Opts(brokers)
	if err != nil {
		return nil, err
	}
	s := &Source{
		cfg: cfg, log: log, topics: map[string]bool{}, topicHeaders: map[string]map[string]string{},
		parts: map[tp]*partTracker{}, seeks: map[tp]seek{}, paused: map[tp]bool{},
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	s.cond = sync.NewCond(&s.mu)
	for _, t := range cfg.topics() {
		s.topics[t] = true
		s.topicHeaders[t] = map[string]string{TopicHeader: t}
	}
	if cfg.CheckCommits {
		s.check = newCommitCheck()
	}
	start := kgo.NewOffset().AtStart()
	if cfg.StartOffset == "latest" {
		start = kgo.NewOffset().AtEnd()
	}
	// franz-go reads uncommitted by default; librdkafka, and so Numaflow,
	// reads committed.
	isolation := kgo.ReadCommitted()
	if cfg.Isolation == "read_uncommitted" {
		isolation = kgo.ReadUncommitted()
	}
	opts = append(opts,
		kgo.ClientID(clientID),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.topics()...),
		kgo.ConsumeResetOffset(start),
		kgo.FetchIsolationLevel(isolation),
		kgo.DisableAutoCommit(),
		// Polls and rebalance callbacks exclude each other, so a record
		// is registered with its tracker before its partition can be
		// revoked, and a seek never lands on a partition given away.
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
			s.release(ctx, cl, s.partitionsOf(m), true)
		}),
		kgo.OnPartitionsLost(func(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
			s.release(ctx, cl, s.partitionsOf(m), false)
		}),
		kgo.SessionTimeout(cfg.SessionTimeout),
		kgo.HeartbeatInterval(min(3*time.Second, cfg.SessionTimeout/3)),
		kgo.WithLogger(kafkaconn.Logger(log)),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka source: client: %w", err)
	}
	s.cl, s.adm = cl, kadm.NewClient(cl)
	for _, t := range cfg.topics() {
		if err := kafkaconn.CheckTopic(ctx, s.adm, t, "MV_KAFKA_TOPIC"); err != nil {
			cl.Close()
			return nil, err
		}
	}
	counts, ids, err := partitionCounts(ctx, s.adm, cfg.topics())
	if err != nil {
		cl.Close()
		return nil, err
	}
	s.bases, s.numaflowIDs = partitionBases(counts), cfg.MessageIDs == runner.NumaflowIDs
	if cfg.CEMode == ceModeKnative {
		name := cfg.CESourceName
		if name == "" {
			name = cfg.Name
		}
		s.knative = &knativeEvents{namespace: strings.TrimSpace(cfg.Namespace), name: name}
	}
	s.ids, s.gone = ids, map[string]string{}
	go s.commitLoop()
	return s, nil
}

// Read polls up to max records, waiting at most timeout for them.
func (s *Source) Read(ctx context.Context, max int, timeout time.Duration) ([]*runner.Message, error) {
	if p := s.fatal.Load(); p != nil {
		return nil, runner.Fatal(*p)
	}
	if ctx.Err() != nil || max <= 0 {
		return nil, nil
	}
	s.readMu.Lock()
	defer s.readMu.Unlock()
	s.mu.Lock()
	closing := s.closing
	s.mu.Unlock()
	if closing {
		return nil, nil
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	fetches := s.cl.PollRecords(pctx, max)
	// Every poll blocks rebalances until this; seeks go in before it.
	defer s.cl.AllowRebalance()
	if fetches.IsClientClosed() {
		return nil, nil
	}
	var ferr error
	fetches.EachError(func(t string, p int32, err error) {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return
		}
		if ferr == nil {
			ferr = fmt.Errorf("kafka source: fetch %s[%d]: %w", t, p, err)
		}
	})
	msgs := make([]*runner.Message, 0, fetches.NumRecords())
	var pause []tp
	now := time.Now()
	cv := s.newConverter(fetches.NumRecords(), now)
	s.mu.Lock()
	fetches.EachRecord(func(r *kgo.Record) {
		if !s.topics[r.Topic] {
			return
		}
		k := tp{r.Topic, r.Partition}
		pt := s.parts[k]
		if pt == nil {
			pt = newPartTracker()
			s.parts[k] = pt
		}
		if !pt.read(r.Offset, r.LeaderEpoch) {
			return
		}
		if s.check != nil {
			s.check.delivered(k, r.Offset)
		}
		msgs = append(msgs, cv.convert(r, pt, k))
		if pt.held() > s.cfg.MaxHeld && !s.paused[k] {
			s.paused[k] = true
			pause = append(pause, k)
		}
	})
	set := map[tp]kgo.EpochOffset{}
	for k, sk := range s.seeks {
		if s.parts[k] != sk.pt {
			delete(s.seeks, k)
			continue
		}
		if now.Before(sk.due) {
			continue
		}
		set[k] = kgo.EpochOffset{Epoch: -1, Offset: sk.off}
		delete(s.seeks, k)
	}
	s.mu.Unlock()
	if pause != nil {
		s.cl.PauseFetchPartitions(partitionLists(pause))
		s.log.Warnw("an unacked record holds back commits: paused reading partitions until it is acked", "partitions", partitionLists(pause), "maxHeld", s.cfg.MaxHeld)
	}
	if len(set) > 0 {
		s.cl.SetOffsets(byTopic(set))
	}
	if ferr != nil {
		if len(msgs) == 0 {
			return nil, ferr
		}
		s.log.Warnw("fetch error", "error", ferr)
	}
	return msgs, nil
}

// converter turns the records of one poll into messages. What every
// message needs (the Message, its handle, its one-key slice, the bytes of
// its ID) comes from slices made once per poll: at 1 KiB, allocations per
// record were most of the source's CPU (hack/bench/RESULTS.md, "Kafka and
// JetStream ahead of their bare clients").
type converter struct {
	s       *Source
	now     time.Time
	msgs    []runner.Message
	handles []handle
	keys    []string
	ids     []byte // the IDs' bytes, each ID a string over its part
}

func (s *Source) newConverter(n int, now time.Time) *converter {
	return &converter{s: s, now: now,
		msgs: make([]runner.Message, 0, n), handles: make([]handle, 0, n), keys: make([]string, 0, n),
		ids: make([]byte, 0, n*32)}
}

// id appends r's ID to c.ids and returns it as a string over those bytes,
// which are never written again (a full c.ids moves on to a new array, so
// earlier IDs keep theirs).
func (c *converter) id(r *kgo.Record, gpid int) string {
	need := len(r.Topic) + 2*20 + 2
	if c.s.numaflowIDs {
		need += 21
	}
	if cap(c.ids)-len(c.ids) < need {
		c.ids = make([]byte, 0, max(need, 2*cap(c.ids)))
	}
	start := len(c.ids)
	b := append(c.ids, r.Topic...)
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(r.Partition), 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, r.Offset, 10)
	if c.s.numaflowIDs {
		// numaflow-core's StringOffset(id, global partition) prints
		// "<id>-<global partition>" (source/kafka.rs, message.rs).
		b = append(b, '-')
		b = strconv.AppendInt(b, int64(gpid), 10)
	}
	c.ids = b
	return unsafe.String(&b[start], len(b)-start)
}

func (c *converter) convert(r *kgo.Record, pt *partTracker, k tp) *runner.Message {
	s := c.s
	gpid := s.bases[r.Topic] + int(r.Partition)
	c.handles = append(c.handles, handle{pt: pt, k: k, off: r.Offset})
	c.msgs = append(c.msgs, runner.Message{
		ID:        c.id(r, gpid),
		Value:     r.Value,
		EventTime: r.Timestamp,
		Offset:    &c.handles[len(c.handles)-1],
	})
	m := &c.msgs[len(c.msgs)-1]
	if m.EventTime.UnixMilli() <= 0 {
		m.EventTime = c.now // a record without a timestamp (-1)
	}
	if r.Key != nil {
		// The key's bytes are the fetch's, which franz-go never reuses
		// (no pools are set), as Value is.
		c.keys = append(c.keys, unsafe.String(unsafe.SliceData(r.Key), len(r.Key)))
		n := len(c.keys)
		m.Keys = c.keys[n-1 : n : n]
	}
	switch {
	case s.knative != nil:
		m.Headers = make(map[string]string, len(r.Headers)+1)
		s.knative.message(m, r)
		m.Headers[TopicHeader] = r.Topic
	case len(r.Headers) == 0:
		// Header maps are read only once a message is made (the engine
		// hands an input's to its outputs as it is), so the records of a
		// topic without headers share one.
		m.Headers = s.topicHeaders[r.Topic]
	default:
		m.Headers = make(map[string]string, len(r.Headers)+1)
		for _, h := range r.Headers {
			m.Headers[h.Key] = string(h.Value)
		}
		m.Headers[TopicHeader] = r.Topic
	}
	runner.SetSourcePartition(m, uint16(gpid))
	return m
}

// Ack marks the messages final. Their offsets are committed once every
// record before them in their partition is final too (within
// MV_KAFKA_COMMIT_INTERVAL, or at a rebalance or shutdown). Acks of
// messages this replica no longer owns, or never read, are ignored.
func (s *Source) Ack(_ context.Context, msgs []*runner.Message) error {
	var resume []tp
	s.mu.Lock()
	// A batch's messages come in runs of one partition: its tracker is
	// looked up once per run, not once per message.
	var last *partTracker
	owned := false
	for _, m := range msgs {
		h, ok := m.Offset.(*handle)
		if !ok || h == nil {
			continue
		}
		if h.pt != last {
			last, owned = h.pt, s.parts[h.k] == h.pt
		}
		if !owned {
			continue
		}
		if h.pt.ack(h.off) && s.check != nil {
			s.check.acked(h.k, h.off)
		}
		if len(s.nacked) > 0 {
			s.forget(h)
		}
		if len(s.paused) > 0 && s.paused[h.k] && h.pt.held() <= s.cfg.MaxHeld/2 {
			delete(s.paused, h.k)
			resume = append(resume, h.k)
		}
	}
	s.cond.Broadcast()
	s.mu.Unlock()
	if resume != nil {
		s.cl.ResumeFetchPartitions(partitionLists(resume))
	}
	return nil
}

// Nack hands messages back: their partitions are read again from the
// earliest of them after the nack's delay (MV_KAFKA_NACK_DELAY when it
// asks for none), and until they are acked no commit passes them. With
// MaxDeliveries, a record this replica delivered that many times (each
// ending in a nack) is given up instead: it counts as final, so commits
// pass it, as a JetStream consumer's MaxDeliver stops a message. Kafka
// keeps no delivery count, so the count is this replica's: a record that
// moves to another replica in a rebalance starts again from 0 there.
func (s *Source) Nack(_ context.Context, msgs []*runner.Message, n runner.Nack) error {
	delay := n.Delay
	if delay <= 0 {
		delay = s.cfg.NackDelay
	}
	due := time.Now().Add(delay)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		h, ok := m.Offset.(*handle)
		if !ok || h == nil || s.parts[h.k] != h.pt {
			continue
		}
		if n.MaxDeliveries > 0 && s.givenUp(h, n) {
			continue
		}
		if !h.pt.nack(h.off) {
			continue
		}
		sk, exists := s.seeks[h.k]
		if !exists || sk.pt != h.pt {
			s.seeks[h.k] = seek{pt: h.pt, off: h.off, due: due}
			continue
		}
		// One seek per partition: back to the earliest, after the latest delay.
		sk.off = min(sk.off, h.off)
		if due.After(sk.due) {
			sk.due = due
		}
		s.seeks[h.k] = sk
	}
	s.cond.Broadcast()
	return nil
}

// snapshot collects the commit points that moved, runs the commit check on
// them, and marks them sent. Called with s.mu held.
func (s *Source) snapshot(parts []tp) (map[tp]kgo.EpochOffset, error) {
	out := map[tp]kgo.EpochOffset{}
	visit := func(p tp, pt *partTracker) error {
		off, epoch, ok := pt.toCommit()
		if !ok {
			return nil
		}
		if s.check != nil {
			if err := s.check.check(p, off); err != nil {
				return err
			}
		}
		out[p] = kgo.EpochOffset{Epoch: epoch, Offset: off}
		pt.committed = off
		return nil
	}
	if parts == nil {
		for p, pt := range s.parts {
			if err := visit(p, pt); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	for _, p := range parts {
		if pt := s.parts[p]; pt != nil {
			if err := visit(p, pt); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// commit sends offsets and waits for the coordinator's answer.
func (s *Source) commit(ctx context.Context, cl *kgo.Client, offsets map[tp]kgo.EpochOffset) error {
	if len(offsets) == 0 {
		return nil
	}
	var cerr error
	cl.CommitOffsetsSync(ctx, byTopic(offsets),
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			if err != nil {
				cerr = err
				return
			}
			for _, t := range resp.Topics {
				for _, p := range t.Partitions {
					if e := kerr.ErrorForCode(p.ErrorCode); e != nil && cerr == nil {
						cerr = fmt.Errorf("%s[%d]: %w", t.Topic, p.Partition, e)
					}
				}
			}
		})
	if cerr != nil {
		return fmt.Errorf("kafka source: commit %d partitions of %s for group %s: %w", len(offsets), s.cfg.Topic, s.cfg.Group, cerr)
	}
	return nil
}

// commitAll commits every partition's final offset that moved.
func (s *Source) commitAll(ctx context.Context) error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	s.mu.Lock()
	offsets, err := s.snapshot(nil)
	pts := make(map[tp]*partTracker, len(offsets))
	for p := range offsets {
		pts[p] = s.parts[p]
	}
	s.mu.Unlock()
	if err != nil {
		s.failed(err)
		return err
	}
	if err := s.commit(ctx, s.cl, offsets); err != nil {
		// Send them again next time.
		s.mu.Lock()
		for p, pt := range pts {
			if pt.committed == offsets[p].Offset {
				pt.committed = -1
			}
		}
		s.mu.Unlock()
		return err
	}
	return nil
}

func (s *Source) failed(err error) {
	s.fatal.CompareAndSwap(nil, &err)
	s.log.Errorw("commit check failed", "error", err)
}

func (s *Source) commitLoop() {
	defer close(s.done)
	t := time.NewTicker(s.cfg.CommitInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), max(10*time.Second, s.cfg.CommitInterval))
			if err := s.commitAll(ctx); err != nil {
				s.log.Warnw("commit failed; retried at the next interval", "error", err)
			}
			cancel()
		}
	}
}

// release runs when partitions are taken away. For a revoke (commit true)
// it waits up to MV_KAFKA_REVOKE_TIMEOUT for their records in flight to
// finish, then commits what is final; the rest is the new owner's to
// read. Polls cannot run meanwhile (BlockRebalanceOnPoll), so nothing more
// of these partitions is read. Lost partitions (the session expired) are
// only forgotten: another member may own them already.
func (s *Source) release(ctx context.Context, cl *kgo.Client, parts []tp, commit bool) {
	if len(parts) == 0 {
		return
	}
	start := time.Now()
	s.mu.Lock()
	revoking, released := s.revoking, s.released
	s.mu.Unlock()
	if revoking != nil && commit {
		revoking(parts)
	}
	deadline := start.Add(s.cfg.RevokeTimeout)
	timer := time.AfterFunc(s.cfg.RevokeTimeout, func() {
		s.mu.Lock()
		s.cond.Broadcast()
		s.mu.Unlock()
	})
	defer timer.Stop()
	s.mu.Lock()
	for commit && !s.closing && time.Now().Before(deadline) && s.inflight(parts) > 0 {
		s.cond.Wait()
	}
	s.mu.Unlock()

	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	s.mu.Lock()
	var offsets map[tp]kgo.EpochOffset
	var cerr error
	if commit {
		offsets, cerr = s.snapshot(parts)
	}
	unfinished := 0
	var resume []tp
	for _, p := range parts {
		if pt := s.parts[p]; pt != nil {
			unfinished += pt.inflight + pt.nacked
		}
		delete(s.parts, p)
		delete(s.seeks, p)
		if s.paused[p] {
			delete(s.paused, p)
			resume = append(resume, p)
		}
		if s.check != nil {
			s.check.released(p)
		}
	}
	s.mu.Unlock()
	if resume != nil {
		cl.ResumeFetchPartitions(partitionLists(resume))
	}
	if cerr != nil {
		s.failed(cerr)
		return
	}
	how := "lost"
	if commit {
		how = "revoked"
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := s.commit(cctx, cl, offsets); err != nil {
			s.log.Warnw("commit at revoke failed; the new owner reads again from the last commit", "error", err)
		}
		cancel()
	}
	waited := time.Since(start)
	s.log.Infow("partitions "+how, "partitions", partitionLists(parts), "committed", len(offsets),
		"unfinished", unfinished, "waited", waited.Round(time.Millisecond).String())
	if released != nil {
		released(parts, commit, waited, unfinished)
	}
}

// inflight counts the records of parts handed to the engine and not yet
// acked or nacked. Called with s.mu held.
func (s *Source) inflight(parts []tp) int {
	n := 0
	for _, p := range parts {
		if pt := s.parts[p]; pt != nil {
			n += pt.inflight
		}
	}
	return n
}

// lagValidFor is how long one lag query answers Pending and GroupProcessed.
const lagValidFor = 500 * time.Millisecond

// lagNow returns the group's lag and committed total, querying the
// brokers unless the last answer is younger than lagValidFor.
func (s *Source) lagNow(ctx context.Context) (lagInfo, error) {
	s.lagMu.Lock()
	defer s.lagMu.Unlock()
	if time.Since(s.lag.at) < lagValidFor {
		return s.lag, nil
	}
	li, err := s.queryLag(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.lagErr.Store(&err)
		}
		return li, err
	}
	s.lagErr.Store(nil)
	s.lag = li
	return li, nil
}

// Ready reports whether the last lag query (every MV_PENDING_INTERVAL)
// reached the brokers.
func (s *Source) Ready(context.Context) error {
	if p := s.lagErr.Load(); p != nil {
		return *p
	}
	return nil
}

var _ runner.Readier = (*Source)(nil)

func (s *Source) queryLag(ctx context.Context) (lagInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.watchTopics(ctx); err != nil {
		return lagInfo{}, err
	}
	topics := s.cfg.topics()
	// A read_committed consumer reads up to the last stable offset, not
	// the high watermark: records of open transactions are not pending
	// yet (librdkafka's watermarks, and so Numaflow's pending, follow the
	// consumer's isolation level the same way).
	listEnds := s.adm.ListCommittedOffsets
	if s.cfg.Isolation == "read_uncommitted" {
		listEnds = s.adm.ListEndOffsets
	}
	ends, err := listEnds(ctx, topics...)
	if err != nil {
		return lagInfo{}, fmt.Errorf("kafka source: end offsets of %s: %w", s.cfg.Topic, err)
	}
	starts, err := s.adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return lagInfo{}, fmt.Errorf("kafka source: start offsets of %s: %w", s.cfg.Topic, err)
	}
	committed, err := s.adm.FetchOffsets(ctx, s.cfg.Group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		err = nil // nothing committed yet
	}
	if err != nil {
		return lagInfo{}, fmt.Errorf("kafka source: committed offsets of group %s: %w", s.cfg.Group, err)
	}
	var li lagInfo
	var perr error
	ends.Each(func(e kadm.ListedOffset) {
		if !s.topics[e.Topic] {
			return
		}
		if e.Err != nil {
			perr = e.Err
			return
		}
		start := e.Offset
		if st, ok := starts.Lookup(e.Topic, e.Partition); ok && st.Err == nil {
			start = st.Offset
		}
		pos := start
		if c, ok := committed.Lookup(e.Topic, e.Partition); ok && c.Err == nil && c.At >= 0 {
			pos = max(c.At, start) // records below the log start are gone
		} else if s.cfg.StartOffset == "latest" {
			pos = e.Offset // the group will start at the end
		}
		li.lag += max(e.Offset-pos, 0)
		li.processed += pos
	})
	if perr != nil {
		return lagInfo{}, fmt.Errorf("kafka source: offsets of %s: %w", s.cfg.Topic, perr)
	}
	li.at = time.Now()
	return li, nil
}

// Pending is the whole group's lag: the end of each partition (its last
// stable offset under read_committed, else its high watermark) minus its
// committed offset, summed over the partitions of every topic read, the
// same number on every replica (as Numaflow's Kafka source counts it). Records read but not yet
// committed count as pending, as a JetStream consumer counts its unacked.
func (s *Source) Pending(ctx context.Context) (int64, error) {
	li, err := s.lagNow(ctx)
	if err != nil {
		return -1, err
	}
	return li.lag, nil
}

// GroupProcessed is the sum of the group's committed offsets: its growth is
// what every replica together finished, from which the runner derives the
// group rate behind monovtx_backlog_seconds.
func (s *Source) GroupProcessed(ctx context.Context) (int64, error) {
	li, err := s.lagNow(ctx)
	if err != nil {
		return 0, err
	}
	return li.processed, nil
}

// Close commits what is final, leaves the group (the revoke that follows
// commits again and does not wait) and closes the client. Records not
// final are read again by the group from the last commit.
func (s *Source) Close(ctx context.Context) error {
	first := false
	s.closeOnce.Do(func() {
		first = true
		s.mu.Lock()
		s.closing = true
		s.cond.Broadcast()
		s.mu.Unlock()
		close(s.stop)
		<-s.done
		if err := s.commitAll(ctx); err != nil {
			s.closeErr = err
		}
		// Leaving the group waits for a join in progress, which the
		// coordinator may hold until every member rejoined or the group's
		// rebalance timeout (60s by default, longer than a pod's grace
		// period) passed. What is final is committed above, so past the
		// shutdown budget the runner stops waiting; the group then drops
		// this member after MV_KAFKA_SESSION_TIMEOUT.
		left := make(chan struct{})
		go func() {
			s.cl.CloseAllowingRebalance()
			close(left)
		}()
		select {
		case <-left:
		case <-ctx.Done():
			s.closeErr = errors.Join(s.closeErr, fmt.Errorf("kafka source: leaving group %q did not finish within the shutdown budget (%w); finished records are committed, and the group gives this replica's partitions to the others after MV_KAFKA_SESSION_TIMEOUT", s.cfg.Group, ctx.Err()))
		}
		if s.check != nil {
			commits, violations, _ := s.check.summary()
			s.log.Infow("commit check", "commits", commits, "violations", violations)
		}
	})
	if !first {
		return nil
	}
	return s.closeErr
}

// givenUp counts a delivery of h's record that ended in a nack with
// MaxDeliveries and, once there were that many, acks the record instead of
// handing it back, and reports true. Called with s.mu held.
func (s *Source) givenUp(h *handle, n runner.Nack) bool {
	if s.nacked == nil {
		s.nacked = map[*partTracker]map[int64]uint32{}
	}
	counts := s.nacked[h.pt]
	if counts == nil {
		counts = map[int64]uint32{}
		s.nacked[h.pt] = counts
	}
	counts[h.off]++
	if counts[h.off] < n.MaxDeliveries {
		return false
	}
	s.log.Warnw("record delivered as often as its nack's max_deliveries allows: given up, the partition's commit passes it", "topic", h.k.topic, "partition", h.k.p, "offset", h.off, "max_deliveries", n.MaxDeliveries, "reason", n.Reason)
	if h.pt.ack(h.off) && s.check != nil {
		s.check.acked(h.k, h.off)
	}
	s.forget(h)
	return true
}

// forget drops the nack count of h's record. Called with s.mu held.
func (s *Source) forget(h *handle) {
	if counts := s.nacked[h.pt]; counts != nil {
		delete(counts, h.off)
		if len(counts) == 0 {
			delete(s.nacked, h.pt)
		}
	}
}
