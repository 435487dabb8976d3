// Package jetstream is a source reading a NATS JetStream stream through a
// durable pull consumer (MV_SOURCE=jetstream).
//
// Several runner replicas may share one consumer: the server hands each
// message of a pull consumer to one fetch request at a time, so replicas
// split the stream between them, and a message one replica does not ack
// within MV_JETSTREAM_ACK_WAIT is redelivered to any of them.
//
// Each message's ID is "<stream>:<stream sequence>", which is unique within
// the stream and the same on every redelivery; a producer's Nats-Msg-Id is
// kept as a header but not used as the ID, because it is only unique within
// the stream's Duplicates window and often absent. Under
// MV_MESSAGE_IDS=numaflow the ID is numaflow-core's offset string instead,
// "<stream sequence>-<replica>" (see convert). Keys, event time and
// headers are mapped as described in internal/natsjs (Mv-Keys, else no
// keys; Mv-Event-Time, else the time the stream stored the message).
package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/monovertex/monovertex/internal/natsjs"
	"github.com/monovertex/monovertex/runner"
)

// Config holds the JetStream source's settings.
type Config struct {
	URL           string        `envconfig:"MV_JETSTREAM_URL" desc:"NATS server URL, or a comma-separated list, e.g. nats://nats:4222"`
	Stream        string        `envconfig:"MV_JETSTREAM_STREAM" desc:"stream to read (must exist)"`
	Consumer      string        `envconfig:"MV_JETSTREAM_CONSUMER" desc:"durable pull consumer; created with explicit acks if missing, shared by all replicas"`
	FilterSubject string        `envconfig:"MV_JETSTREAM_FILTER_SUBJECT" desc:"subject filter of a consumer the runner creates; empty reads the whole stream"`
	DeliverPolicy string        `envconfig:"MV_JETSTREAM_DELIVER_POLICY" default:"all" desc:"where a consumer the runner creates starts, as Numaflow's deliver_policy: all, new, last, last_per_subject, by_start_sequence N or by_start_time EPOCH_MS"`
	AckWait       time.Duration `envconfig:"MV_JETSTREAM_ACK_WAIT" default:"30s" desc:"ack wait of a consumer the runner creates: unacked messages are redelivered after it"`
	MaxAckPending int           `envconfig:"MV_JETSTREAM_MAX_ACK_PENDING" default:"20000" desc:"max ack pending of a consumer the runner creates; at least replicas x MV_READ_BATCH_SIZE x MV_INFLIGHT_BATCHES"`
	NakDelay      time.Duration `envconfig:"MV_JETSTREAM_NAK_DELAY" default:"1s" desc:"delay before a nacked message is redelivered"`
	AckSync       bool          `envconfig:"MV_JETSTREAM_ACK_SYNC" default:"true" desc:"wait for the server to confirm the acks (from a single server the last of each batch, which it takes after the others; in a cluster or after a reconnect each one); false sends acks and only flushes the connection"`
	InProgress    bool          `envconfig:"MV_JETSTREAM_IN_PROGRESS" default:"true" desc:"tell the server that messages held longer than a third of the ack wait are still being worked on, so they are not redelivered meanwhile"`
	Creds         string        `envconfig:"MV_JETSTREAM_CREDS" desc:"NATS credentials file (JWT and NKey seed), if the server needs one"`
	ReconnectWait time.Duration `envconfig:"MV_JETSTREAM_RECONNECT_WAIT" default:"500ms" desc:"pause between reconnect attempts (the client reconnects for ever)"`
	APITimeout    time.Duration `envconfig:"MV_JETSTREAM_API_TIMEOUT" default:"5s" desc:"timeout of JetStream API calls and ack confirmations"`
	MissingWait   time.Duration `envconfig:"MV_JETSTREAM_CONSUMER_TIMEOUT" default:"60s" desc:"how long a deleted consumer the runner did not create may stay away before the runner exits 1 (0: at once); one the runner created is created again at once"`
	// Auth is TLS and the user, NKey or token, shared by every JetStream
	// connection of the runner.
	natsjs.Auth `envconfig:"MV_JETSTREAM"`
	// Connection takes the connection's state changes (set from
	// runner.Env, not from the environment).
	Connection runner.Connection `ignored:"true"`
	// MessageIDs is how the runner forms message IDs (set from
	// runner.Env, not from the environment).
	MessageIDs runner.MessageIDs `ignored:"true"`
	// Replica is this runner's MV_REPLICA (set from runner.Env), which
	// numaflow-core's JetStream offsets carry.
	Replica int `ignored:"true"`
}

