package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/monovertex/monovertex/internal/natsjs"
	"github.com/monovertex/monovertex/runner"
)

// infoMaxAge is how long a fetched consumer info answers further questions.
const infoMaxAge = 500 * time.Millisecond

// consumerInfo returns the consumer's info, fetching it unless the last
// fetch is younger than infoMaxAge.
func (s *Source) consumerInfo(ctx context.Context) (*jetstream.ConsumerInfo, error) {
	s.infoMu.Lock()
	defer s.infoMu.Unlock()
	if s.info != nil && time.Since(s.infoAt) < infoMaxAge {
		return s.info, nil
	}
	ictx, cancel := context.WithTimeout(ctx, s.cfg.APITimeout)
	defer cancel()
	info, err := s.consumer().Info(ictx)
	if err != nil {
		return nil, fmt.Errorf("jetstream source: consumer info of %s/%s: %w", s.cfg.Stream, s.cfg.Consumer, err)
	}
	s.info, s.infoAt = info, time.Now()
	return info, nil
}

// ensureConsumer binds to the durable consumer, creating it if missing.
// An existing consumer is used as it is (its owner may have tuned it), but
// one that cannot work with this source is refused.
func ensureConsumer(ctx context.Context, js jetstream.JetStream, cfg Config, log *zap.SugaredLogger) (jetstream.Consumer, error) {
	actx, cancel := context.WithTimeout(ctx, 2*cfg.APITimeout)
	defer cancel()
	stream, err := js.Stream(actx, cfg.Stream)
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, &runner.ConfigError{Var: "MV_JETSTREAM_STREAM", Value: cfg.Stream, Reason: "the stream does not exist on the server: create it (nats stream add) or name an existing one"}
		}
		return nil, fmt.Errorf("look up stream %q: %w", cfg.Stream, err)
	}
	if subjects := stream.CachedInfo().Config.Subjects; cfg.FilterSubject != "" && !overlapsAny(cfg.FilterSubject, subjects) {
		// The server (2.10 on) creates such a consumer, which then reads
		// nothing, ever, without a word.
		return nil, &runner.ConfigError{Var: "MV_JETSTREAM_FILTER_SUBJECT", Value: cfg.FilterSubject,
			Reason: fmt.Sprintf("matches none of stream %s's subjects (%s), so the consumer would never get a message: name a subject inside them", cfg.Stream, strings.Join(subjects, ", "))}
	}
	cons, err := stream.Consumer(actx, cfg.Consumer)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		cc := jetstream.ConsumerConfig{
			Durable:       cfg.Consumer,
			Description:   createdBy,
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       cfg.AckWait,
			MaxAckPending: cfg.MaxAckPending,
			MaxDeliver:    -1,
			FilterSubject: cfg.FilterSubject,
		}
		// Validated, so it parses.
		cc.DeliverPolicy, cc.OptStartSeq, cc.OptStartTime, _ = natsjs.ParseDeliverPolicy(cfg.DeliverPolicy)
		// Replicas starting together all try this; the server accepts a
		// create with an identical config as a no-op, and for a config that
		// differs we simply bind to whichever won.
		cons, err = stream.CreateConsumer(actx, cc)
		if errors.Is(err, jetstream.ErrConsumerExists) {
			cons, err = stream.Consumer(actx, cfg.Consumer)
		}
		if err == nil {
			log.Infow("created durable consumer", "stream", cfg.Stream, "consumer", cfg.Consumer,
				"ackWait", cfg.AckWait, "maxAckPending", cfg.MaxAckPending, "filter", cfg.FilterSubject)
		}
	}
	if errors.Is(err, jetstream.ErrNotPullConsumer) {
		return nil, &runner.ConfigError{Var: "MV_JETSTREAM_CONSUMER", Value: cfg.Consumer, Reason: pushConsumer}
	}
	if err != nil {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.Code == 400 {
			// The server refused the settings of the consumer to create.
			variable, value := "MV_JETSTREAM_CONSUMER", cfg.Consumer
			if cfg.FilterSubject != "" && strings.Contains(strings.ToLower(apiErr.Description), "filter") {
				variable, value = "MV_JETSTREAM_FILTER_SUBJECT", cfg.FilterSubject
			}
			return nil, &runner.ConfigError{Var: variable, Value: value, Reason: "the server refused the consumer: " + apiErr.Description}
		}
		return nil, fmt.Errorf("consumer %q on stream %q: %w", cfg.Consumer, cfg.Stream, err)
	}
	if err := usable(cons.CachedInfo(), cfg.Consumer); err != nil {
		return nil, err
	}
	info := cons.CachedInfo()
	if info.Config.AckWait != cfg.AckWait || info.Config.MaxAckPending != cfg.MaxAckPending {
		log.Infow("using the existing consumer's settings", "consumer", cfg.Consumer,
			"ackWait", info.Config.AckWait, "maxAckPending", info.Config.MaxAckPending)
	}
	return cons, nil
}

// createdBy is the description of a consumer a runner created; such a
// consumer is created again when it is deleted under a running runner.
const createdBy = "monovertex runner (MV_SOURCE=jetstream)"

const pushConsumer = "is a push consumer; the runner needs a pull consumer (delete it and let the runner create one, or name another)"

