package jetstream

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/monovertex/monovertex/runner"
)

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
			s.log.Warnw("message delivered as often as its nack's max_deliveries allows: terminated, the server will not deliver it again", "id", m.ID, "max_deliveries", n.MaxDeliveries, "reason", n.Reason)
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