// Validate checks the values that parse but cannot be used.
func (c *Config) Validate(runner.Role) error {
	if strings.TrimSpace(c.URL) == "" {
		return &runner.ConfigError{Var: "MV_JETSTREAM_URL", Value: c.URL, Reason: "is required for MV_SOURCE=jetstream, e.g. nats://nats:4222"}
	}
	if err := natsjs.CheckURLs(c.URL); err != nil {
		return &runner.ConfigError{Var: "MV_JETSTREAM_URL", Value: c.URL, Reason: err.Error()}
	}
	switch {
	case !validName(c.Stream):
		return &runner.ConfigError{Var: "MV_JETSTREAM_STREAM", Value: c.Stream, Reason: "must name a stream: 1 to 255 bytes of printable text without spaces, '.', '*', '>', '/' or '\\'"}
	case !validName(c.Consumer):
		return &runner.ConfigError{Var: "MV_JETSTREAM_CONSUMER", Value: c.Consumer, Reason: "must name a durable consumer: 1 to 255 bytes of printable text without spaces, '.', '*', '>', '/' or '\\'"}
	case c.FilterSubject != "" && !validFilter(c.FilterSubject):
		return &runner.ConfigError{Var: "MV_JETSTREAM_FILTER_SUBJECT", Value: c.FilterSubject, Reason: "must be a subject such as orders.* or orders.>: dot-separated non-empty tokens without spaces, '*' and '>' only as whole tokens, '>' only last"}
	case c.MissingWait < 0:
		return &runner.ConfigError{Var: "MV_JETSTREAM_CONSUMER_TIMEOUT", Value: c.MissingWait.String(), Reason: "must be 0 (exit at once) or a positive duration such as 60s"}
	case natsjs.CheckDeliverPolicy(c.DeliverPolicy) != nil:
		return &runner.ConfigError{Var: "MV_JETSTREAM_DELIVER_POLICY", Value: c.DeliverPolicy, Reason: "must be all, new, last, last_per_subject, by_start_sequence N or by_start_time EPOCH_MS (Numaflow's deliver_policy)"}
	case c.AckWait < time.Second:
		return &runner.ConfigError{Var: "MV_JETSTREAM_ACK_WAIT", Value: c.AckWait.String(), Reason: "must be at least 1s"}
	case c.MaxAckPending < 1:
		return &runner.ConfigError{Var: "MV_JETSTREAM_MAX_ACK_PENDING", Value: strconv.Itoa(c.MaxAckPending), Reason: "must be a positive whole number"}
	case c.NakDelay < 0:
		return &runner.ConfigError{Var: "MV_JETSTREAM_NAK_DELAY", Value: c.NakDelay.String(), Reason: "must be 0 (redeliver at once) or a positive duration"}
	case c.ReconnectWait <= 0:
		return &runner.ConfigError{Var: "MV_JETSTREAM_RECONNECT_WAIT", Value: c.ReconnectWait.String(), Reason: "must be a positive duration such as 500ms"}
	case c.APITimeout <= 0:
		return &runner.ConfigError{Var: "MV_JETSTREAM_API_TIMEOUT", Value: c.APITimeout.String(), Reason: "must be a positive duration such as 5s"}
	}
	if err := c.Auth.Validate("MV_JETSTREAM_URL", c.URL); err != nil {
		return err
	}
	if c.Creds != "" && (c.HasIdentity() || natsjs.URLsCarryUser(c.URL)) {
		return &runner.ConfigError{Var: "MV_JETSTREAM_CREDS", Value: c.Creds, Reason: "cannot be used with MV_JETSTREAM_USER, _TOKEN, _NKEY_FILE or a user in MV_JETSTREAM_URL: the credentials file is an identity of its own; set one"}
	}
	return nil
}

func init() {
	runner.RegisterSource("jetstream", func(ctx context.Context, env runner.Env, cfg *Config) (runner.Source, error) {
		cfg.Connection = env.Connection
		cfg.MessageIDs, cfg.Replica = env.MessageIDs, env.Replica
		name := fmt.Sprintf("monovertex %s/%d source", env.Name, env.Replica)
		return New(ctx, *cfg, name, env.Logger)
	})
}