// usable refuses a consumer this source cannot work with.
func usable(info *jetstream.ConsumerInfo, name string) error {
	switch {
	case info.Config.DeliverSubject != "":
		return &runner.ConfigError{Var: "MV_JETSTREAM_CONSUMER", Value: name, Reason: pushConsumer}
	case info.Config.AckPolicy != jetstream.AckExplicitPolicy:
		return &runner.ConfigError{Var: "MV_JETSTREAM_CONSUMER", Value: name,
			Reason: fmt.Sprintf("has ack policy %s; the runner acks each message after it is written and needs explicit acks (delete it and let the runner create one, or name another)", info.Config.AckPolicy)}
	}
	return nil
}

// consumer returns the bound consumer.
func (s *Source) consumer() jetstream.Consumer {
	s.consMu.Lock()
	defer s.consMu.Unlock()
	return s.cons
}

// consumerGone reports whether err says the consumer no longer exists: a
// pull request to a deleted consumer has no responders, one waiting when
// it is deleted ends with "consumer deleted".
func consumerGone(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound)
}

// rebind is called when the consumer is gone. It binds to the consumer if
// it exists again; creates it again if a runner created it, starting after
// the last ack floor it knows (so nothing unacked is skipped, and a
// deliver policy of "new" loses nothing published meanwhile); and
// otherwise waits for its owner to create it again, failing fatally once
// it has been missing for MV_JETSTREAM_CONSUMER_TIMEOUT.
func (s *Source) rebind(ctx context.Context, cause error) error {
	s.rebindMu.Lock()
	defer s.rebindMu.Unlock()
	old := s.consumer()
	actx, cancel := context.WithTimeout(ctx, 2*s.cfg.APITimeout)
	defer cancel()
	stream, err := s.js.Stream(actx, s.cfg.Stream)
	if err != nil {
		return s.missing(fmt.Errorf("look up stream %q: %w (after: %v)", s.cfg.Stream, err, cause))
	}
	cons, err := stream.Consumer(actx, s.cfg.Consumer)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		bound := old.CachedInfo()
		if bound.Config.Description != createdBy {
			return s.missing(fmt.Errorf("consumer %q on stream %q was deleted, and as the runner did not create it, only its owner may create it again", s.cfg.Consumer, s.cfg.Stream))
		}
		cc := bound.Config
		for k := range cc.Metadata {
			if strings.HasPrefix(k, "_nats.") {
				delete(cc.Metadata, k) // the server's own, set again on create
			}
		}
		// Start after the ack floor, whatever the first policy was: the
		// floor of a consumer created with "new" is where it started.
		cc.DeliverPolicy, cc.OptStartSeq, cc.OptStartTime = jetstream.DeliverByStartSequencePolicy, s.ackFloor(bound)+1, nil
		cons, err = stream.CreateConsumer(actx, cc)
		if errors.Is(err, jetstream.ErrConsumerExists) {
			cons, err = stream.Consumer(actx, s.cfg.Consumer) // another replica was first
		} else if err == nil {
			s.log.Warnw("the consumer was deleted; created it again with the same settings", "stream", s.cfg.Stream, "consumer", s.cfg.Consumer,
				"deliverPolicy", cc.DeliverPolicy.String(), "startSeq", cc.OptStartSeq)
		}
	}
	if err != nil {
		return s.missing(fmt.Errorf("consumer %q on stream %q is gone and could not be bound again: %w", s.cfg.Consumer, s.cfg.Stream, err))
	}
	if err := usable(cons.CachedInfo(), s.cfg.Consumer); err != nil {
		return s.missing(err)
	}
	s.consMu.Lock()
	s.cons, s.missingSince = cons, time.Time{}
	s.consMu.Unlock()
	s.infoMu.Lock()
	s.info = nil
	s.infoMu.Unlock()
	return nil
}

// missing records that the consumer is missing and returns err, made fatal
// once it has been missing for MV_JETSTREAM_CONSUMER_TIMEOUT.
func (s *Source) missing(err error) error {
	now := time.Now()
	s.consMu.Lock()
	defer s.consMu.Unlock()
	if s.missingSince.IsZero() {
		s.missingSince = now
		s.log.Warnw("the consumer is gone; reads fail until it is back", "stream", s.cfg.Stream, "consumer", s.cfg.Consumer,
			"timeout", s.cfg.MissingWait.String(), "error", err)
	}
	if gone := now.Sub(s.missingSince); gone >= s.cfg.MissingWait {
		return runner.Fatal(fmt.Errorf("jetstream source: %w; missing for %v (MV_JETSTREAM_CONSUMER_TIMEOUT), exiting; unacked messages are redelivered once the consumer is back",
			err, gone.Round(time.Millisecond)))
	}
	return fmt.Errorf("jetstream source: %w", err)
}

// ackFloor is the highest stream sequence below which everything was
// acked, from the freshest consumer info known.
func (s *Source) ackFloor(bound *jetstream.ConsumerInfo) uint64 {
	floor := bound.AckFloor.Stream
	s.infoMu.Lock()
	if s.info != nil && s.info.AckFloor.Stream > floor {
		floor = s.info.AckFloor.Stream
	}
	s.infoMu.Unlock()
	return floor
}
