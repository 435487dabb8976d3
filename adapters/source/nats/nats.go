// Package nats is Numaflow's NATS source: a core NATS queue subscription
// (spec.source.nats). Core NATS keeps no messages and takes no acks, so
// the source is at most once, as in Numaflow: a message is lost if no
// replica is subscribed when it is published, if the client's buffer
// overflows, or if the runner stops with messages buffered or read and
// not yet written (both counted and logged). Acks and nacks
// do nothing; there is no pending count. Messages carry their payload
// only, with a unique ID and the time they were read as event time, as
// numaflow-nats makes them (the ID: see newID).
package nats

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
	"go.uber.org/zap"

	"github.com/monovertex/monovertex/internal/natsjs"
	"github.com/monovertex/monovertex/runner"
)

// Config holds the NATS source's settings.
type Config struct {
	URL     string `envconfig:"MV_NATS_URL" desc:"NATS server URL, or a comma-separated list, e.g. nats://nats:4222 (user:pass@ or token@ in it)"`
	Subject string `envconfig:"MV_NATS_SUBJECT" desc:"subject to subscribe to (wildcards allowed)"`
	Queue   string `envconfig:"MV_NATS_QUEUE" desc:"queue group shared by all replicas: each message goes to one of them"`
	// Auth is TLS and the user, NKey or token, as the JetStream adapters'
	// but under MV_NATS.
	natsjs.Auth   `envconfig:"MV_NATS"`
	BufferBytes   int64         `envconfig:"MV_NATS_BUFFER_BYTES" default:"67108864" desc:"most bytes of messages the client holds before the runner reads them; past it the client drops messages (counted and logged)"`
	BufferMsgs    int           `envconfig:"MV_NATS_BUFFER_MESSAGES" default:"65536" desc:"most messages the client holds before the runner reads them, whatever their size; past it the client drops messages (counted and logged)"`
	ReconnectWait time.Duration `envconfig:"MV_NATS_RECONNECT_WAIT" default:"500ms" desc:"pause between reconnect attempts (the client reconnects for ever)"`
	// Connection takes the connection's state changes (set from
	// runner.Env, not from the environment).
	Connection runner.Connection `ignored:"true"`
	// MessageIDs is how the runner forms message IDs (set from
	// runner.Env, not from the environment).
	MessageIDs runner.MessageIDs `ignored:"true"`
	// Replica is this runner's MV_REPLICA (set from runner.Env), which
	// numaflow-core's NATS offsets carry.
	Replica int `ignored:"true"`
}

func (c *Config) auth() natsjs.Auth {
	a := c.Auth
	a.Prefix = "MV_NATS"
	return a
}

// Validate checks the values that parse but cannot be used.
func (c *Config) Validate(runner.Role) error {
	if strings.TrimSpace(c.URL) == "" {
		return &runner.ConfigError{Var: "MV_NATS_URL", Value: c.URL, Reason: "is required for MV_SOURCE=nats, e.g. nats://nats:4222"}
	}
	if err := natsjs.CheckURLs(c.URL); err != nil {
		return &runner.ConfigError{Var: "MV_NATS_URL", Value: c.URL, Reason: err.Error()}
	}
	switch {
	case !validSubject(c.Subject):
		return &runner.ConfigError{Var: "MV_NATS_SUBJECT", Value: c.Subject, Reason: "must be a subject such as orders.* or orders.>: dot-separated non-empty tokens without white space, '*' and '>' only as whole tokens, '>' only last"}
	case c.Queue == "" || strings.ContainsAny(c.Queue, " \t\r\n"):
		return &runner.ConfigError{Var: "MV_NATS_QUEUE", Value: c.Queue, Reason: "must name a queue group (no white space): Numaflow subscribes every replica in one"}
	case c.BufferBytes < 1<<20:
		return &runner.ConfigError{Var: "MV_NATS_BUFFER_BYTES", Value: fmt.Sprint(c.BufferBytes), Reason: "must be at least 1048576 (1 MiB)"}
	case c.BufferMsgs < 1 || c.BufferMsgs > maxBufferMsgs:
		return &runner.ConfigError{Var: "MV_NATS_BUFFER_MESSAGES", Value: fmt.Sprint(c.BufferMsgs), Reason: fmt.Sprintf("must be 1 to %d", maxBufferMsgs)}
	case c.ReconnectWait <= 0:
		return &runner.ConfigError{Var: "MV_NATS_RECONNECT_WAIT", Value: c.ReconnectWait.String(), Reason: "must be a positive duration such as 500ms"}
	}
	a := c.auth()
	return a.Validate("MV_NATS_URL", c.URL)
}

