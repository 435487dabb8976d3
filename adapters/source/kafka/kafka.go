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
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/monovertex/monovertex/internal/kafkaconn"
	"github.com/monovertex/monovertex/runner"
)

// TopicHeader is the header Numaflow's Kafka source adds with the topic name.
const TopicHeader = "X-NF-Kafka-TopicName"

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
	// global is the record's global partition (see partitionBases), its
	// source partition (SourcePartition).
	global uint16
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

var (
	_ runner.Source              = (*Source)(nil)
	_ runner.Nacker              = (*Source)(nil)
	_ runner.PendingReader       = (*Source)(nil)
	_ runner.GroupProgressReader = (*Source)(nil)
	_ runner.PartitionedSource   = (*Source)(nil)
	_ runner.Connector           = (*Source)(nil)
)

// New checks the settings and builds the client, which dials no broker
// until Connect.
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
	s.numaflowIDs = cfg.MessageIDs == runner.NumaflowIDs
	if cfg.CEMode == ceModeKnative {
		name := cfg.CESourceName
		if name == "" {
			name = cfg.Name
		}
		s.knative = &knativeEvents{namespace: strings.TrimSpace(cfg.Namespace), name: name}
	}
	s.gone = map[string]string{}
	go s.commitLoop()
	return s, nil
}

// Connect asks the brokers for every topic, which must exist (a
// *runner.ConfigError naming MV_KAFKA_TOPIC otherwise), and for their
// partition counts, from which the global partition numbers come. A
// broker that does not answer fails the attempt, and the engine tries
// again.
func (s *Source) Connect(ctx context.Context) error {
	if s.bases != nil {
		return nil
	}
	for _, t := range s.cfg.topics() {
		if err := kafkaconn.CheckTopic(ctx, s.adm, t, "MV_KAFKA_TOPIC"); err != nil {
			return err
		}
	}
	counts, ids, err := partitionCounts(ctx, s.adm, s.cfg.topics())
	if err != nil {
		return err
	}
	s.topicMu.Lock()
	s.ids = ids
	s.topicMu.Unlock()
	s.bases = partitionBases(counts)
	return nil
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
	// numaflow-core keeps the partition as a u16.
	c.handles = append(c.handles, handle{pt: pt, k: k, off: r.Offset, global: uint16(gpid)})
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
	return m
}

// SourcePartition is the global partition m was read from (see
// partitionBases): numaflow-core's partition index, which labels
// monovtx_read_total and, under MV_ORDERING, is m's lane.
func (s *Source) SourcePartition(m *runner.Message) (uint16, bool) {
	h, ok := m.Offset.(*handle)
	if !ok || h == nil {
		return 0, false
	}
	return h.global, true
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

var _ runner.Readier = (*Source)(nil)

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