// Source reads a stream through a durable pull consumer.
type Source struct {
	cfg Config
	log *zap.SugaredLogger
	// dialer dials the server; nc and js are set by Connect.
	dialer *natsjs.Dialer
	nc     *nats.Conn
	js     jetstream.JetStream

	// cons is the bound consumer; a deleted one is replaced (see rebind,
	// which rebindMu serializes). missingSince is when the consumer was
	// found deleted, zero while it exists.
	rebindMu     sync.Mutex
	consMu       sync.Mutex
	cons         jetstream.Consumer
	missingSince time.Time

	// held are the messages read and not yet acked or nacked, with the time
	// the server last heard about them; the in-progress loop keeps them
	// from being redelivered while the engine is still working on them.
	mu   sync.Mutex
	held map[jetstream.Msg]time.Time

	stop     chan struct{}
	stopOnce sync.Once // Close may be called from several goroutines at once
	done     chan struct{}
	// late counts cut-short fetches still handing back what arrives for
	// them; Close waits for them so those messages need not wait out the
	// ack wait.
	late sync.WaitGroup

	// info is the last consumer info and when it was fetched: the engine
	// asks for pending and for group progress back to back, and one round
	// trip to the server answers both.
	infoMu sync.Mutex
	info   *jetstream.ConsumerInfo
	infoAt time.Time
}

var (
	_ runner.Source             = (*Source)(nil)
	_ runner.Nacker             = (*Source)(nil)
	_ runner.PendingReader      = (*Source)(nil)
	_ runner.Readier            = (*Source)(nil)
	_ runner.RedeliversInFlight = (*Source)(nil)
	_ runner.DropNotifier       = (*Source)(nil)
	_ runner.Connector          = (*Source)(nil)
)

// New reads the TLS and NKey files and returns the source, which talks to
// the server only from Connect on.
func New(_ context.Context, cfg Config, connName string, log *zap.SugaredLogger) (*Source, error) {
	if log == nil {
		log = zap.NewNop().Sugar()
	}
	d, err := natsjs.NewDialer(natsjs.ConnOptions{URL: cfg.URL, Creds: cfg.Creds, Auth: cfg.Auth, Name: connName, ReconnectWait: cfg.ReconnectWait, Logger: log, Connection: cfg.Connection})
	if err != nil {
		return nil, err
	}
	return &Source{
		cfg: cfg, log: log, dialer: d,
		held: map[jetstream.Msg]time.Time{},
		stop: make(chan struct{}), done: make(chan struct{}),
	}, nil
}

// Connect dials the server and finds the durable consumer, creating it
// when missing. A stream that does not exist, or a consumer or filter
// that cannot work, is a *runner.ConfigError; a server that cannot be
// reached fails the attempt, and the engine tries again. Once connected,
// outages are ridden out by reconnecting.
func (s *Source) Connect(ctx context.Context) error {
	if s.nc != nil {
		return nil
	}
	cfg := s.cfg
	nc, err := s.dialer.Dial()
	if err != nil {
		return err
	}
	// A refused setting must stay the runner's only line: no
	// "disconnected" warning from closing the connection.
	closeQuietly := func() {
		nc.SetDisconnectErrHandler(nil)
		nc.Close()
	}
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(cfg.APITimeout))
	if err != nil {
		closeQuietly()
		return err
	}
	cons, err := ensureConsumer(ctx, js, cfg, s.log)
	if err != nil {
		closeQuietly()
		return err
	}
	s.consMu.Lock()
	s.cons = cons
	s.consMu.Unlock()
	s.nc, s.js = nc, js
	if cfg.InProgress {
		go s.progressLoop()
	} else {
		close(s.done)
	}
	return nil
}

// maxFetchWait bounds one pull request, so a Read with a long timeout that
// is cancelled leaves no request behind on the server for long.
const maxFetchWait = 5 * time.Second