// maxBufferMsgs bounds MV_NATS_BUFFER_MESSAGES: the client allocates a
// channel of that many slots up front (8 bytes each).
const maxBufferMsgs = 16 << 20

// validSubject reports whether s can be subscribed to, as nats-server
// reads it: non-empty tokens without white space, a '>' token only last
// ("a.b*" is a literal token, as the server takes it).
func validSubject(s string) bool {
	if s == "" || strings.ContainsAny(s, " \t\r\n\f") {
		return false
	}
	tokens := strings.Split(s, ".")
	for i, tok := range tokens {
		if tok == "" || tok == ">" && i != len(tokens)-1 {
			return false
		}
	}
	return true
}

func init() {
	runner.RegisterSource("nats", func(ctx context.Context, env runner.Env, cfg *Config) (runner.Source, error) {
		cfg.Connection = env.Connection
		cfg.MessageIDs, cfg.Replica = env.MessageIDs, env.Replica
		return New(ctx, *cfg, fmt.Sprintf("monovertex %s/%d source", env.Name, env.Replica), env.Logger)
	})
}

// Source reads a core NATS queue subscription.
type Source struct {
	cfg Config
	// replica is "-<MV_REPLICA>", the end of every ID under
	// MV_MESSAGE_IDS=numaflow.
	replica string
	log     *zap.SugaredLogger
	// dialer dials the server; nc and sub are set by Connect.
	dialer *natsjs.Dialer
	nc     *natsgo.Conn
	sub    *natsgo.Subscription

	// dropped is the client's count of messages it dropped, last logged.
	dropped atomic.Int64
	stop    sync.Once
}

var _ runner.Connector = (*Source)(nil)

// New reads the TLS and NKey files and returns the source, which talks to
// the server only from Connect on.
func New(_ context.Context, cfg Config, name string, log *zap.SugaredLogger) (*Source, error) {
	if log == nil {
		log = zap.NewNop().Sugar()
	}
	// numaflow-nats pings every 3s, so a dead connection (and this
	// replica's place in the queue group) is noticed in seconds.
	d, err := natsjs.NewDialer(natsjs.ConnOptions{URL: cfg.URL, Auth: cfg.auth(), Name: name, ReconnectWait: cfg.ReconnectWait,
		PingInterval: 3 * time.Second, SyncQueueLen: cfg.BufferMsgs, Logger: log, Connection: cfg.Connection})
	if err != nil {
		return nil, err
	}
	return &Source{cfg: cfg, replica: "-" + strconv.Itoa(cfg.Replica), log: log, dialer: d}, nil
}

// Connect dials the server and subscribes. A server that cannot be
// reached fails the attempt, and the engine tries again; once connected,
// outages are ridden out by reconnecting.
func (s *Source) Connect(context.Context) error {
	if s.nc != nil {
		return nil
	}
	cfg := s.cfg
	nc, err := s.dialer.Dial()
	if err != nil {
		return err
	}
	sub, err := nc.QueueSubscribeSync(cfg.Subject, cfg.Queue)
	if err != nil {
		nc.Close()
		return fmt.Errorf("subscribe to %q in queue group %q: %w", cfg.Subject, cfg.Queue, err)
	}
	if err := sub.SetPendingLimits(cfg.BufferMsgs, int(cfg.BufferBytes)); err != nil {
		nc.Close()
		return fmt.Errorf("set the subscription's buffer: %w", err)
	}
	// The server has the subscription once a round trip has passed.
	if err := nc.Flush(); err != nil {
		nc.Close()
		return fmt.Errorf("subscribe to %q: %w", cfg.Subject, err)
	}
	s.log.Infow("subscribed to NATS (at most once: core NATS keeps nothing)", "subject", cfg.Subject, "queue", cfg.Queue)
	s.nc, s.sub = nc, sub
	return nil
}

