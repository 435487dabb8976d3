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
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/monovertex/monovertex/internal/natsjs"
	"github.com/monovertex/monovertex/runner"
)

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
	nc  *nats.Conn
	js  jetstream.JetStream

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
)

// New connects, finds the durable consumer (creating it when missing) and
// returns the source. The server must be reachable now; later outages are
// ridden out by reconnecting.
func New(ctx context.Context, cfg Config, connName string, log *zap.SugaredLogger) (*Source, error) {
	if log == nil {
		log = zap.NewNop().Sugar()
	}
	nc, err := natsjs.Connect(natsjs.ConnOptions{URL: cfg.URL, Creds: cfg.Creds, Auth: cfg.Auth, Name: connName, ReconnectWait: cfg.ReconnectWait, Logger: log, Connection: cfg.Connection})
	if err != nil {
		return nil, err
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
		return nil, err
	}
	cons, err := ensureConsumer(ctx, js, cfg, log)
	if err != nil {
		closeQuietly()
		return nil, err
	}
	s := &Source{
		cfg: cfg, log: log, nc: nc, js: js, cons: cons,
		held: map[jetstream.Msg]time.Time{},
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	if cfg.InProgress {
		go s.progressLoop()
	} else {
		close(s.done)
	}
	return s, nil
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
		msgs = append(msgs, s.convert(jm))
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

func (s *Source) convert(jm jetstream.Msg) *runner.Message {
	m := &runner.Message{Value: jm.Data(), Offset: jm}
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
	return m
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