// Read fetches up to max messages, waiting at most timeout for them. While
// the connection is down it fails at once, and the engine retries.
func (s *Source) Read(ctx context.Context, max int, timeout time.Duration) ([]*runner.Message, error) {
	if ctx.Err() != nil {
		return nil, nil
	}
	// While disconnected, wait out the read timeout for the reconnect before
	// failing, as an empty read would.
	if err := natsjs.WaitConnected(ctx, s.nc, timeout); err != nil {
		return nil, fmt.Errorf("jetstream source: read from %s/%s: %w", s.cfg.Stream, s.cfg.Consumer, err)
	}
	if ctx.Err() != nil {
		return nil, nil
	}
	deadline := time.Now().Add(timeout)
	for {
		var batch jetstream.MessageBatch
		var err error
		cons := s.consumer()
		wait := min(time.Until(deadline), maxFetchWait)
		if wait < 10*time.Millisecond {
			batch, err = cons.FetchNoWait(max)
		} else {
			// The server ends the pull request after wait (with a 408 that
			// the client swallows); the client's own timer only fires a
			// second later, so nothing the server sends is left in flight.
			batch, err = cons.Fetch(max, jetstream.FetchMaxWait(wait))
		}
		if err != nil {
			return nil, s.fetchFailed(ctx, err)
		}
		msgs, cancelled := s.collect(ctx, batch, max)
		if cancelled {
			return msgs, nil // shutting down: the engine stops reading
		}
		if err := batch.Error(); err != nil {
			if len(msgs) > 0 && consumerGone(err) {
				return msgs, nil // the next read finds the consumer gone
			}
			return msgs, s.fetchFailed(ctx, err)
		}
		if s.isMissing() {
			s.consMu.Lock()
			s.missingSince = time.Time{} // its owner created it again
			s.consMu.Unlock()
		}
		if len(msgs) > 0 || wait < 10*time.Millisecond || time.Until(deadline) < 10*time.Millisecond {
			return msgs, nil
		}
	}
}

// fetchFailed words a failed fetch; when the consumer is gone it binds to
// it again (or creates it again) first, and a read that did that reports
// nothing read rather than an error.
func (s *Source) fetchFailed(ctx context.Context, err error) error {
	if consumerGone(err) && s.nc.IsConnected() {
		if rerr := s.rebind(ctx, err); rerr != nil {
			return rerr
		}
		return nil
	}
	return fmt.Errorf("jetstream source: fetch from %s/%s: %w", s.cfg.Stream, s.cfg.Consumer, err)
}

func (s *Source) isMissing() bool {
	s.consMu.Lock()
	defer s.consMu.Unlock()
	return !s.missingSince.IsZero()
}

// collect takes the fetch's messages until it ends or ctx is done. On
// cancellation it keeps what already arrived and hands later arrivals back
// to the server at once (they would otherwise wait out the ack wait).
func (s *Source) collect(ctx context.Context, batch jetstream.MessageBatch, max int) ([]*runner.Message, bool) {
	msgs := make([]*runner.Message, 0, max)
	// The messages themselves come from one slice per fetch, made when
	// the first arrives.
	var slab []runner.Message
	var held []jetstream.Msg
	cancelled := false
	ch := batch.Messages()
	for {
		// more turns false when the fetch ends, or, once cancelled, when
		// nothing more has arrived yet.
		var jm jetstream.Msg
		more := true
		if !cancelled {
			select {
			case jm, more = <-ch:
			case <-ctx.Done():
				cancelled = true
				continue
			}
		} else {
			// Cancelled: take only what has already arrived.
			select {
			case jm, more = <-ch:
			default:
				s.late.Add(1)
				go s.nakLate(ch)
				more = false
			}
		}
		if !more {
			break
		}
		if len(slab) == cap(slab) {
			slab = make([]runner.Message, 0, max)
		}
		slab = append(slab, runner.Message{})
		m := &slab[len(slab)-1]
		s.convert(m, jm)
		msgs = append(msgs, m)
		held = append(held, jm)
	}
	if s.cfg.InProgress && len(held) > 0 {
		now := time.Now()
		s.mu.Lock()
		for _, jm := range held {
			s.held[jm] = now
		}
		s.mu.Unlock()
	}
	return msgs, cancelled
}

func (s *Source) nakLate(ch <-chan jetstream.Msg) {
	defer s.late.Done()
	n := 0
	for jm := range ch {
		_ = jm.Nak()
		n++
	}
	if n > 0 {
		s.log.Debugw("handed back messages that arrived after the read was cancelled", "count", n)
	}
}

// convert fills m from jm.
func (s *Source) convert(m *runner.Message, jm jetstream.Msg) {
	m.Value, m.Offset = jm.Data(), jm
	var stored time.Time
	meta, err := jm.Metadata()
	switch {
	case err == nil && s.cfg.MessageIDs == runner.NumaflowIDs:
		// numaflow-core's IntOffset(stream sequence, replica), printed
		// "<offset>-<partition_idx>" (source/jetstream.rs, message.rs).
		m.ID = strconv.FormatUint(meta.Sequence.Stream, 10) + "-" + strconv.Itoa(s.cfg.Replica)
	case err == nil:
		m.ID = meta.Stream + ":" + strconv.FormatUint(meta.Sequence.Stream, 10)
	default:
		// Only a message not delivered by JetStream lacks metadata; its
		// reply subject is still unique per message (numaflow-nats
		// refuses such a message, so Numaflow has no ID to match).
		m.ID = jm.Reply()
	}
	if err == nil {
		stored = meta.Timestamp
	}
	natsjs.DecodeHeaders(m, jm.Headers(), stored)
}

