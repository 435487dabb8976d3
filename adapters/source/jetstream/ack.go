package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/monovertex/monovertex/runner"
)

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
// confirmed every ack; an ack it could not confirm makes the call fail, and
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

// ackConfirmed sends every ack with its own reply subject under one inbox
// and waits for the server's confirmations together: one round trip per
// batch, with no goroutine per message (what DoubleAck would cost).
func (s *Source) ackConfirmed(ctx context.Context, msgs []*runner.Message) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.APITimeout)
	defer cancel()
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
			return fmt.Errorf("jetstream source: ack of message %s without a JetStream handle (a bug)", m.SourceID())
		}
		err := s.nc.PublishMsg(&nats.Msg{Subject: jm.Reply(), Reply: prefix + strconv.Itoa(i), Data: ackAck})
		if err != nil {
			return fmt.Errorf("jetstream source: send ack %s: %w", m.SourceID(), err)
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
			return fmt.Errorf("jetstream source: ack of message %s without a JetStream handle (a bug)", m.SourceID())
		}
		if err := jm.Ack(); err != nil && !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
			return fmt.Errorf("jetstream source: ack %s: %w", m.SourceID(), err)
		}
	}
	fctx, cancel := context.WithTimeout(ctx, s.cfg.APITimeout)
	defer cancel()
	if err := s.nc.FlushWithContext(fctx); err != nil {
		return fmt.Errorf("jetstream source: flush %d acks: %w", len(msgs), err)
	}
	return nil
}

// Nack asks the server to redeliver the messages after the nack's delay,
// or after MV_JETSTREAM_NAK_DELAY when it asks for none. A nack that gets
// lost only means redelivery after the ack wait instead. With
// MaxDeliveries, a message delivered that many times already is
// terminated instead (TermWithReason), as a consumer's MaxDeliver would
// stop it: the server does not deliver it again.
func (s *Source) Nack(_ context.Context, msgs []*runner.Message, n runner.Nack) error {
	delay := n.Delay
	if delay <= 0 {
		delay = s.cfg.NakDelay
	}
	s.release(msgs)
	var firstErr error
	failed := 0
	for _, m := range msgs {
		jm, ok := m.Offset.(jetstream.Msg)
		if !ok {
			continue
		}
		var err error
		switch {
		case n.MaxDeliveries > 0 && delivered(jm) >= uint64(n.MaxDeliveries):
			s.log.Warnw("message delivered as often as its nack's max_deliveries allows: terminated, the server will not deliver it again", "id", m.SourceID(), "max_deliveries", n.MaxDeliveries, "reason", n.Reason)
			err = jm.TermWithReason(termReason(n))
		case delay > 0:
			err = jm.NakWithDelay(delay)
		default:
			err = jm.Nak()
		}
		if err != nil && !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
			failed++
			if firstErr == nil {
				firstErr = err
			}
		}
	}
	if failed > 0 {
		return fmt.Errorf("jetstream source: %d of %d nacks not sent (redelivered after the ack wait instead): %w", failed, len(msgs), firstErr)
	}
	return nil
}

// termReason is the reason a terminated message carries in the server's
// advisory.
func termReason(n runner.Nack) string {
	r := fmt.Sprintf("max_deliveries %d reached", n.MaxDeliveries)
	if n.Reason != "" {
		r += ": " + n.Reason
	}
	return r
}