// Read returns up to max messages, waiting until the batch is full or
// timeout has passed, as numaflow-nats does.
func (s *Source) Read(ctx context.Context, max int, timeout time.Duration) ([]*runner.Message, error) {
	s.noteDrops()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var out []*runner.Message
	for len(out) < max {
		m, err := s.sub.NextMsgWithContext(ctx)
		if err != nil {
			switch {
			case ctx.Err() != nil:
				return out, nil
			case errors.Is(err, natsgo.ErrBadSubscription), errors.Is(err, natsgo.ErrConnectionClosed):
				if len(out) > 0 {
					return out, nil
				}
				return nil, fmt.Errorf("NATS subscription to %q ended: %w", s.cfg.Subject, err)
			case errors.Is(err, natsgo.ErrSlowConsumer):
				continue // counted by noteDrops
			case errors.Is(err, natsgo.ErrNoResponders):
				// nats.go takes an empty message with a 503 status for a
				// request's "no responders" and hands back only this error;
				// Numaflow passes it on as an empty message.
				out = append(out, &runner.Message{ID: s.newID(), Value: []byte{}, EventTime: time.Now()})
				continue
			}
			if len(out) > 0 {
				return out, nil // the error comes back at the next read
			}
			return nil, fmt.Errorf("read from NATS subject %q: %w", s.cfg.Subject, err)
		}
		out = append(out, &runner.Message{ID: s.newID(), Value: m.Data, EventTime: time.Now()})
	}
	return out, nil
}

// newID is a message's ID: a NUID, or under MV_MESSAGE_IDS=numaflow
// numaflow-core's offset string, StringOffset(message.id, replica) printed
// "<id>-<replica>" (source/nats.rs, message.rs). numaflow-nats makes
// message.id a random UUID v4 (Uuid::new_v4, nats.rs); so does this, in
// the same lower-case hyphenated form. Core NATS redelivers nothing, so no
// ID need be the same twice.
func (s *Source) newID() string {
	if s.cfg.MessageIDs != runner.NumaflowIDs {
		return nuid.Next()
	}
	return uuid.NewString() + s.replica
}

// noteDrops logs the messages the client dropped since the last call:
// they are lost, as core NATS keeps nothing.
func (s *Source) noteDrops() {
	n, err := s.sub.Dropped()
	if err != nil {
		return
	}
	if prev := s.dropped.Swap(int64(n)); int64(n) > prev {
		s.log.Warnw("the NATS client dropped messages it could not buffer (MV_NATS_BUFFER_BYTES, MV_NATS_BUFFER_MESSAGES); they are lost", "dropped", int64(n)-prev, "subject", s.cfg.Subject)
	}
}

// Buffered is how many messages the client holds that Read has not
// returned yet: what StopReading would lose now.
func (s *Source) Buffered() (int, error) {
	n, _, err := s.sub.Pending()
	return n, err
}

// Ack does nothing: core NATS takes no acks.
func (s *Source) Ack(context.Context, []*runner.Message) error { return nil }

// Nack does nothing, as in Numaflow: core NATS cannot redeliver.
func (s *Source) Nack(context.Context, []*runner.Message, runner.Nack) error { return nil }

// StopReading leaves the queue group at once, so the server sends the
// next messages to the other replicas instead of to one that will not
// read them. What the client buffered and the engine did not read is
// lost (core NATS cannot take it back): it is counted in a warning.
func (s *Source) StopReading() {
	s.stop.Do(func() {
		s.noteDrops()
		buffered, _, _ := s.sub.Pending()
		if err := s.sub.Unsubscribe(); err != nil && !errors.Is(err, natsgo.ErrConnectionClosed) {
			s.log.Warnw("leave the NATS queue group", "error", err)
		}
		if buffered > 0 {
			s.log.Warnw("stopped reading with NATS messages buffered and not read; core NATS cannot take them back, so they are lost", "lost", buffered, "subject", s.cfg.Subject)
		}
		// Only while connected: a reconnecting client sends the
		// unsubscribe itself, and a flush would wait out its timeout.
		if s.nc.IsConnected() {
			_ = s.nc.FlushTimeout(time.Second)
		}
	})
}

// Ready reports whether the connection is up.
func (s *Source) Ready(context.Context) error { return natsjs.StatusError(s.nc) }

// Close leaves the queue group and closes the connection.
func (s *Source) Close(context.Context) error {
	if s.nc == nil {
		return nil // never connected
	}
	s.StopReading()
	s.nc.Close()
	return nil
}