// RedeliversInFlight says yes: the server hands a message out again once
// its ack wait ran out (with MV_JETSTREAM_IN_PROGRESS=false, or a runner
// that could not say it was still working on it), and the engine then
// drops that delivery while the first is in flight, as numaflow-core's
// tracker does for every source.
func (s *Source) RedeliversInFlight() bool { return true }

// Dropped forgets deliveries the engine dropped as already in flight:
// they get no ack of their own (the first delivery's settles the
// message), so no in-progress either.
func (s *Source) Dropped(msgs []*runner.Message) { s.release(msgs) }

func (s *Source) release(msgs []*runner.Message) {
	if !s.cfg.InProgress {
		return
	}
	s.mu.Lock()
	for _, m := range msgs {
		if jm, ok := m.Offset.(jetstream.Msg); ok {
			delete(s.held, jm)
		}
	}
	s.mu.Unlock()
}

// Ack acknowledges messages that reached a final state. With
// MV_JETSTREAM_ACK_SYNC (the default) it returns only when the server
// confirmed that it took every ack (see ackConfirmed); an ack it could not confirm makes the call fail, and
// the message is redelivered after the ack wait unless a retry confirms it.
func (s *Source) Ack(ctx context.Context, msgs []*runner.Message) error {
	// Whatever happens now, the engine is done with these messages: stop
	// extending their ack deadline, so an ack that is lost leads to a
	// redelivery rather than a message held for ever.
	s.release(msgs)
	if !s.cfg.AckSync {
		return s.ackAsync(ctx, msgs)
	}
	return s.ackConfirmed(ctx, msgs)
}

// ackAck is the body of a positive ack in the JetStream protocol.
var ackAck = []byte("+ACK")

// ackConfirmed sends the acks and, from a single server, has it confirm
// the last one: a consumer takes the acks of one connection in the order
// they came (one queue, one goroutine: nats-server's consumer.ackMsgs), so
// its answer to the last says every earlier one was taken. That holds only
// if the connection stayed the same while they went out (acks written
// before a reconnect may be lost); otherwise every ack is confirmed on its
// own. In a cluster it does not hold (a consumer leader that steps down
// drops the acks it queued, a route between servers that reconnects drops
// what it buffered, and the new leader still confirms the last), so there
// every ack is confirmed. One round trip per batch either way.
func (s *Source) ackConfirmed(ctx context.Context, msgs []*runner.Message) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.APITimeout)
	defer cancel()
	if len(msgs) == 0 {
		return nil
	}
	if s.nc.ConnectedClusterName() != "" {
		return s.ackEach(ctx, msgs)
	}
	for _, m := range msgs {
		if _, ok := m.Offset.(jetstream.Msg); !ok {
			return fmt.Errorf("jetstream source: ack of message %s without a JetStream handle (a bug)", m.ID)
		}
	}
	reconnects := s.nc.Stats().Reconnects
	last := len(msgs) - 1
	for _, m := range msgs[:last] {
		if err := s.nc.Publish(m.Offset.(jetstream.Msg).Reply(), ackAck); err != nil {
			return fmt.Errorf("jetstream source: send ack %s: %w", m.ID, err)
		}
	}
	_, err := s.nc.RequestWithContext(ctx, msgs[last].Offset.(jetstream.Msg).Reply(), ackAck)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		// The consumer that delivered these messages is gone, so nothing
		// confirms the acks.
		return fmt.Errorf("jetstream source: acks of %d messages not taken (no responders: the consumer is gone); they are redelivered", len(msgs))
	case err != nil:
		return fmt.Errorf("jetstream source: the ack of the last of %d messages not confirmed by the server within %s (they are redelivered after the ack wait unless a retry succeeds): %w",
			len(msgs), s.cfg.APITimeout, err)
	case s.nc.Stats().Reconnects != reconnects:
		return s.ackEach(ctx, msgs)
	}
	return nil
}

// ackEach sends every ack with its own reply subject under one inbox and
// waits for the server's confirmations together: one round trip per
// batch, with no goroutine per message (what DoubleAck would cost).
func (s *Source) ackEach(ctx context.Context, msgs []*runner.Message) error {
	inbox := s.nc.NewInbox()
	replies := make(chan *nats.Msg, len(msgs)+16)
	sub, err := s.nc.ChanSubscribe(inbox+".*", replies)
	if err != nil {
		return fmt.Errorf("jetstream source: subscribe for ack confirmations: %w", err)
	}
	defer sub.Unsubscribe()
	prefix := inbox + "."
	for i, m := range msgs {
		jm, ok := m.Offset.(jetstream.Msg)
		if !ok {
			return fmt.Errorf("jetstream source: ack of message %s without a JetStream handle (a bug)", m.ID)
		}
		err := s.nc.PublishMsg(&nats.Msg{Subject: jm.Reply(), Reply: prefix + strconv.Itoa(i), Data: ackAck})
		if err != nil {
			return fmt.Errorf("jetstream source: send ack %s: %w", m.ID, err)
		}
	}
	confirmed := make([]bool, len(msgs))
	left := len(msgs)
	for left > 0 {
		select {
		case r := <-replies:
			if st := r.Header.Get("Status"); st != "" {
				// "503 no responders": the consumer that delivered these
				// messages is gone, so nothing confirms the acks.
				return fmt.Errorf("jetstream source: acks of %d messages not taken (status %s %s: the consumer is gone); they are redelivered",
					len(msgs), st, r.Header.Get("Description"))
			}
			i, err := strconv.Atoi(strings.TrimPrefix(r.Subject, prefix))
			if err == nil && i >= 0 && i < len(msgs) && !confirmed[i] {
				confirmed[i] = true
				left--
			}
		case <-ctx.Done():
			return fmt.Errorf("jetstream source: %d of %d acks not confirmed by the server within %s (they are redelivered after the ack wait unless a retry succeeds): %w",
				left, len(msgs), s.cfg.APITimeout, ctx.Err())
		}
	}
	return nil
}

// ackAsync sends the acks without waiting for confirmations, then flushes
// the connection so that at least the server has received them.
func (s *Source) ackAsync(ctx context.Context, msgs []*runner.Message) error {
	for _, m := range msgs {
		jm, ok := m.Offset.(jetstream.Msg)
		if !ok {
			return fmt.Errorf("jetstream source: ack of message %s without a JetStream handle (a bug)", m.ID)
		}
		if err := jm.Ack(); err != nil && !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
			return fmt.Errorf("jetstream source: ack %s: %w", m.ID, err)
		}
	}
	fctx, cancel := context.WithTimeout(ctx, s.cfg.APITimeout)
	defer cancel()
	if err := s.nc.FlushWithContext(fctx); err != nil {
		return fmt.Errorf("jetstream source: flush %d acks: %w", len(msgs), err)
	}
	return nil
}

var _ runner.GroupProgressReader = (*Source)(nil)

// Ready reports whether the connection to the server is up and the
// consumer exists.
func (s *Source) Ready(context.Context) error {
	if err := natsjs.StatusError(s.nc); err != nil {
		return fmt.Errorf("jetstream source: %w", err)
	}
	s.consMu.Lock()
	defer s.consMu.Unlock()
	if !s.missingSince.IsZero() {
		return fmt.Errorf("jetstream source: consumer %q on stream %q missing for %v", s.cfg.Consumer, s.cfg.Stream, time.Since(s.missingSince).Round(time.Millisecond))
	}
	return nil
}

// Close stops extending ack deadlines, hands back what arrives for a fetch
// the shutdown cut short, flushes outstanding acks and nacks and closes the
// connection. Messages still unacked are redelivered after
// the ack wait.
func (s *Source) Close(ctx context.Context) error {
	s.stopOnce.Do(func() { close(s.stop) })
	if s.nc == nil {
		return nil // never connected
	}
	<-s.done
	// A fetch cut short by the shutdown ends when the server expires it
	// (within the read timeout); wait for it, bounded by ctx.
	lateDone := make(chan struct{})
	go func() { s.late.Wait(); close(lateDone) }()
	select {
	case <-lateDone:
	case <-ctx.Done():
	}
	var err error
	if s.nc.IsConnected() {
		if ferr := s.nc.FlushWithContext(ctx); ferr != nil {
			err = fmt.Errorf("jetstream source: flush before close: %w", ferr)
		}
	}
	s.nc.Close()
	return err
}
